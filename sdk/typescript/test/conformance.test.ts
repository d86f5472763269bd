// Conformance: sdk/testdata/conformance.json is a script of SDK calls with
// the exact request each must send and a canned answer (docs/undo.md,
// Conformance). A local HTTP server serves the answers in order; each call
// goes through the client over TCP with API key test-key. The script's
// arguments are wire objects (snake_case): the adapter gives them to the SDK
// in camelCase (fromWire), as a user writes them, and the SDK must send the
// script's snake_case request.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { AddressInfo } from 'node:net';
import { Runtime, SbxError, checkpointFor, type Sandbox } from '../src/index.js';
import { fromWire } from '../src/wire.js';

const file = fileURLToPath(new URL('../../../testdata/conformance.json', import.meta.url));

interface Case {
  call: string;
  args: any;
  request: { method: string; path: string; query?: Record<string, string[]>; ndjson: boolean; body?: unknown; body_text?: string };
  response: { status: number; body?: unknown; ndjson?: unknown[]; body_text?: string };
  error_code?: string;
}

interface Seen {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** Drops object members that are null (they count as absent). */
function stripNulls(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(stripNulls);
  if (v && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) if (x !== null) out[k] = stripNulls(x);
    return out;
  }
  return v;
}

function multimap(q: URLSearchParams): Record<string, string[]> {
  const m: Record<string, string[]> = {};
  for (const [k, v] of q) (m[k] ??= []).push(v);
  for (const k of Object.keys(m)) m[k].sort();
  return m;
}

async function call(client: Runtime, c: Case, cur: { sb: Sandbox | null }): Promise<void> {
  const a = c.args ?? {};
  const camel = (v: unknown): any => fromWire(v ?? {});
  const sb = () => {
    assert.ok(cur.sb, `${c.call}: no current sandbox`);
    return cur.sb!;
  };
  switch (c.call) {
    case 'health': await client.health(); return;
    case 'create': cur.sb = await client.sandboxes.create(camel(a.request)); return;
    case 'get': cur.sb = await client.sandboxes.get(a.name); return;
    case 'list': await client.sandboxes.list({ labels: a.labels }); return;
    case 'exec': await sb().exec(a.command); return;
    case 'run': {
      const { cmd, ...opts } = camel(a.request);
      await sb().exec(cmd, opts);
      return;
    }
    case 'stream': {
      const types: string[] = [];
      const { cmd, ...opts } = camel(a.request);
      for await (const ev of sb().execStream(cmd, opts)) types.push(ev.type);
      assert.equal(types[types.length - 1], 'exit');
      return;
    }
    case 'write_file': await sb().writeFile(a.path, a.content, { mode: a.mode }); return;
    case 'read_file': {
      const got = await sb().readText(a.path, { maxBytes: a.max_bytes });
      assert.equal(got, c.response.body_text);
      return;
    }
    case 'list_files': await sb().listFiles(a.path); return;
    case 'delete_file': await sb().deleteFile(a.path); return;
    case 'checkpoint': await sb().checkpoint({ comment: a.comment }); return;
    case 'list_checkpoints': await sb().checkpoints(); return;
    case 'get_checkpoint': await sb().getCheckpoint(a.id); return;
    case 'restore': await sb().restore(a.id); return;
    case 'diff': await sb().diff({ from: a.from, to: a.to }); return;
    case 'snapshot': {
      const snap = await sb().snapshot(camel(a.request));
      assert.ok(snap.id, 'the snapshot answers its id');
      return;
    }
    case 'list_snapshots': await client.snapshots.list({ sandbox: a.sandbox }); return;
    case 'get_snapshot': await client.snapshots.get(a.id); return;
    case 'delete_snapshot': await client.snapshots.delete(a.id); return;
    case 'fork': {
      const copy = await sb().fork(camel(a.request));
      assert.equal(copy.name, 'c1-try', 'fork answers the copy, a Sandbox');
      assert.equal(typeof copy.exec, 'function');
      return;
    }
    case 'get_network': await sb().network.get(); return;
    case 'set_network': await sb().network.set(camel(a.rules)); return;
    case 'list_secrets': await sb().secrets(); return;
    case 'set_secrets': await sb().setSecrets(camel(a).secrets); return;
    case 'put_secret': await sb().putSecret(a.name, { value: a.value, rules: camel(a).secretRules }); return;
    case 'delete_secret': await sb().deleteSecret(a.name); return;
    case 'update': await sb().update(camel(a.request)); return;
    case 'suspend': await sb().suspend({ wakeOn: a.wake_on }); return;
    case 'resume': await sb().resume(); return;
    case 'events': await sb().events(); return;
    case 'post_event': await client.postEvent(a.key, a.data); return;
    case 'deliver': {
      const r = a.request ?? {};
      await sb().deliver(r.paths, { name: r.name, metadata: r.metadata, teardown: r.teardown });
      return;
    }
    case 'list_deliveries': await client.listDeliveries({ sandbox: a.sandbox }); return;
    case 'get_delivery': {
      const d = await client.getDelivery(a.id);
      assert.equal(d.id, a.id);
      assert.equal(d.envelope.payloadType, 'application/vnd.in-toto+json');
      return;
    }
    case 'delivery_archive':
      assert.equal((await client.deliveryArchive(a.id)).toString('utf8'), c.response.body_text);
      return;
    case 'delivery_key': assert.equal(await client.deliveryPublicKey(), c.response.body_text); return;
    case 'create_key': {
      const k = await client.createKey(camel(a.request));
      assert.ok(k.secret.startsWith('sbxk_'), 'the created key carries its secret');
      return;
    }
    case 'list_keys': await client.listKeys({ revoked: a.revoked }); return;
    case 'get_key': await client.getKey(a.id); return;
    case 'revoke_key': await client.revokeKey(a.id); return;
    case 'usage': {
      const u = await client.usage({ since: a.since, until: a.until, groupBy: a.group_by });
      assert.equal(typeof u.groupBy, 'string', 'answers in camelCase');
      assert.equal(u.total.cost, u.usage.reduce((n, e) => n + e.cost, 0));
      return;
    }
    case 'set_key_limit': {
      const k = await client.setKeyLimit(a.id, a.daily_limit_usd ?? null, { resumeSuspended: a.resume_suspended });
      assert.equal(k.id, 'key_0123456789abcdef');
      return;
    }
    case 'delete': await sb().delete(); return;
    case 'classify': {
      const want = (c.response.body as { undo: string }).undo;
      assert.equal(await checkpointFor(a.command, client), want);
      return;
    }
    default: assert.fail(`unknown call ${c.call}`);
  }
}

