// guarded-edit: an edit in a git repository that fails is rolled back by a
// repository snapshot; a system change that fails is rolled back by a disk
// checkpoint. sbxd classifies the command and takes the undo: one call.
//
//   cd sdk/typescript && npm ci && npm run build
//   SBX_SOCKET=/run/sbx/sbx.sock node dist/examples/guarded-edit.js
import { pathToFileURL } from 'node:url';
import { Sandbox, checkpointFor, guarded, randomSuffix } from '@sbx/sdk';

const SETUP = `mkdir -p /workspace/repo && cd /workspace/repo && git init -q && echo hello > greeting.txt &&
git add . && git -c user.name=sbx -c user.email=sbx@example.org commit -qm init`;

export async function main() {
  await using sb = await Sandbox.create({
    name: `ex-guard-${randomSuffix()}`, cpus: 1, memoryMb: 512, network: { internet: false },
  });
  const setup = await sb.exec(SETUP);
  if (setup.exitCode !== 0) throw new Error(`setup: ${setup.stderr}`);

  // An edit, then a failing test: class `git`.
  const edit = `sed -i 's/hello/goodbye/' greeting.txt && echo new > extra.txt && grep -q hello greeting.txt`;
  console.log(`checkpointFor: ${await checkpointFor(edit)}`);
  const g = await guarded(sb, edit, { cwd: '/workspace/repo' });
  const after = (await sb.readText('/workspace/repo/greeting.txt')).trim();
  const extra = (await sb.exec('test -e /workspace/repo/extra.txt')).exitCode === 0;
  console.log(`git: exit ${g.result.exitCode}, undo ${g.undo}, rolled back ${g.rolledBack}; greeting.txt is "${after}", extra.txt exists: ${extra}`);

  // A change outside the repository that fails: class `checkpoint`.
  const sys = 'echo broken > /etc/app.conf && exit 1';
  const c = await guarded(sb, sys);
  const conf = (await sb.exec('test -e /etc/app.conf')).exitCode === 0;
  console.log(`checkpoint: exit ${c.result.exitCode}, undo ${c.undo} (${c.result.undo?.checkpoint}), rolled back ${c.rolledBack}; /etc/app.conf exists: ${conf}`);
  if (!g.rolledBack || after !== 'hello' || extra || !c.rolledBack || conf) throw new Error('guarded-edit: sbx did not behave as shown');
  console.log('guarded-edit: OK');
  return { gitUndo: g.undo, gitRolledBack: g.rolledBack, greeting: after, extraExists: extra, cpUndo: c.undo, cpRolledBack: c.rolledBack, confExists: conf };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e) => { console.error(e); process.exit(1); });
}
