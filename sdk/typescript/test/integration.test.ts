// Integration tests against a real sbxd: SBX_SOCKET (Unix socket) and/or
// SBX_URL + SBX_API_KEY (TCP). Without either they are skipped, unless
// CI=true, where they fail instead.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import ts from 'typescript';
import {
  Runtime, ConflictError, FileNotFoundError, InvalidArgumentError, NotFoundError, SandboxNotFoundError, SnapshotNotFoundError, UnauthorizedError,
  chain, checkpointFor, goBackTo, guarded, randomSuffix, remember, tryInCopy, type Pty, type Sandbox,
} from '../src/index.js';

/** Reads the terminal until its output (from the start) contains want. */
async function screenUntil(p: Pty, seen: { text: string }, want: string): Promise<void> {
  while (!seen.text.includes(want)) {
    const b = await p.read();
    if (b === null) assert.fail(`the terminal ended without showing ${JSON.stringify(want)}: ${JSON.stringify(seen.text)}`);
    seen.text += b.toString('utf8');
  }
}

const env = process.env;
const ci = env.CI === 'true';
const haveSocket = !!env.SBX_SOCKET;
const haveTcp = !!env.SBX_URL;
const configured = haveSocket || haveTcp;
const LABEL = { 'sdk-ts-test': '1' };
const SMALL = { cpus: 1, memoryMb: 512, network: { internet: false }, labels: LABEL };
const T = { timeout: 180_000 };

function skipReason(need: boolean, what: string): string | false {
  if (need) return false;
  if (ci) return false; // the test runs and fails below
  return `${what} not set`;
}

function requireConfigured(need: boolean, what: string) {
  if (!need) assert.fail(`CI=true but ${what} is not set: integration tests must run in CI`);
}

const socketClient = () => new Runtime({ socket: env.SBX_SOCKET });
const tcpClient = (key = env.SBX_API_KEY) => new Runtime({ url: env.SBX_URL, apiKey: key });
const mainClient = () => (haveSocket ? socketClient() : tcpClient());
const uname = (p: string) => `ts-${p}-${randomSuffix()}`;

async function basics(client: Runtime) {
  const name = uname('basic');
  const sb = await client.create({ name, ...SMALL });
  try {
    assert.equal(sb.name, name);
    assert.match(sb.id, /^sbx_[0-9a-f]{16}$/);
    const r = await sb.exec('echo hello; echo oops >&2; exit 4');
    assert.equal(r.stdout, 'hello\n');
    assert.equal(r.stderr, 'oops\n');
    assert.equal(r.exitCode, 4);
    const argv = await sb.exec(['printf', '%s|', 'a b', 'c'], { cwd: '/tmp', env: { X: '1' } });
    assert.equal(argv.stdout, 'a b|c|');
    const w = await sb.writeFile('/workspace/dir/a.txt', 'content\n', { mode: 0o600 });
    assert.equal(w.size, 8);
    assert.equal(await sb.readText('/workspace/dir/a.txt'), 'content\n');
    const bin = new Uint8Array([0, 1, 2, 255]);
    await sb.writeFile('/workspace/dir/b.bin', bin);
    assert.deepEqual(new Uint8Array(await sb.readFile('/workspace/dir/b.bin')), bin);
    const ls = await sb.listFiles('/workspace/dir');
    assert.deepEqual(ls.map((f) => f.name), ['a.txt', 'b.bin']);
    assert.equal(ls[0].mode, 0o600);
    await sb.deleteFile('/workspace/dir/a.txt');
    await assert.rejects(sb.readFile('/workspace/dir/a.txt'), FileNotFoundError);
    const stdin = await sb.exec('cat', { stdin: 'from stdin' });
    assert.equal(stdin.stdout, 'from stdin');
    const listed = await client.list({ labels: LABEL });
    assert.ok(listed.some((s) => s.id === sb.id));
    assert.equal((await client.get(name)).id, sb.id);
  } finally {
    await sb.delete();
  }
  await assert.rejects(client.get(name), SandboxNotFoundError);
}