test('conformance: sdk/testdata/conformance.json', async (t) => {
  const script = JSON.parse(readFileSync(file, 'utf8')) as { cases: Case[] };
  let next: Case | undefined;
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks) });
      const c = next;
      next = undefined;
      if (!c) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ error: { code: 'internal', message: 'unexpected request' } }));
        return;
      }
      const r = c.response;
      if (r.ndjson) {
        res.writeHead(r.status, { 'Content-Type': 'application/x-ndjson' });
        res.end(r.ndjson.map((l) => JSON.stringify(l) + '\n').join(''));
      } else if (r.body_text !== undefined) {
        res.writeHead(r.status, { 'Content-Type': 'application/octet-stream' });
        res.end(r.body_text);
      } else if (r.body !== undefined) {
        res.writeHead(r.status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(r.body));
      } else {
        res.writeHead(r.status);
        res.end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  const client = new Runtime({ url: `http://127.0.0.1:${port}`, apiKey: 'test-key' });
  const cur: { sb: Sandbox | null } = { sb: null };
  try {
    for (const [i, c] of script.cases.entries()) {
      await t.test(`${i} ${c.call} ${JSON.stringify(c.args)}`, async () => {
        next = c;
        seen.length = 0;
        let err: unknown;
        try {
          await call(client, c, cur);
        } catch (e) {
          err = e;
        }
        if (c.error_code) {
          assert.ok(err instanceof SbxError, `want SbxError ${c.error_code}, got ${err}`);
          assert.equal((err as SbxError).code, c.error_code);
        } else if (err) {
          throw err;
        }
        assert.equal(seen.length, 1, 'one request per call');
        const s = seen[0];
        const u = new URL(s.url, 'http://x');
        const want = c.request;
        assert.equal(s.method, want.method);
        assert.equal(u.pathname, want.path);
        assert.deepEqual(multimap(u.searchParams), multimap(new URLSearchParams(Object.entries(want.query ?? {}).flatMap(([k, vs]) => vs.map((v) => [k, v] as [string, string])))));
        assert.equal(s.headers.authorization, 'Bearer test-key');
        assert.equal(String(s.headers.accept ?? '').includes('application/x-ndjson'), want.ndjson, 'Accept: application/x-ndjson');
        if (want.body !== undefined) {
          assert.deepEqual(stripNulls(JSON.parse(s.body.toString('utf8'))), stripNulls(want.body));
        } else if (want.body_text !== undefined) {
          assert.equal(s.body.toString('utf8'), want.body_text);
        } else {
          // No body expected: none, or an empty JSON object.
          const b = s.body.toString('utf8').trim();
          assert.ok(b === '' || b === '{}' || b === 'null', `unexpected body ${b}`);
        }
      });
    }
  } finally {
    client.close();
    server.close();
  }
});
