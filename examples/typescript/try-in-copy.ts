// try-in-copy: install a tool in a live copy of the sandbox, verify it, and
// keep the copy only if the check passes. A second attempt, whose check
// fails, leaves the sandbox untouched.
//
//   cd sdk/typescript && npm ci && npm run build
//   SBX_SOCKET=/run/sbx/sbx.sock node dist/examples/try-in-copy.js
import { pathToFileURL } from 'node:url';
import { Sandbox, randomSuffix, tryInCopy } from '@sbx/sdk';

// An "install" that needs no network: the copies start offline.
const INSTALL = `mkdir -p /opt/tool && printf '#!/bin/sh\\necho tool 1.0\\n' > /opt/tool/tool && chmod +x /opt/tool/tool`;
const VERIFY = `/opt/tool/tool | grep -q 'tool 1.0'`;

export async function main() {
  await using sb = await Sandbox.create({
    name: `ex-try-${randomSuffix()}`, cpus: 1, memoryMb: 512, network: { internet: false },
  });
  const before = sb.id;

  const good = await tryInCopy(sb, INSTALL, VERIFY);
  console.log(`install: kept=${good.kept}, id ${before} -> ${good.sandbox.id}, name ${good.sandbox.name}`);
  const installed = await good.sandbox.exec('/opt/tool/tool');
  console.log(`tool says: ${installed.stdout.trim()} (exit ${installed.exitCode}, ${installed.durationMs} ms)`);

  const bad = await tryInCopy(good.sandbox, 'rm -rf /opt/tool', 'test -x /opt/tool/tool');
  const still = (await bad.sandbox.exec('test -x /opt/tool/tool')).exitCode === 0;
  console.log(`remove: kept=${bad.kept} (verify exit ${bad.verify?.exitCode}); tool still there: ${still}`);
  if (!good.kept || bad.kept || !still) throw new Error('try-in-copy: sbx did not behave as shown');
  console.log('try-in-copy: OK');
  return { firstKept: good.kept, secondKept: bad.kept, toolOutput: installed.stdout.trim(), name: sb.name, oldId: before, newId: sb.id };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e) => { console.error(e); process.exit(1); });
}
