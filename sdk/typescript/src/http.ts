/**
 * The HTTP transport: node:http over a Unix socket or TCP (node:https for
 * https URLs). No global fetch, no runtime dependencies.
 *
 * @internal
 * @module
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { SbxConnectionError, SbxProtocolError, codeOfStatus, errorFromCode } from './errors.js';
import type { ProgressCallback } from './types.js';
import { fromWire, toWire, wireName } from './wire.js';

export const NDJSON = 'application/x-ndjson';
export const JSON_TYPE = 'application/json';

/** Query values by camelCase name (sent as snake_case): a string, a list (repeated key), or undefined (left out). */
export type Query = Record<string, string | string[] | undefined>;

export interface RequestOptions {
  method: string;
  /** Escaped path, starting with `/v1/`. */
  path: string;
  query?: Query;
  /** A value sent as JSON (camelCase, converted to the wire's snake_case), or bytes sent as they are with `contentType`. */
  json?: unknown;
  body?: Uint8Array | string;
  contentType?: string;
  accept?: string;
  signal?: AbortSignal;
}

export interface TransportOptions {
  socket?: string;
  url?: string;
  apiKey?: string;
}

/** Encodes one path segment. */
export function seg(s: string): string {
  return encodeURIComponent(s);
}

export class Transport {
  readonly socket?: string;
  readonly url?: URL;
  readonly apiKey?: string;
  private readonly agent: http.Agent;

