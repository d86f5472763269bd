// try-in-copy: install a tool in a live copy of the sandbox, verify it, and
// keep the copy only if the check passes. A second attempt, whose check
// fails, leaves the sandbox untouched.
//
//   cd sdk/typescript && npm ci && npm run build
//   SBX_SOCKET=/run/sbx/sbx.sock node dist/examples/try-in-copy.js
import { pathToFileURL } from 'node:url';
import { Client, randomSuffix, tryInCopy } from '@sbx/sdk';

// An "install" that needs no network: the copies start offline.
const INSTALL = `mkdir -p /opt/tool && printf '#!/bin/sh\\necho tool 1.0\\n' > /opt/tool/tool && chmod +x /opt/tool/tool`;
const VERIFY = `/opt/tool/tool | grep -q 'tool 1.0'`;

export async function main(client = new Client()) {
  await using sb = await client.create({
    name: `ex-try-${randomSuffix()}`, cpus: 1, memory_mb: 512, network: { internet: false },
  });
  const before = sb.id;

  const good = await tryInCopy(sb, INSTALL, VERIFY);
  console.log(`install: kept=${good.kept}, id ${before} -> ${good.sandbox.id}, name ${good.sandbox.name}`);
  const installed = await good.sandbox.exec('/opt/tool/tool');
  console.log(`tool says: ${installed.stdout.trim()}`);

  const bad = await tryInCopy(good.sandbox, 'rm -rf /opt/tool', 'test -x /opt/tool/tool');
  console.log(`remove: kept=${bad.kept} (verify exit ${bad.verify?.exit_code}); tool still there: ${(await bad.sandbox.exec('test -x /opt/tool/tool')).exit_code === 0}`);
  return { firstKept: good.kept, secondKept: bad.kept, toolOutput: installed.stdout.trim(), name: sb.name, oldId: before, newId: sb.id };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e) => { console.error(e); process.exit(1); });
}
