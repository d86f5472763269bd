// chain: five steps, each remembered as a memory snapshot; then go back to
// step 2 (files, memory and processes as they were) and carry on.
//
//   cd sdk/typescript && npm ci && npm run build
//   SBX_SOCKET=/run/sbx/sbx.sock node dist/examples/chain.js
import { pathToFileURL } from 'node:url';
import { Runtime, Sandbox, chain, goBackTo, randomSuffix, remember } from '@sbx/sdk';

export async function main() {
  const runtime = new Runtime();
  await using sb = await Sandbox.create({
    name: `ex-chain-${randomSuffix()}`, cpus: 1, memoryMb: 512, network: { internet: false },
  });
  // A process whose memory only a snapshot keeps: it counts the steps.
  await sb.start(['sh', '-c', 'n=0; while sleep 0.2; do n=$((n+1)); echo $n > /tmp/ticks.new && mv /tmp/ticks.new /tmp/ticks; done']);
  const ids: string[] = [];
  try {
    for (let i = 1; i <= 5; i++) {
      const r = await sb.exec(`echo step-${i} >> /workspace/log.txt`);
      if (r.exitCode !== 0) throw new Error(r.stderr);
      const snap = await remember(sb, `step-${i}`);
      ids.push(snap.id);
      console.log(`remembered step-${i}: ${snap.id}`);
    }
    const steps = (await chain(sb)).map((s) => s.name);
    console.log(`chain: ${steps.join(' -> ')}`);

    const oldId = sb.id;
    await goBackTo(sb, 'step-2');
    const log = (await sb.readText('/workspace/log.txt')).trim().split('\n');
    const ticking = (await sb.exec('pgrep -f "sleep 0.2" >/dev/null || pgrep sh >/dev/null')).exitCode === 0;
    console.log(`back at step-2: ${sb.name} (${oldId} -> ${sb.id}), log: ${log.join(', ')}, counter running: ${ticking}`);
    await sb.exec('echo step-3b >> /workspace/log.txt');
    if (log.join(',') !== 'step-1,step-2' || sb.id === oldId) throw new Error('chain: sbx did not behave as shown');
    console.log('chain: OK');
    return { steps, log, name: sb.name, oldId, newId: sb.id };
  } finally {
    for (const id of ids) await runtime.snapshots.delete(id).catch(() => {});
    runtime.close();
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e) => { console.error(e); process.exit(1); });
}
