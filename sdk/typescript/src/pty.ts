/**
 * Terminals: a command on a pseudo-terminal in a sandbox, over sbxd's
 * terminal WebSocket (`GET .../exec?tty=1`, and `GET
 * .../processes/{pid}/tty` to attach again). Node 20 has no WebSocket
 * client, and Node's own (22+) cannot dial a Unix socket: the `ws`
 * package carries it (pinned in package.json).
 *
 * @module
 */
import WebSocket from 'ws';
import { SbxConnectionError, SbxProtocolError, codeOfStatus, errorFromCode } from './errors.js';
import type { Transport } from './http.js';

/** Options of {@link Sandbox.pty}. All are optional. */
export interface PtyOptions {
  /** The argv; default a login shell (`bash -l` where the image has bash, else `sh -l`). */
  cmd?: string[];
  /** Working directory; default `/workspace`. */
  cwd?: string;
  /** Merged over the sandbox's env for this command. */
  env?: Record<string, string>;
  /** Size in cells (1..1000 each); default 24 x 80. */
  rows?: number;
  cols?: number;
  /** Kills the command after this many ms; default 24 h. */
  timeoutMs?: number;
  /** Keep the command running when the terminal is closed (close only detaches); attach again with {@link Sandbox.attachPty} and its pid. */
  keep?: boolean;
}

/** Options of {@link Sandbox.attachPty}. */
export interface AttachPtyOptions {
  /** Resize the terminal on attach (cells, 1..1000; both or neither). */
  rows?: number;
  cols?: number;
}

/**
 * A command on a pseudo-terminal. {@link write} types on it (Ctrl-C is
 * `"\x03"`), {@link read} returns what it shows (one stream, with the
 * echo), {@link wait} its exit code. {@link close} kills the command,
 * unless it was kept or attached: then it only detaches.
 */
export class Pty {
  /** The command's process id in the sandbox (attach again by it). */
  readonly pid: number;
  private readonly ws: WebSocket;
  private readonly chunks: Buffer[] = [];
  private readers: ((b: Buffer | null) => void)[] = [];
  private ended = false;
  private readonly exit: Promise<number>;

  /** @internal */
  constructor(ws: WebSocket, pid: number, exit: Promise<number>) {
    this.ws = ws;
    this.pid = pid;
    this.exit = exit;
    exit.catch(() => {}); // wait() reports it
  }

  /** @internal Output from the WebSocket. */
  push(b: Buffer | null): void {
    if (this.ended) return;
    if (b === null) this.ended = true;
    const r = this.readers.shift();
    if (r) r(b);
    else if (b !== null) this.chunks.push(b);
    if (this.ended) for (const r of this.readers.splice(0)) r(null);
  }

  /** The next bytes the terminal shows; null once it ended and all was read. */
  read(): Promise<Buffer | null> {
    const c = this.chunks.shift();
    if (c) return Promise.resolve(c);
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve) => this.readers.push(resolve));
  }

  /** Types bytes (a string is sent as UTF-8) on the terminal. */
  write(data: string | Uint8Array): Promise<void> {
    return this.send(typeof data === 'string' ? Buffer.from(data) : data, true);
  }

  /** Sets the terminal's size in cells (1..1000 each). */
  resize(rows: number, cols: number): Promise<void> {
    return this.send(JSON.stringify({ type: 'resize', rows, cols }), false);
  }

  /** Sends a signal (1-64) to the command's process group. */
  signal(signal: number): Promise<void> {
    return this.send(JSON.stringify({ type: 'signal', signal }), false);
  }

  private send(data: string | Uint8Array, binary: boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      this.ws.send(data, { binary }, (err) => (err ? reject(new SbxConnectionError(`terminal: ${err.message}`, { cause: err })) : resolve()));
    });
  }

  /**
   * The command's exit code (124 after its timeout, 128+N when signal N
   * killed it). Rejects with the typed error sbxd sent (a restore ends
   * the command: {@link ConflictError} naming it), or
   * {@link SbxConnectionError} when the connection ended without an exit.
   * Output not read is kept for {@link read}.
   */
  wait(): Promise<number> {
    return this.exit;
  }

  /** Closes the WebSocket: the command is killed unless kept or attached (then it only detaches). */
  close(): void {
    this.ws.close(1000);
  }
}

/** @internal Opens a terminal WebSocket at path (escaped, from `/v1/`) and waits for its start. */
export function openPty(t: Transport, path: string, query: URLSearchParams): Promise<Pty> {
  const q = query.toString();
  const pathQ = (t.url ? t.url.pathname.replace(/\/+$/, '') : '') + path + (q ? '?' + q : '');
  let address: string;
  if (t.url) {
    address = (t.url.protocol === 'https:' ? 'wss://' : 'ws://') + t.url.host + pathQ;
  } else {
    address = `ws+unix://${t.socket}:${pathQ}`;
  }
  const headers: Record<string, string> = {};
  if (t.apiKey) headers['Authorization'] = `Bearer ${t.apiKey}`;
  const ws = new WebSocket(address, { headers, maxPayload: 4 << 20 });
  return new Promise<Pty>((resolve, reject) => {
    let pty: Pty | undefined;
    let settle: { ok: (n: number) => void; fail: (e: Error) => void } | undefined;
    const exit = new Promise<number>((ok, fail) => { settle = { ok, fail }; });
    let done = false;
    const end = (err: Error | null, code?: number) => {
      if (done) return;
      done = true;
      if (!pty) reject(err ?? new SbxProtocolError('terminal ended before its start'));
      else {
        pty.push(null);
        if (err) settle!.fail(err);
        else settle!.ok(code!);
      }
    };
    ws.on('unexpected-response', (_req, res) => {
      const body: Buffer[] = [];
      res.on('data', (b: Buffer) => body.push(b));
      res.on('end', () => {
        const text = Buffer.concat(body).toString('utf8');
        let code = codeOfStatus(res.statusCode ?? 0);
        let message = text.trim();
        try {
          const e = JSON.parse(text).error;
          if (e?.code) code = e.code;
          if (e?.message) message = e.message;
        } catch { /* a plain-text refusal (cross-origin) */ }
        end(errorFromCode(code, message, { status: res.statusCode }));
        ws.terminate();
      });
    });
    ws.on('error', (err) => end(new SbxConnectionError(`terminal (${address}): ${err.message}`, { cause: err })));
    ws.on('close', () => end(new SbxConnectionError('terminal: the connection ended without an exit')));
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) {
        pty?.push(data);
        return;
      }
      let m: { type?: string; pid?: number; exit_code?: number; error?: string; code?: string };
      try { m = JSON.parse(data.toString('utf8')); } catch { return; }
      switch (m.type) {
        case 'start':
          if (!pty) {
            pty = new Pty(ws, m.pid ?? 0, exit);
            resolve(pty);
          }
          break;
        case 'exit':
          end(null, m.exit_code ?? -1);
          break;
        case 'error':
          end(errorFromCode(m.code || 'internal', m.error ?? '', { streamed: true }));
          break;
      }
    });
  });
}
