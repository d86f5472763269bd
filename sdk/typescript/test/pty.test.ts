// Unit tests of Pty against a server written here (ws's server on a Unix
// socket, speaking sbxd's terminal messages): the query, start, bytes both
// ways, resize, exit; an error message typed; a refusal before the upgrade
// typed from its JSON body.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import * as fs from 'node:fs';
import { WebSocketServer } from 'ws';
import { Client, ConflictError, ProcessNotFoundError } from '../src/index.js';

async function fakeSbxd(onConn: (ws: import('ws').WebSocket, url: string) => void, refuse?: { status: number; body: string }) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sbx-pty-'));
  const sock = path.join(dir, 's.sock');
  const server = http.createServer();
  const wss = new WebSocketServer({ noServer: true });
  server.on('upgrade', (req, socket, head) => {
    if (refuse) {
      socket.end(`HTTP/1.1 ${refuse.status} X\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(refuse.body)}\r\n\r\n${refuse.body}`);
      return;
    }
    wss.handleUpgrade(req, socket, head, (ws) => onConn(ws, req.url ?? ''));
  });
  await new Promise<void>((r) => server.listen(sock, r));
  return { sock, close: () => { wss.close(); server.close(); fs.rmSync(dir, { recursive: true, force: true }); } };
}

test('pty: query, start, bytes both ways, resize, exit', async () => {
  let url = '';
  const got: string[] = [];
  const srv = await fakeSbxd((ws, u) => {
    url = u;
    ws.send(JSON.stringify({ type: 'start', pid: 42 }));
    ws.on('message', (data, isBinary) => {
      const s = data.toString();
      got.push(isBinary ? `bin:${s}` : `text:${s}`);
      if (isBinary && s === 'exit\r') {
        ws.send(Buffer.from('bye\r\n'), { binary: true });
        ws.send(JSON.stringify({ type: 'exit', exit_code: 3, duration_ms: 1 }));
        ws.close(1000);
      }
    });
  });
  try {
    const c = new Client({ socket: srv.sock });
    const sb = c.wrap({ id: 'sbx_0000000000000001', name: 'a' } as never);
    const p = await sb.pty({ cmd: ['sh', '-l'], rows: 30, cols: 100, keep: true, env: { A: 'b' } });
    assert.equal(p.pid, 42);
    assert.match(url, /^\/v1\/sandboxes\/sbx_0000000000000001\/exec\?/);
    const q = new URLSearchParams(url.split('?')[1]);
    assert.deepEqual([q.get('tty'), q.getAll('cmd'), q.get('rows'), q.get('cols'), q.get('keep'), q.get('env')], ['1', ['sh', '-l'], '30', '100', '1', 'A=b']);
    await p.resize(40, 120);
    await p.write('exit\r');
    assert.equal(await p.wait(), 3);
    assert.equal((await p.read())?.toString(), 'bye\r\n', 'output not read before wait is kept');
    assert.equal(await p.read(), null);
    assert.deepEqual(got, ['text:{"type":"resize","rows":40,"cols":120}', 'bin:exit\r']);
    c.close();
  } finally {
    srv.close();
  }
});

test('pty: an error message is typed; attach path', async () => {
  let url = '';
  const srv = await fakeSbxd((ws, u) => {
    url = u;
    ws.send(JSON.stringify({ type: 'start', pid: 7 }));
    ws.send(JSON.stringify({ type: 'error', code: 'conflict', error: 'sandbox "a" was restored to checkpoint v1 while process 7 ran' }));
    ws.close(1000);
  });
  try {
    const c = new Client({ socket: srv.sock });
    const p = await c.wrap({ id: 'sbx_0000000000000001', name: 'a' } as never).attachPty(7, { rows: 10, cols: 20 });
    assert.equal(url, '/v1/sandboxes/sbx_0000000000000001/processes/7/tty?rows=10&cols=20');
    await assert.rejects(p.wait(), (e: unknown) => e instanceof ConflictError && /restored to checkpoint v1/.test(e.message));
    c.close();
  } finally {
    srv.close();
  }
});

test('pty: a refusal before the upgrade is typed', async () => {
  for (const [status, code, Cls] of [[409, 'conflict', ConflictError], [404, 'process_not_found', ProcessNotFoundError]] as const) {
    const srv = await fakeSbxd(() => {}, { status, body: JSON.stringify({ error: { code, message: `refused ${code}` } }) });
    try {
      const c = new Client({ socket: srv.sock });
      await assert.rejects(c.wrap({ id: 'sbx_0000000000000001', name: 'a' } as never).attachPty(5), (e: unknown) => e instanceof Cls && (e as Error).message === `refused ${code}`);
      c.close();
    } finally {
      srv.close();
    }
  }
});
