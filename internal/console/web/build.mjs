// Builds the console into ../dist (committed; embedded in sbxd by
// internal/console), or into the directory given as the first argument.
// Deterministic: the same sources and package-lock.json give the same
// bytes, which scripts/check-console.sh relies on.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";

import { resolve } from "node:path";

const out = process.argv[2] ? resolve(process.argv[2]) + "/" : new URL("../dist/", import.meta.url).pathname;
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: "src/app.ts" },
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  outdir: out,
  legalComments: "eof",
  logLevel: "warning",
  charset: "utf8",
  loader: { ".css": "css" },
});
copyFileSync("index.html", out + "index.html");
