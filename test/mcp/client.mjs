// Drives sbx's MCP server with the official MCP TypeScript SDK's client,
// over stdio (`sbx mcp`) or streamable HTTP (sbxd's /v1/mcp), as an agent
// framework would. Exits non-zero, saying why, when sbx did not behave.
//
//   MODE=stdio SBX_BIN=path/to/sbx SBX_SOCKET=... node client.mjs NAME
//   MODE=http SBX_URL=http://127.0.0.1:PORT SBX_API_KEY=... node client.mjs NAME
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const mode = process.env.MODE;
const name = process.argv[2];
const image = process.env.IMAGE || "default";
if (!name || !["stdio", "http"].includes(mode)) {
  console.error("usage: MODE=stdio|http node client.mjs NAME");
  process.exit(2);
}

function fail(msg) {
  console.error(`mcp-client (${mode}): FAIL: ${msg}`);
  process.exit(1);
}

let transport;
if (mode === "stdio") {
  transport = new StdioClientTransport({
    command: process.env.SBX_BIN,
    args: ["mcp", "--socket", process.env.SBX_SOCKET],
    stderr: "inherit",
  });
} else {
  transport = new StreamableHTTPClientTransport(new URL("/v1/mcp", process.env.SBX_URL), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.SBX_API_KEY}` } },
  });
}
const client = new Client({ name: "sbx-mcp-test", version: "1.0.0" });
await client.connect(transport);

const long = { timeout: 300_000 };
async function call(tool, args, opts = {}) {
  const res = await client.callTool({ name: tool, arguments: args }, undefined, { ...long, ...opts });
  const text = (res.content || []).map((c) => c.text || "").join("\n");
  return { res, text, out: res.structuredContent };
}
async function ok(tool, args, opts) {
  const r = await call(tool, args, opts);
  if (r.res.isError) fail(`${tool} ${JSON.stringify(args)} answered a tool error: ${r.text}`);
  return r;
}

// 1. The tools, each with a description and an input schema.
const want = ["create_sandbox", "list_sandboxes", "exec", "read_file", "write_file", "list_files",
  "checkpoint", "list_checkpoints", "diff", "restore", "fork", "try_in_copy", "snapshot",
  "go_back_to", "set_network", "network_log"];
const { tools } = await client.listTools();
for (const w of want) {
  const t = tools.find((t) => t.name === w);
  if (!t) fail(`tools/list lacks ${w}: ${tools.map((t) => t.name).join(", ")}`);
  if (!t.description || t.inputSchema?.type !== "object") fail(`${w} has no description or input schema`);
}

// 2. An error a model can act on.
{
  const r = await call("exec", { sandbox: `${name}-missing`, command: "true" });
  if (!r.res.isError || !r.text.includes("sandbox_not_found") || !r.text.includes("create_sandbox")) {
    fail(`exec on a missing sandbox: isError ${r.res.isError}, text ${r.text}`);
  }
}

// 3. A sandbox, a file, and a guarded exec that fails and rolls back.
let progress = 0;
const onprogress = () => { progress++; };
const sb = (await ok("create_sandbox", { name, image }, { onprogress })).out;
if (sb.name !== name || sb.state !== "running") fail(`create_sandbox answered ${JSON.stringify(sb)}`);
await ok("write_file", { sandbox: name, path: "/workspace/proj/keep.txt", content: "precious\n" });
const g = (await ok("exec", { sandbox: name, command: "rm -rf /workspace/proj && exit 3", undo: "auto", rollback_on_failure: true })).out;
if (g.exit_code !== 3 || !g.undo || !g.undo.rolled_back) fail(`guarded exec: ${JSON.stringify(g)}`);
let f = (await ok("read_file", { sandbox: name, path: "/workspace/proj/keep.txt" })).out;
if (f.content !== "precious\n") fail(`after the rollback keep.txt is ${JSON.stringify(f.content)}`);

// 4. A fork, with progress: its first lines come while it captures, long
// before its answer. (A btrfs checkpoint's one line comes a few ms before
// its result, and the TypeScript SDK runs a notification's handler in a
// microtask, after a result read in the same chunk of stdio: on a loaded
// machine that line is dropped, so the check is made on the fork.) The
// copy is named after the sandbox, for the test's cleanup.
progress = 0;
const copy = (await ok("fork", { sandbox: name, name: `${name}-copy` }, { onprogress })).out;
if (copy.name !== `${name}-copy` || copy.state !== "running") fail(`fork answered ${JSON.stringify(copy)}`);
if (progress === 0) fail("fork reported no progress to a client that asked for it");

// 5. A checkpoint, a change, its diff, and a restore.
const cp = (await ok("checkpoint", { sandbox: name, comment: "before the edit" }, { onprogress })).out;
if (!/^v\d+$/.test(cp.id)) fail(`checkpoint answered ${JSON.stringify(cp)}`);
await ok("exec", { sandbox: name, command: "echo changed > /workspace/proj/keep.txt" });
const d = (await ok("diff", { sandbox: name, from: cp.id })).out;
if (!(d.modified || []).some((c) => c.path === "/workspace/proj/keep.txt")) fail(`diff: ${JSON.stringify(d)}`);
await ok("restore", { sandbox: name, checkpoint: cp.id });
f = (await ok("read_file", { sandbox: name, path: "/workspace/proj/keep.txt" })).out;
if (f.content !== "precious\n") fail(`after the restore keep.txt is ${JSON.stringify(f.content)}`);
const cps = (await ok("list_checkpoints", { sandbox: name })).out;
if (!cps.checkpoints.some((c) => c.id === cp.id)) fail(`list_checkpoints: ${JSON.stringify(cps)}`);

// 6. Bad arguments are tool errors naming the field, not protocol failures.
{
  const r = await call("restore", { sandbox: name, checkpoint: "v999" });
  if (!r.res.isError || !r.text.includes("checkpoint_not_found") || !r.text.includes("list_checkpoints")) {
    fail(`restore of a missing checkpoint: ${r.text}`);
  }
}

// 7. The network, off.
const rules = (await ok("set_network", { sandbox: name, internet: false })).out;
if (rules.internet !== false) fail(`set_network: ${JSON.stringify(rules)}`);
await ok("network_log", { sandbox: name });

await client.close();
console.log(`mcp-client (${mode}): OK`);
