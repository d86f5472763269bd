// The one camelCase ↔ snake_case conversion (src/wire.ts), and the
// transport that applies it to bodies, queries, answers and NDJSON lines.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fromWire, toWire } from '../src/wire.js';
import { Runtime, SandboxNotFoundError, type ExecEvent } from '../src/index.js';

test('toWire: camelCase names become snake_case, deep, arrays included', () => {
  const got = toWire({
    memoryMb: 512,
    keepAliveWhileRunning: true,
    network: { internet: false, allow: ['pypi.org'] },
    secrets: [{ name: 'API_TOKEN', value: 'v', rules: [{ host: 'h', methods: ['GET'], pathPrefix: '/v1' }] }],
    stdinBase64: 'AA==',
    nested: [[{ timeoutMs: 1 }]],
  });
  assert.deepEqual(got, {
    memory_mb: 512,
    keep_alive_while_running: true,
    network: { internet: false, allow: ['pypi.org'] },
    secrets: [{ name: 'API_TOKEN', value: 'v', rules: [{ host: 'h', methods: ['GET'], path_prefix: '/v1' }] }],
    stdin_base64: 'AA==',
    nested: [[{ timeout_ms: 1 }]],
  });
});

test('map fields keep their keys both ways: labels, env, metadata, data', () => {
  const maps = {
    labels: { teamName: 'a', 'app.kubernetes.io/part_of': 'b' },
    env: { MY_VAR: '1', camelVar: '2' },
    metadata: { sbx_chain: { sandbox: 'x', step: 's' }, ticketId: 7, deep: [{ some_key: 1 }] },
  };
  assert.deepEqual(toWire(maps), maps);
  assert.deepEqual(fromWire(maps), maps);
  // Inside a converted object too, and an event's `data`.
  const ev = fromWire<any>({ id: 'e', create_time: 't', data: { user_field: { inner_key: 1 } } });
  assert.deepEqual(ev, { id: 'e', createTime: 't', data: { user_field: { inner_key: 1 } } });
  const fork = fromWire<any>({ paused_ms: 3, copies: [{ sandbox: { memory_mb: 1, labels: { a_b: 'c' }, env: { X_Y: 'z' } } }] });
  assert.deepEqual(fork, { pausedMs: 3, copies: [{ sandbox: { memoryMb: 1, labels: { a_b: 'c' }, env: { X_Y: 'z' } } }] });
});

test('fromWire: values are not touched; names already camelCase on the wire stay', () => {
  assert.deepEqual(fromWire(['exit_code', 1, null, true]), ['exit_code', 1, null, true]);
  assert.equal(fromWire('rolled_back'), 'rolled_back');
  const env = { payloadType: 'application/vnd.in-toto+json', payload: 'e30=', signatures: [{ keyid: 'k', sig: 's' }] };
  assert.deepEqual(fromWire({ envelope: env, sandbox_id: 'sbx_1' }), { envelope: env, sandboxId: 'sbx_1' });
  assert.deepEqual(toWire({ envelope: env }), { envelope: env });
  // A round trip of a wire object is the identity.
  const wire = { exit_code: 0, duration_ms: 5, undo: { kind: 'git', rolled_back: true, git: { index_tree: 'a', work_tree: 'b' } } };
  assert.deepEqual(toWire(fromWire(wire)), wire);
});

/** A server whose handler answers each request; resolves with the base URL and what it saw. */
async function serve(handler: (req: http.IncomingMessage, body: string, res: http.ServerResponse) => void) {
  const seen: { url: string; body: string }[] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      seen.push({ url: req.url!, body });
      handler(req, body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, seen, close: () => server.close() };
}

const SANDBOX = {
  id: 'sbx_0123456789abcdef', name: 'c1', state: 'running', image: 'default', cpus: 1, memory_mb: 512, disk_mb: 0,
  env: { MY_VAR: '1' }, labels: { team_name: 'a' }, network: { internet: false, allow: [], deny: [], connect: [] },
  volumes: [], timeout_ms: 0, keep_alive_while_running: false, create_time: '2026-11-29T10:00:00Z', source: null,
};

test('transport: request bodies and queries go snake_case, answers and NDJSON lines come camelCase', async () => {
  const s = await serve((req, _body, res) => {
    const u = new URL(req.url!, 'http://x');
    if (u.pathname === '/v1/sandboxes' && req.method === 'POST') {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write(JSON.stringify({ type: 'info', data: 'booting', time: 't' }) + '\n');
      res.end(JSON.stringify({ type: 'complete', data: SANDBOX, time: 't' }) + '\n');
    } else if (u.pathname.endsWith('/exec')) {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write(JSON.stringify({ type: 'start', pid: 7 }) + '\n');
      res.write(JSON.stringify({ type: 'stdout', data: 'hi\n' }) + '\n');
      res.end(JSON.stringify({ type: 'exit', exit_code: 3, duration_ms: 12, timed_out: false, undo: { kind: 'checkpoint', rolled_back: true } }) + '\n');
    } else if (u.pathname.endsWith('/files')) {
      res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
      res.end('abc');
    } else if (u.pathname.endsWith('/events')) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify([{ id: 'e1', key: 'k', data: { approved_by: 'x' }, create_time: 't', deliver_time: 't' }]));
    } else {
      res.writeHead(404, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 'sandbox_not_found', message: 'no sandbox named "x"' } }));
    }
  });
  const rt = new Runtime({ url: s.url, apiKey: 'k' });
  try {
    const progress: string[] = [];
    const sb = await rt.sandboxes.create({ name: 'c1', memoryMb: 512, timeoutMs: 60000, labels: { team_name: 'a' }, onProgress: (m) => progress.push(m) });
    assert.deepEqual(JSON.parse(s.seen[0].body), { name: 'c1', memory_mb: 512, timeout_ms: 60000, labels: { team_name: 'a' } });
    assert.deepEqual(progress, ['booting']);
    assert.equal(sb.info.memoryMb, 512);
    assert.equal(sb.info.keepAliveWhileRunning, false);
    assert.deepEqual(sb.labels, { team_name: 'a' });
    assert.deepEqual(sb.info.env, { MY_VAR: '1' });

    const events: ExecEvent[] = [];
    for await (const ev of sb.execStream(['true'], { timeoutMs: 5, rollbackOnFailure: true, undo: 'checkpoint' })) events.push(ev);
    assert.deepEqual(JSON.parse(s.seen[1].body), { cmd: ['true'], timeout_ms: 5, rollback_on_failure: true, undo: 'checkpoint' });
    assert.deepEqual(events[events.length - 1], { type: 'exit', exitCode: 3, durationMs: 12, timedOut: false, undo: { kind: 'checkpoint', rolledBack: true } });

    assert.equal(await sb.readText('/a', { maxBytes: 10 }), 'abc');
    assert.equal(new URL(s.seen[2].url, 'http://x').searchParams.get('max_bytes'), '10');

    const evs = await sb.events();
    assert.deepEqual(evs[0].data, { approved_by: 'x' });
    assert.equal(evs[0].deliverTime, 't');

    await assert.rejects(rt.sandboxes.get('x'), SandboxNotFoundError);
  } finally {
    rt.close();
    s.close();
  }
});