  constructor(o: TransportOptions) {
    this.socket = o.socket;
    this.apiKey = o.apiKey || undefined;
    if (o.url) {
      const u = new URL(o.url);
      if ((u.protocol !== 'http:' && u.protocol !== 'https:') || !u.host) {
        throw new TypeError(`sbx URL ${JSON.stringify(o.url)}: want http://host:port`);
      }
      this.url = u;
      this.agent = u.protocol === 'https:' ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true });
    } else {
      this.agent = new http.Agent({ keepAlive: true });
    }
  }

  /** Closes idle keep-alive connections. */
  close(): void {
    this.agent.destroy();
  }

  /** Sends a request; resolves with the response of a 2xx answer, rejects with a typed error otherwise. */
  async request(o: RequestOptions): Promise<http.IncomingMessage> {
    let pathQ = o.path;
    if (this.url) {
      pathQ = this.url.pathname.replace(/\/+$/, '') + pathQ;
    }
    if (o.query) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(o.query)) {
        if (v === undefined) continue;
        for (const x of Array.isArray(v) ? v : [v]) q.append(wireName(k), x);
      }
      const s = q.toString();
      if (s) pathQ += '?' + s;
    }
    const headers: Record<string, string> = {};
    let payload: Buffer | undefined;
    if (o.json !== undefined) {
      payload = Buffer.from(JSON.stringify(toWire(o.json)));
      headers['Content-Type'] = JSON_TYPE;
    } else if (o.body !== undefined) {
      payload = typeof o.body === 'string' ? Buffer.from(o.body) : Buffer.from(o.body.buffer, o.body.byteOffset, o.body.byteLength);
      if (o.contentType) headers['Content-Type'] = o.contentType;
    }
    if (payload !== undefined) headers['Content-Length'] = String(payload.length);
    if (o.accept) headers['Accept'] = o.accept;
    if (this.apiKey) headers['Authorization'] = `Bearer ${this.apiKey}`;

    const opts: http.RequestOptions = { method: o.method, path: pathQ, headers, agent: this.agent, signal: o.signal };
    let mod: typeof http | typeof https = http;
    if (this.url) {
      opts.protocol = this.url.protocol;
      opts.hostname = this.url.hostname.replace(/^\[|\]$/g, '');
      opts.port = this.url.port || (this.url.protocol === 'https:' ? 443 : 80);
      if (this.url.protocol === 'https:') mod = https;
    } else {
      opts.socketPath = this.socket;
      headers['Host'] = 'sbxd';
    }
    const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
      const req = mod.request(opts, resolve);
      req.on('error', (err: NodeJS.ErrnoException) => {
        if (err.name === 'AbortError') reject(err);
        else reject(new SbxConnectionError(`sbxd (${this.url ? this.url.origin : this.socket}): ${err.message}`, { cause: err }));
      });
      req.end(payload);
    });
    const status = res.statusCode ?? 0;
    if (status >= 300) {
      const text = (await readAll(res)).toString('utf8');
      let code = '';
      let message = text.trim();
      let requestId: string | undefined = res.headers['x-request-id'] as string | undefined;
      try {
        const b = JSON.parse(text);
        if (b && b.error && typeof b.error.code === 'string' && b.error.code) {
          code = b.error.code;
          message = b.error.message ?? '';
          if (b.error.request_id) requestId = b.error.request_id;
        }
      } catch {
        /* not JSON */
      }
      if (!code) code = codeOfStatus(status);
      throw errorFromCode(code, message, { status, requestId });
    }
    return res;
  }

  /** Sends a request and decodes a JSON answer into camelCase (undefined for an empty body). */
  async json<T>(o: RequestOptions): Promise<T> {
    return (await this.jsonPage<T>(o)).value;
  }

  /**
   * Sends a request and decodes a JSON answer into camelCase, with the
   * `X-Next-Cursor` header of a paged list (`''` on the last page).
   */
  async jsonPage<T>(o: RequestOptions): Promise<{ value: T; next: string }> {
    const res = await this.request({ accept: JSON_TYPE, ...o });
    const buf = await readAll(res);
    const h = res.headers['x-next-cursor'];
    const next = typeof h === 'string' ? h : '';
    if (buf.length === 0) return { value: undefined as T, next };
    let v: unknown;
    try {
      v = JSON.parse(buf.toString('utf8'));
    } catch (e) {
      throw new SbxProtocolError(`decode ${o.method} ${o.path} answer: ${(e as Error).message}`);
    }
    return { value: fromWire<T>(v), next };
  }

  /**
   * Sends a request answered by an NDJSON stream (a streamed exec) and
   * yields its lines in camelCase; an `error` line is thrown as a typed
   * error. The response is closed when the caller stops.
   */
  async *lines<T>(o: RequestOptions): AsyncGenerator<T, void, undefined> {
    const res = await this.request({ ...o, accept: NDJSON });
    try {
      for await (const line of ndjsonLines(res)) {
        if (line && line.type === 'error') throw errorFromCode(line.code || 'internal', line.error ?? '', { streamed: true });
        yield fromWire<T>(line);
      }
    } finally {
      res.destroy();
    }
  }

  /**
   * Runs a long operation (NDJSON): `info` lines go to `onProgress`, the
   * `complete` line's data is returned, an `error` line is thrown as a
   * typed error.
   */
  async long<T>(o: RequestOptions, onProgress?: ProgressCallback): Promise<T> {
    const res = await this.request({ ...o, accept: NDJSON });
    const ctype = String(res.headers['content-type'] ?? '');
    if (!ctype.startsWith(NDJSON)) {
      // Not a stream (e.g. an operation that answers at once): plain JSON.
      const buf = await readAll(res);
      return fromWire<T>(buf.length ? JSON.parse(buf.toString('utf8')) : undefined);
    }
    for await (const line of ndjsonLines(res)) {
      switch (line.type) {
        case 'info':
          if (onProgress) onProgress(typeof line.data === 'string' ? line.data : JSON.stringify(line.data), line.time);
          break;
        case 'complete':
          res.resume();
          // The result is converted as a value of its own: `data` is a
          // free-form field name elsewhere (an event's data).
          return fromWire<T>(line.data);
        case 'error':
          res.resume();
          throw errorFromCode(line.code || 'internal', line.error ?? '', { streamed: true });
      }
    }
    throw new SbxProtocolError('sbxd stream ended without a complete or error line');
  }
}

/** Reads a whole body. */
export async function readAll(res: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** Yields the parsed JSON objects of an NDJSON body, one a line, as sent (wire names). */
export async function* ndjsonLines(res: AsyncIterable<Buffer | string>): AsyncGenerator<any> {
  let buf = '';
  const dec = new TextDecoder('utf-8');
  const parse = (s: string) => {
    try {
      return JSON.parse(s);
    } catch {
      throw new SbxProtocolError(`bad NDJSON line ${JSON.stringify(s.slice(0, 200))}`);
    }
  };
  for await (const chunk of res) {
    buf += typeof chunk === 'string' ? chunk : dec.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i).trim();
      buf = buf.slice(i + 1);
      if (line) yield parse(line);
    }
  }
  buf += dec.decode();
  if (buf.trim()) yield parse(buf.trim());
}
