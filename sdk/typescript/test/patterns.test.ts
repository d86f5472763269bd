// The three patterns of agent builders (try in a copy, guard, chain),
// written as a user writes them in the SDK's shape, against a real sbxd:
// SBX_URL + SBX_API_KEY, else SBX_SOCKET (what Sandbox.create() reads).
// Without either they are skipped, unless CI=true, where they fail.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Runtime, Sandbox, chain, goBackTo, guarded, randomSuffix, remember, tryInCopy } from '../src/index.js';

const configured = !!(process.env.SBX_SOCKET || process.env.SBX_URL);
const ci = process.env.CI === 'true';
const T = { timeout: 300_000 };
const LABELS = { 'sdk-ts-test': '1' };

describe('patterns, as a user writes them', { skip: configured || ci ? false : 'neither SBX_SOCKET nor SBX_URL set' }, () => {
  test('try in a copy: a failing step leaves the sandbox as it was; a passing one is kept', T, async () => {
    assert.ok(configured, 'CI=true but neither SBX_SOCKET nor SBX_URL is set');
    await using sb = await Sandbox.create({ name: `pat-try-${randomSuffix()}`, labels: LABELS, memoryMb: 512, network: { internet: false } });
    await sb.exec('echo v1 > /workspace/app.txt');

    const bad = await tryInCopy(sb, 'echo v2 > /workspace/app.txt', 'grep -q v3 /workspace/app.txt');
    assert.equal(bad.kept, false);
    assert.equal(bad.verify?.exitCode, 1);
    assert.equal(await sb.readText('/workspace/app.txt'), 'v1\n');

    const good = await tryInCopy(sb, 'echo v2 > /workspace/app.txt', 'grep -q v2 /workspace/app.txt');
    assert.equal(good.kept, true);
    assert.equal(good.step.exitCode, 0);
    assert.equal(await sb.readText('/workspace/app.txt'), 'v2\n');

    // The copy, by hand: fork answers a Sandbox.
    await using copy = await sb.fork({ labels: LABELS, network: { internet: false } });
    const ran = await copy.exec('cat /workspace/app.txt', { timeoutMs: 10_000 });
    assert.equal(ran.exitCode, 0);
    assert.equal(ran.stdout, 'v2\n');
    assert.ok(ran.durationMs >= 0);
  });

  test('guard: a failing command is rolled back, a passing one stays', T, async () => {
    assert.ok(configured, 'CI=true but neither SBX_SOCKET nor SBX_URL is set');
    await using sb = await Sandbox.create({ name: `pat-guard-${randomSuffix()}`, labels: LABELS, memoryMb: 512, network: { internet: false } });
    const init = await sb.exec(`mkdir -p /workspace/repo && cd /workspace/repo && git init -q && echo hello > a.txt &&
      git add . && git -c user.name=t -c user.email=t@example.org commit -qm init`);
    assert.equal(init.exitCode, 0, init.stderr);

    const failed = await guarded(sb, "sed -i 's/hello/bye/' a.txt && echo new > b.txt && grep -q hello a.txt", { cwd: '/workspace/repo' });
    assert.notEqual(failed.result.exitCode, 0);
    assert.equal(failed.undo, 'git');
    assert.equal(failed.rolledBack, true, failed.rollbackError);
    assert.equal(await sb.readText('/workspace/repo/a.txt'), 'hello\n');
    assert.equal((await sb.exec('test -e b.txt', { cwd: '/workspace/repo' })).exitCode, 1, 'the new file is gone');

    const sys = await guarded(sb, 'echo 10.0.0.9 db >> /etc/hosts && exit 3');
    assert.equal(sys.result.exitCode, 3);
    assert.equal(sys.undo, 'checkpoint');
    assert.equal(sys.rolledBack, true, sys.rollbackError);
    assert.equal((await sb.exec('grep -c 10.0.0.9 /etc/hosts')).stdout.trim(), '0');

    const ok = await guarded(sb, "sed -i 's/hello/bye/' a.txt", { cwd: '/workspace/repo' });
    assert.equal(ok.result.exitCode, 0);
    assert.equal(ok.rolledBack, false);
    assert.equal(await sb.readText('/workspace/repo/a.txt'), 'bye\n');
  });

  test('chain: remember steps, go back to one, carry on', T, async () => {
    assert.ok(configured, 'CI=true but neither SBX_SOCKET nor SBX_URL is set');
    const runtime = new Runtime();
    const ids: string[] = [];
    try {
      await using sb = await Sandbox.create({ name: `pat-chain-${randomSuffix()}`, labels: LABELS, memoryMb: 512, network: { internet: false } });
      for (const step of ['plan', 'edit', 'test']) {
        await sb.exec(`echo ${step} >> /workspace/steps.txt`);
        const snap = await remember(sb, step);
        assert.match(snap.id, /\S/);
        ids.push(snap.id);
      }
      assert.deepEqual((await chain(sb)).map((s) => s.name), ['plan', 'edit', 'test']);
      const before = sb.id;
      await goBackTo(sb, 'edit');
      assert.notEqual(sb.id, before);
      assert.equal(await sb.readText('/workspace/steps.txt'), 'plan\nedit\n');
      await sb.exec('echo retry >> /workspace/steps.txt');
      assert.equal(await sb.readText('/workspace/steps.txt'), 'plan\nedit\nretry\n');
      // A snapshot by hand, and a new sandbox from it.
      const snap = await sb.snapshot({ name: 'by-hand', retentionDays: 1, metadata: { ticket_id: 'T-1' } });
      ids.push(snap.id);
      assert.deepEqual(snap.metadata, { ticket_id: 'T-1' });
      await using again = await runtime.sandboxes.create({ snapshot: snap.id, labels: LABELS });
      assert.equal(await again.readText('/workspace/steps.txt'), 'plan\nedit\nretry\n');
    } finally {
      for (const id of ids) await runtime.snapshots.delete(id).catch(() => {});
      runtime.close();
    }
  });
});
