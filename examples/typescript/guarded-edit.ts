// guarded-edit: an edit in a git repository that fails is rolled back by a
// repository snapshot; a system change that fails is rolled back by a disk
// checkpoint, server-side.
//
//   cd sdk/typescript && npm ci && npm run build
//   SBX_SOCKET=/run/sbx/sbx.sock node dist/examples/guarded-edit.js
import { pathToFileURL } from 'node:url';
import { Client, checkpointFor, guarded, randomSuffix } from '@sbx/sdk';

const SETUP = `mkdir -p /workspace/repo && cd /workspace/repo && git init -q && echo hello > greeting.txt &&
git add . && git -c user.name=sbx -c user.email=sbx@example.org commit -qm init`;

export async function main(client = new Client()) {
  await using sb = await client.create({
    name: `ex-guard-${randomSuffix()}`, cpus: 1, memory_mb: 512, network: { internet: false },
  });
  const setup = await sb.exec(SETUP);
  if (setup.exit_code !== 0) throw new Error(`setup: ${setup.stderr}`);

  // An edit, then a failing test: classified `git`.
  const edit = `sed -i 's/hello/goodbye/' greeting.txt && echo new > extra.txt && grep -q hello greeting.txt`;
  console.log(`checkpointFor: ${checkpointFor(edit)}`);
  const g = await guarded(sb, edit, { cwd: '/workspace/repo' });
  const after = (await sb.readText('/workspace/repo/greeting.txt')).trim();
  const extra = (await sb.exec('test -e /workspace/repo/extra.txt')).exit_code === 0;
  console.log(`git: exit ${g.result.exit_code}, undo ${g.undo}, rolled back ${g.rolled_back}; greeting.txt is "${after}", extra.txt exists: ${extra}`);

  // A change outside the repository that fails: classified `checkpoint`.
  const sys = 'echo broken > /etc/app.conf && exit 1';
  const c = await guarded(sb, sys);
  const conf = (await sb.exec('test -e /etc/app.conf')).exit_code === 0;
  console.log(`checkpoint: exit ${c.result.exit_code}, undo ${c.undo} (${c.result.undo?.checkpoint}), rolled back ${c.rolled_back}; /etc/app.conf exists: ${conf}`);
  return { gitUndo: g.undo, gitRolledBack: g.rolled_back, greeting: after, extraExists: extra, cpUndo: c.undo, cpRolledBack: c.rolled_back, confExists: conf };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e) => { console.error(e); process.exit(1); });
}