describe('sbxd transports', () => {
  test('create/exec/files/delete over the Unix socket', { ...T, skip: skipReason(haveSocket, 'SBX_SOCKET') }, async () => {
    requireConfigured(haveSocket, 'SBX_SOCKET');
    const c = socketClient();
    try { await basics(c); } finally { c.close(); }
  });

  test('create/exec/files/delete over TCP with the API key', { ...T, skip: skipReason(haveTcp, 'SBX_URL') }, async () => {
    requireConfigured(haveTcp, 'SBX_URL');
    const c = tcpClient();
    try { await basics(c); } finally { c.close(); }
    const bad = tcpClient('wrong-key-0123456789abcdef');
    try {
      const err = await bad.health().then(() => null, (e) => e);
      assert.ok(err instanceof UnauthorizedError, String(err));
      assert.equal(err.status, 401);
      assert.equal(err.code, 'unauthorized');
    } finally { bad.close(); }
  });
});

describe('sbxd features', { skip: configured || ci ? false : 'neither SBX_SOCKET nor SBX_URL set' }, () => {
  let client: Runtime;
  let sb: Sandbox;

  before(async () => {
    requireConfigured(configured, 'SBX_SOCKET or SBX_URL');
    client = mainClient();
    sb = await client.create({ name: uname('it'), ...SMALL });
  });

  after(async () => {
    if (sb) await sb[Symbol.asyncDispose]();
    // Anything a failed test left behind.
    if (client) {
      for (const s of await client.list({ labels: LABEL })) await s.delete().catch(() => {});
      client.close();
    }
  });

  test('typed error for a missing sandbox', T, async () => {
    const err = await client.get(`missing-${randomSuffix()}`).then(() => null, (e) => e);
    assert.ok(err instanceof SandboxNotFoundError);
    assert.ok(err instanceof NotFoundError);
    assert.equal(err.code, 'sandbox_not_found');
    assert.equal(err.status, 404);
    await assert.rejects(client.delete(`missing-${randomSuffix()}`), SandboxNotFoundError);
  });

  test('streamed exec', T, async () => {
    const events = [];
    for await (const ev of sb.execStream('echo one; sleep 0.2; echo two >&2; exit 3')) events.push(ev);
    assert.equal(events[0].type, 'start');
    const out = events.filter((e) => e.type === 'stdout').map((e) => (e as { data: string }).data).join('');
    const err = events.filter((e) => e.type === 'stderr').map((e) => (e as { data: string }).data).join('');
    assert.equal(out, 'one\n');
    assert.equal(err, 'two\n');
    const exit = events[events.length - 1];
    assert.equal(exit.type, 'exit');
    assert.equal((exit as { exitCode: number }).exitCode, 3);
    assert.ok((exit as { durationMs: number }).durationMs >= 0);
  });

  test('pty: type, resize, signal, exit; keep, attach again by pid, one client at a time', T, async () => {
    const p = await sb.pty({ cmd: ['sh'], rows: 30, cols: 100, keep: true, env: { PS1: '$ ' } });
    assert.ok(p.pid > 0);
    const s1 = { text: '' };
    await p.write('X=alive-$((40+2)); stty size\r');
    await screenUntil(p, s1, '30 100');
    await p.resize(40, 120);
    await p.write('stty size\r');
    await screenUntil(p, s1, '40 120');
    // Ctrl-C (typed) interrupts the foreground job, not the shell.
    // (The child prints once it runs in the foreground group.)
    await p.write("sh -c 'echo rdy-$((2+3)); exec sleep 100' && echo not-interrupted\r");
    await screenUntil(p, s1, 'rdy-5');
    await p.write('\x03');
    await p.write('echo after-$((1+1))\r');
    await screenUntil(p, s1, 'after-2');
    assert.ok(!s1.text.split('rdy-5')[1].includes('not-interrupted'), s1.text); // (the typed line echoes it before)
    await assert.rejects(sb.attachPty(p.pid), ConflictError);
    p.close();
    await assert.rejects(p.wait());
    let a: Pty | undefined;
    for (let i = 0; i < 100 && !a; i++) {
      // The first client's claim ends as sbxd sees it go.
      a = await sb.attachPty(p.pid, { rows: 33, cols: 101 }).catch((e) => {
        if (e instanceof ConflictError) return new Promise<undefined>((r) => setTimeout(() => r(undefined), 100));
        throw e;
      });
    }
    assert.ok(a, 'never attached again');
    const s2 = { text: '' };
    await screenUntil(a, s2, 'after-2'); // replayed
    await a.write('echo $X; stty size; exit 7\r');
    await screenUntil(a, s2, 'alive-42');
    await screenUntil(a, s2, '33 101');
    assert.equal(await a.wait(), 7);
    const plain = await sb.start(['sleep', '60']);
    await assert.rejects(sb.attachPty(plain), InvalidArgumentError);
    // A signal goes to the command's process group: its exit says so.
    const sl = await sb.pty({ cmd: ['sleep', '100'] });
    await sl.signal(15);
    assert.equal(await sl.wait(), 143);
  });

  test('checkpoint and restore', T, async () => {
    await sb.writeFile('/workspace/state.txt', 'v1');
    const progress: string[] = [];
    const cp = await sb.checkpoint({ comment: 'state v1', onProgress: (m) => progress.push(m) });
    assert.match(cp.id, /^v\d+$/);
    assert.equal(cp.comment, 'state v1');
    assert.ok((await sb.checkpoints()).some((c) => c.id === cp.id));
    assert.equal((await sb.getCheckpoint(cp.id)).id, cp.id);
    await sb.writeFile('/workspace/state.txt', 'v2');
    await sb.writeFile('/workspace/later.txt', 'x');
    const d = await sb.diff({ from: cp.id });
    assert.ok(d.added.some((c) => c.path === '/workspace/later.txt'), JSON.stringify(d));
    await sb.restore(cp.id);
    assert.equal(await sb.readText('/workspace/state.txt'), 'v1');
    await assert.rejects(sb.readFile('/workspace/later.txt'), FileNotFoundError);
  });

  test('deliver: record, list, get, archive, key; a bad path is InvalidArgumentError', T, async () => {
    await sb.writeFile('/workspace/out/result.txt', 'delivered by ts\n');
    const progress: string[] = [];
    const d = await sb.deliver(['/workspace/out'], {
      name: 'ts-release', metadata: { ticket: 'T-16' }, onProgress: (m) => progress.push(m),
    });
    assert.match(d.id, /^dlv_/);
    assert.equal(d.name, 'ts-release');
    assert.equal(d.sandbox, sb.name);
    assert.equal(d.sandboxId, sb.id);
    assert.equal(d.files, 1);
    assert.deepEqual(d.metadata, { ticket: 'T-16' });
    assert.match(d.archiveDigest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(d.envelope.payloadType, 'application/vnd.in-toto+json');
    assert.equal(d.teardown, undefined);
    assert.ok((await client.listDeliveries({ sandbox: sb.name })).some((x) => x.id === d.id));
    assert.ok((await client.listDeliveries()).some((x) => x.id === d.id));
    assert.ok((await sb.deliveries()).some((x) => x.id === d.id));
    assert.equal((await client.getDelivery(d.id)).digest, d.digest);
    const archive = await client.deliveryArchive(d.id);
    assert.equal(archive.length, d.archiveBytes);
    assert.deepEqual([...archive.subarray(0, 4)], [0x28, 0xb5, 0x2f, 0xfd]); // zstd frame magic
    assert.equal('sha256:' + createHash('sha256').update(archive).digest('hex'), d.archiveDigest);
    const tar = spawnSync('sh', ['-c', 'zstd -dc | tar -xOf - workspace/out/result.txt'], { input: archive });
    assert.equal(tar.status, 0, String(tar.stderr));
    assert.equal(String(tar.stdout), 'delivered by ts\n');
    const streamed = createHash('sha256');
    for await (const c of await client.deliveryArchiveStream(d.id)) streamed.update(c as Buffer);
    assert.equal('sha256:' + streamed.digest('hex'), d.archiveDigest);
    assert.match(await client.deliveryPublicKey(), /^-----BEGIN PUBLIC KEY-----/);
    const err = await sb.deliver(['/workspace/no-such-file']).then(() => null, (e) => e);
    assert.ok(err instanceof InvalidArgumentError, String(err));
    assert.equal(err.code, 'invalid_argument');
    assert.equal(err.status, 400);
    assert.match(err.message, /\/workspace\/no-such-file/);
    await assert.rejects(client.getDelivery(`dlv_missing${randomSuffix()}`), NotFoundError);
  });

  test('deliver with teardown: the record says what was freed; the sandbox is gone', T, async () => {
    const td = await client.create({ name: uname('dlvtd'), ...SMALL });
    await td.writeFile('/workspace/r.txt', 'x');
    const d = await td.deliver(['/workspace/r.txt'], { teardown: true });
    assert.ok(d.teardown, JSON.stringify(d));
    assert.equal(d.teardown.deleted, true, JSON.stringify(d.teardown));
    assert.ok(d.teardown.removed.includes('container'), JSON.stringify(d.teardown));
    assert.deepEqual(d.teardown.left ?? [], []);
    await assert.rejects(client.get(td.id), SandboxNotFoundError);
  });

  test('tryInCopy: verify fails → original untouched, copy deleted', T, async () => {
    const id = sb.id;
    const r = await tryInCopy(sb, 'echo changed > /workspace/try.txt', 'false');
    assert.equal(r.kept, false);
    assert.equal(r.sandbox.id, id);
    assert.equal(r.step.exitCode, 0);
    assert.ok(r.verify && r.verify.exitCode === 1);
    assert.equal(r.leftover, '');
    await assert.rejects(sb.readFile('/workspace/try.txt'), FileNotFoundError);
    const all = await client.list();
    assert.ok(!all.some((s) => s.name.startsWith(`${sb.name}-try-`)), 'the copy is deleted');
  });

  test('tryInCopy: step fails → verify not run', T, async () => {
    const r = await tryInCopy(sb, 'echo x > /workspace/try2.txt; exit 7', 'touch /workspace/verified');
    assert.equal(r.kept, false);
    assert.equal(r.step.exitCode, 7);
    assert.equal(r.verify, null);
    await assert.rejects(sb.readFile('/workspace/try2.txt'), FileNotFoundError);
  });

  test('tryInCopy: pass → the copy takes the name, rules and labels; the original id is gone', T, async () => {
    const rules = await sb.network.set({ internet: true, allow: ['pkg.example.org'], deny: [], connect: [] });
    const oldId = sb.id;
    const name = sb.name;
    const r = await tryInCopy(sb, 'echo kept > /workspace/kept.txt', 'grep -q kept /workspace/kept.txt');
    assert.equal(r.kept, true);
    assert.equal(r.leftover, '');
    assert.equal(r.sandbox, sb, 'the handle now points at the copy');
    assert.equal(sb.name, name);
    assert.notEqual(sb.id, oldId);
    await assert.rejects(client.get(oldId), SandboxNotFoundError);
    const got = await client.get(name);
    assert.equal(got.id, sb.id);
    assert.deepEqual(got.labels, LABEL);
    assert.deepEqual(await sb.network.get(), rules);
    assert.equal(await sb.readText('/workspace/kept.txt'), 'kept\n');
    await sb.network.set({ internet: false });
  });

  test('guarded: git rollback of a failing edit', T, async () => {
    const setup = await sb.exec(`mkdir -p /workspace/repo && cd /workspace/repo && git init -q && echo hello > a.txt &&
      git add . && git -c user.name=t -c user.email=t@example.org commit -qm init`);
    assert.equal(setup.exitCode, 0, setup.stderr);
    const id = sb.id;
    const g = await guarded(sb, "sed -i 's/hello/bye/' a.txt && echo new > b.txt && rm a.txt && false", { cwd: '/workspace/repo' });
    assert.equal(g.undo, 'git');
    assert.equal(g.result.exitCode, 1);
    assert.equal(g.rolledBack, true, g.rollbackError);
    assert.equal(g.result.undo?.kind, 'git', 'a repository snapshot, server-side');
    assert.equal(g.result.undo?.git?.repo, '/workspace/repo');
    assert.equal(g.sandbox.id, id);
    assert.equal(await sb.readText('/workspace/repo/a.txt'), 'hello\n');
    await assert.rejects(sb.readFile('/workspace/repo/b.txt'), FileNotFoundError);
    const st = await sb.exec('git status --porcelain', { cwd: '/workspace/repo' });
    assert.equal(st.stdout, '');
    // A passing edit stays.
    const ok = await guarded(sb, "sed -i 's/hello/bye/' a.txt", { cwd: '/workspace/repo' });
    assert.equal(ok.undo, 'git');
    assert.equal(ok.rolledBack, false);
    assert.equal(await sb.readText('/workspace/repo/a.txt'), 'bye\n');
  });

  test('guarded: git outside a repository falls back to a checkpoint', T, async () => {
    const g = await guarded(sb, 'echo x > notes.txt && false', { cwd: '/tmp' });
    assert.equal(g.undo, 'git', 'the class');
    assert.equal(g.result.undo?.kind, 'checkpoint', 'what was taken: no work tree around /tmp');
    assert.equal(g.rolledBack, true);
    await assert.rejects(sb.readFile('/tmp/notes.txt'), FileNotFoundError);
  });

  test('guarded: checkpoint class rollback; none runs as is', T, async () => {
    const g = await guarded(sb, 'echo broken > /etc/sbx-test.conf && exit 1');
    assert.equal(g.undo, 'checkpoint');
    assert.equal(g.result.undo?.kind, 'checkpoint');
    assert.equal(g.rolledBack, true);
    await assert.rejects(sb.readFile('/etc/sbx-test.conf'), FileNotFoundError);
    const n = await guarded(sb, 'ls /');
    assert.equal(n.undo, 'none');
    assert.equal(n.result.undo?.kind ?? 'none', 'none', 'nothing taken for a read');
    assert.equal(n.rolledBack, false);
  });

  test('exec undo fields (server-side, auto)', T, async () => {
    await sb.writeFile('/workspace/keep.txt', 'keep');
    const r = await sb.exec('rm /workspace/keep.txt && exit 2', { undo: 'auto', rollbackOnFailure: true });
    assert.equal(r.exitCode, 2);
    assert.equal(r.undo?.kind, 'checkpoint');
    assert.equal(r.undo?.class, 'checkpoint');
    assert.equal(r.undo?.rolledBack, true);
    assert.equal(await sb.readText('/workspace/keep.txt'), 'keep');
  });

  test('remember / goBackTo / chain', T, async () => {
    const ids: string[] = [];
    try {
      await sb.writeFile('/workspace/a', 'a');
      ids.push((await remember(sb, 'a')).id);
      await sb.writeFile('/workspace/b', 'b');
      ids.push((await remember(sb, 'b')).id);
      const c = await chain(sb);
      assert.deepEqual(c.map((s) => s.name), ['a', 'b']);
      assert.deepEqual(c[0].metadata, { sbx_chain: { sandbox: sb.name, step: 'a' } });
      await assert.rejects(goBackTo(sb, 'nope'), SnapshotNotFoundError);
      const oldId = sb.id;
      const name = sb.name;
      const back = await goBackTo(sb, 'a');
      assert.equal(back, sb);
      assert.equal(sb.name, name);
      assert.notEqual(sb.id, oldId);
      await assert.rejects(client.get(oldId), SandboxNotFoundError);
      assert.equal(sb.state, 'running');
      assert.equal(await sb.readText('/workspace/a'), 'a');
      await assert.rejects(sb.readFile('/workspace/b'), FileNotFoundError);
      assert.deepEqual((await client.get(name)).labels, LABEL);
    } finally {
      for (const id of ids) await client.deleteSnapshot(id).catch(() => {});
    }
  });

  test('await using deletes the sandbox', T, async () => {
    let name = '';
    {
      await using tmp = await client.create({ name: uname('using'), ...SMALL });
      name = tmp.name;
      assert.equal((await tmp.exec('true')).exitCode, 0);
    }
    await assert.rejects(client.get(name), SandboxNotFoundError);
  });

  test('checkpointFor: sbxd classifies', T, async () => {
    assert.equal(await checkpointFor('ls -la', client), 'none');
    assert.equal(await checkpointFor("sed -i 's/a/b/' main.go", client), 'git');
    assert.equal(await checkpointFor('echo 127.0.0.1 db >> /etc/hosts', client), 'checkpoint');
    assert.equal(await checkpointFor(['sh', '-c', 'rm -rf build'], client), 'git');
    const c = await client.classify('apt-get install -y jq');
    assert.ok(c.reason.length > 0);
    // Not a string or an argv: sbxd's 400, typed.
    await assert.rejects(client.classify(42 as unknown as string), InvalidArgumentError);
  });

  test('network: get, off, on, log', T, async () => {
    await sb.network.set({ internet: true, allow: ['pkg.example.org'] });
    const off = await sb.network.off();
    assert.equal(off.internet, false);
    assert.equal((off.allow ?? []).length, 0, 'off replaces the rules');
    assert.equal((await sb.network.get()).internet, false);
    const on = await sb.network.on();
    assert.equal(on.internet, true);
    assert.equal((on.allow ?? []).length, 0);
    const log = await sb.network.log();
    assert.equal(typeof log.counts.dnsAnswered, 'number');
    await sb.network.set({ internet: false });
  });

  test('fork answers a Sandbox; forkMany answers the copies', T, async () => {
    await sb.writeFile('/workspace/forked.txt', 'from the original');
    const copy = await sb.fork({ name: uname('fk'), labels: LABEL, network: { internet: false } });
    try {
      assert.notEqual(copy.id, sb.id);
      assert.equal(await copy.readText('/workspace/forked.txt'), 'from the original');
      assert.deepEqual(copy.labels, LABEL);
    } finally {
      await copy.delete();
    }
    const many = await sb.forkMany(2, { name: uname('fm'), labels: LABEL });
    try {
      assert.equal(many.sandboxes.length, 2, String(many.errors));
      assert.deepEqual(many.errors, []);
      assert.ok(many.pausedMs >= 0);
    } finally {
      for (const c of many.sandboxes) await c.delete();
    }
  });

  test('README: every ```ts block runs', { timeout: 900_000 }, async () => {
    const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
    const blocks = [...readme.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1]);
    assert.ok(blocks.length >= 8, `found ${blocks.length} blocks`);
    // In the package (dist/readme/), so that '@sbx/sdk' resolves to it.
    const dir = new URL('../readme/', import.meta.url);
    mkdirSync(dir, { recursive: true });
    const quiet = console.log;
    console.log = () => {};
    try {
      for (const [i, code] of blocks.entries()) {
        const js = ts.transpileModule(code, { compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 } }).outputText;
        const file = new URL(`block-${i}.mjs`, dir);
        writeFileSync(file, js);
        await import(file.href).catch((e) => {
          throw new Error(`README block ${i}:\n${code}\n${e?.stack ?? e}`);
        });
      }
    } finally {
      console.log = quiet;
    }
  });

  test('examples', { timeout: 600_000 }, async () => {
    const load = (f: string) => import(new URL(`../examples/${f}`, import.meta.url).href);
    const quiet = console.log;
    console.log = () => {};
    try {
      const t1 = await (await load('try-in-copy.js')).main();
      assert.equal(t1.firstKept, true);
      assert.equal(t1.secondKept, false);
      assert.equal(t1.toolOutput, 'tool 1.0');
      assert.notEqual(t1.oldId, t1.newId);
      const t2 = await (await load('guarded-edit.js')).main();
      assert.deepEqual(t2, { gitUndo: 'git', gitRolledBack: true, greeting: 'hello', extraExists: false, cpUndo: 'checkpoint', cpRolledBack: true, confExists: false });
      const t3 = await (await load('chain.js')).main();
      assert.deepEqual(t3.steps, ['step-1', 'step-2', 'step-3', 'step-4', 'step-5']);
      assert.deepEqual(t3.log, ['step-1', 'step-2']);
      for (const n of [t1.name, t3.name]) await assert.rejects(client.get(n), SandboxNotFoundError);
    } finally {
      console.log = quiet;
    }
  });
});
