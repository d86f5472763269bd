/**
 * The sbx client: {@link Client} talks to one sbxd; {@link Sandbox} is a
 * handle on one sandbox with its methods.
 *
 * @module
 */
import { SandboxNotFoundError, SbxProtocolError, errorFromCode } from './errors.js';
import type { IncomingMessage } from 'node:http';
import { NDJSON, Transport, ndjsonLines, readAll, seg, type Query } from './http.js';
import { openPty, type AttachPtyOptions, type Pty, type PtyOptions } from './pty.js';
import type {
  Checkpoint, CreateKeyRequest, CreatedKey, CreateSandboxRequest, Delivery, DeliveryRequest, Diff, EventResult, ExecEvent, ExecRequest, ExecResult, ExecUndoMode,
  FileInfo, ForkRequest, ForkResultWire, Health, Image, NetworkLog, NetworkRules, Port, ProcessInfo, Secret, SecretInfo, SecretRule,
  Key, ProgressCallback, SandboxInfo, SbxEvent, Snapshot, SnapshotRequest, UpdateSandboxRequest, Usage, UsageGroupBy, KeyLimitAnswer, WriteFileResult,
} from './types.js';

// Node 20 has Symbol.asyncDispose (as Symbol.for('nodejs.asyncDispose')); older
// runtimes get the same registered symbol, so `await using` works everywhere.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('nodejs.asyncDispose');
(Symbol as { dispose?: symbol }).dispose ??= Symbol.for('nodejs.dispose');

/** Where sbxd listens when neither option nor `SBX_SOCKET` says otherwise. */
export const DEFAULT_SOCKET = '/run/sbx/sbx.sock';

/** Options of a {@link Client}. */
export interface ClientOptions {
  /** Unix socket path. Default: `$SBX_SOCKET`, else `/run/sbx/sbx.sock` (used when no URL is given). */
  socket?: string;
  /** TCP URL, e.g. `http://127.0.0.1:7070`. Default `$SBX_URL`. Takes precedence over the socket. */
  url?: string;
  /** API key sent as `Authorization: Bearer` (required over TCP). Default `$SBX_API_KEY`. */
  apiKey?: string;
}

/** Options of calls that can be cancelled. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** Options of long operations (NDJSON progress). */
export interface LongOptions extends CallOptions {
  /** Receives the operation's `info` lines. */
  onProgress?: ProgressCallback;
}

/** A command: a shell line (run as `["sh","-c",line]`), an argv, or a whole wire exec request. */
export type Command = string | string[] | ExecRequest;

/** Options of {@link Sandbox.exec} and {@link Sandbox.execStream}. */
export interface ExecOptions extends CallOptions {
  /** Working directory (absolute); sbxd's default is `/workspace`. */
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
  /** Standard input: text, or bytes (sent as `stdin_base64`). */
  stdin?: string | Uint8Array;
  /** `base64`: `stdout`/`stderr` (and each stream event's `data`) are the exact bytes in standard base64; decode them with `Buffer.from(x, 'base64')`. */
  encoding?: 'utf-8' | 'base64';
  /** Server-side undo taken before the command (wire `undo`). */
  undo?: ExecUndoMode;
  /** Put the undo back when the command exits non-zero (wire `rollback_on_failure`); needs `undo`. */
  rollbackOnFailure?: boolean;
}

/** Result of a fork: one sandbox or error per copy. */
export interface ForkResult {
  /** The id of the snapshot the fork took for itself. */
  snapshot: string;
  pausedMs: number;
  /** The copies, `null` where one failed (see `errors`). */
  copies: Array<Sandbox | null>;
  errors: Array<Error | null>;
}

/** Builds the wire request of an exec. */
export function execRequest(cmd: Command, o: ExecOptions = {}): ExecRequest {
  const req: ExecRequest = typeof cmd === 'string' ? { cmd: ['sh', '-c', cmd] } : Array.isArray(cmd) ? { cmd } : { ...cmd };
  if (o.cwd !== undefined) req.cwd = o.cwd;
  if (o.env !== undefined) req.env = o.env;
  if (o.timeoutMs !== undefined) req.timeout_ms = o.timeoutMs;
  if (typeof o.stdin === 'string') req.stdin = o.stdin;
  else if (o.stdin !== undefined) req.stdin_base64 = Buffer.from(o.stdin).toString('base64');
  if (o.encoding !== undefined) req.encoding = o.encoding;
  if (o.undo !== undefined) req.undo = o.undo;
  if (o.rollbackOnFailure !== undefined) req.rollback_on_failure = o.rollbackOnFailure;
  return req;
}

function sbPath(idOrName: string, ...rest: string[]): string {
  return '/v1/sandboxes/' + seg(idOrName) + rest.map((r) => '/' + r).join('');
}

/** A client of one sbxd. */
export class Client {
  /** @internal */
  readonly t: Transport;

  constructor(options: ClientOptions = {}) {
    const env = process.env;
    let url = options.url;
    let socket = options.socket;
    if (url === undefined && socket === undefined) {
      if (env.SBX_URL) url = env.SBX_URL;
      else socket = env.SBX_SOCKET || DEFAULT_SOCKET;
    }
    const apiKey = options.apiKey ?? (url !== undefined ? env.SBX_API_KEY : undefined);
    this.t = new Transport(url !== undefined ? { url, apiKey } : { socket, apiKey });
  }

  /** True when this client talks over TCP. */
  get isTcp(): boolean {
    return this.t.url !== undefined;
  }

  /** Closes idle keep-alive connections (the process can exit without it). */
  close(): void {
    this.t.close();
  }

  /** `GET /v1/health`. */
  health(o: CallOptions = {}): Promise<Health> {
    return this.t.json<Health>({ method: 'GET', path: '/v1/health', signal: o.signal });
  }

  /** @internal */
  wrap(info: SandboxInfo): Sandbox {
    return new Sandbox(this, info);
  }

  /**
   * Creates and starts a sandbox (`POST /v1/sandboxes`). With `onProgress`
   * it streams progress (the default image's first build takes minutes).
   */
  async create(req: CreateSandboxRequest = {}, o: LongOptions = {}): Promise<Sandbox> {
    const r = { method: 'POST', path: '/v1/sandboxes', json: req, signal: o.signal };
    const info = o.onProgress ? await this.t.long<SandboxInfo>(r, o.onProgress) : await this.t.json<SandboxInfo>(r);
    return this.wrap(info);
  }

  /** Starts a new sandbox, running, from a memory snapshot (`POST /v1/sandboxes` with `snapshot`). */
  createFromSnapshot(snapshotId: string, req: Omit<CreateSandboxRequest, 'snapshot'> = {}, o: LongOptions = {}): Promise<Sandbox> {
    return this.create({ ...req, snapshot: snapshotId }, o);
  }

  /** Gets a sandbox by name or id. Throws {@link SandboxNotFoundError}. */
  async get(nameOrId: string, o: CallOptions = {}): Promise<Sandbox> {
    return this.wrap(await this.t.json<SandboxInfo>({ method: 'GET', path: sbPath(nameOrId), signal: o.signal }));
  }

  /** Lists sandboxes, oldest first; with `labels`, those that have all of them. */
  async list(o: CallOptions & { labels?: Record<string, string> } = {}): Promise<Sandbox[]> {
    const query: Query = {};
    if (o.labels) query.label = Object.entries(o.labels).map(([k, v]) => `${k}=${v}`);
    const out = await this.t.json<SandboxInfo[]>({ method: 'GET', path: '/v1/sandboxes', query, signal: o.signal });
    return (out ?? []).map((s) => this.wrap(s));
  }

  /** Deletes a sandbox by name or id (`DELETE /v1/sandboxes/{name}`). */
  async delete(nameOrId: string, o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: sbPath(nameOrId), signal: o.signal });
  }

  /** Changes a sandbox (`PUT /v1/sandboxes/{name}`): rename with `{name}`, idle timeout, keep-alive. */
  async update(nameOrId: string, req: UpdateSandboxRequest, o: CallOptions = {}): Promise<Sandbox> {
    return this.wrap(await this.t.json<SandboxInfo>({ method: 'PUT', path: sbPath(nameOrId), json: req, signal: o.signal }));
  }

  /** Memory snapshots not expired, newest first; with `sandbox`, of that sandbox. */
  async listSnapshots(o: CallOptions & { sandbox?: string } = {}): Promise<Snapshot[]> {
    const query: Query = { sandbox: o.sandbox || undefined };
    return (await this.t.json<Snapshot[]>({ method: 'GET', path: '/v1/snapshots', query, signal: o.signal })) ?? [];
  }

  /** One snapshot, or {@link SnapshotNotFoundError}. */
  getSnapshot(id: string, o: CallOptions = {}): Promise<Snapshot> {
    return this.t.json<Snapshot>({ method: 'GET', path: '/v1/snapshots/' + seg(id), signal: o.signal });
  }

  /** Deletes a snapshot. */
  async deleteSnapshot(id: string, o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: '/v1/snapshots/' + seg(id), signal: o.signal });
  }

  /**
   * Posts an event (`POST /v1/events/{key}`): wakes sandboxes suspended
   * with `wake_on == key`. `data`: bytes (octet-stream), a string (sent as
   * JSON when it is JSON, else as octet-stream, like the Go client), or any
   * other value (sent as JSON).
   */
  async postEvent(key: string, data?: unknown, o: CallOptions & { contentType?: string } = {}): Promise<EventResult> {
    let body: Uint8Array | string | undefined;
    let contentType = o.contentType;
    if (data instanceof Uint8Array) {
      body = data;
      contentType ??= 'application/octet-stream';
    } else if (typeof data === 'string') {
      body = data;
      if (!contentType) {
        contentType = 'application/octet-stream';
        try {
          JSON.parse(data);
          contentType = 'application/json';
        } catch { /* not JSON */ }
      }
    } else if (data !== undefined) {
      body = JSON.stringify(data);
      contentType ??= 'application/json';
    }
    const path = '/v1/events/' + key.split('/').map(seg).join('/');
    return this.t.json<EventResult>({ method: 'POST', path, body, contentType, signal: o.signal });
  }

  /**
   * Events kept for a key no sandbox waits on yet (of `key`; of every key
   * without it), oldest first, each with `expire_time`: every page of
   * `GET /v1/events`.
   */
  async pendingEvents(key?: string, o: CallOptions = {}): Promise<SbxEvent[]> {
    const out: SbxEvent[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 100000; pages++) {
      const query: Query = {};
      if (key) query.key = key;
      if (cursor) query.cursor = cursor;
      const res = await this.t.request({ method: 'GET', path: '/v1/events', query, accept: 'application/json', signal: o.signal });
      const buf = await readAll(res);
      try {
        out.push(...((buf.length ? JSON.parse(buf.toString('utf8')) : []) as SbxEvent[]));
      } catch (e) {
        throw new SbxProtocolError(`decode GET /v1/events answer: ${(e as Error).message}`);
      }
      const next = res.headers['x-next-cursor'];
      if (typeof next !== 'string' || next === '') break;
      cursor = next;
    }
    return out;
  }

  /** Cancels a pending event (`DELETE /v1/events/{id}`); `EventNotFound` (404) if it is not pending. */
  async cancelEvent(id: string, o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: '/v1/events/' + seg(id), signal: o.signal });
  }

  /** Cancels every pending event of `key`; resolves with how many there were. */
  async cancelEvents(key: string, o: CallOptions = {}): Promise<number> {
    const r = await this.t.json<{ cancelled: number }>({ method: 'DELETE', path: '/v1/events', query: { key }, signal: o.signal });
    return r?.cancelled ?? 0;
  }

  /** Delivery records in chain order (oldest first); with `sandbox` (name or id), those of that sandbox (it may be gone). */
  async listDeliveries(o: CallOptions & { sandbox?: string } = {}): Promise<Delivery[]> {
    const query: Query = { sandbox: o.sandbox || undefined };
    return (await this.t.json<Delivery[]>({ method: 'GET', path: '/v1/deliveries', query, signal: o.signal })) ?? [];
  }

  /** One delivery record, or {@link NotFoundError}. */
  getDelivery(id: string, o: CallOptions = {}): Promise<Delivery> {
    return this.t.json<Delivery>({ method: 'GET', path: '/v1/deliveries/' + seg(id), signal: o.signal });
  }

  /**
   * The bytes of a delivery's archive (tar, zstd), whole. Their sha256 is
   * the record's `archive_digest`; verify the record itself with
   * `sbx delivery verify` rather than trust the transfer.
   */
  async deliveryArchive(id: string, o: CallOptions = {}): Promise<Buffer> {
    return readAll(await this.deliveryArchiveStream(id, o));
  }

  /**
   * The archive of a delivery as a stream (`Content-Length` is its size,
   * `X-Sbx-Digest` its `archive_digest`); a chunk lost from the blob store
   * cuts the stream (an `error` event). Read it to the end or destroy it.
   */
  deliveryArchiveStream(id: string, o: CallOptions = {}): Promise<IncomingMessage> {
    return this.t.request({ method: 'GET', path: '/v1/deliveries/' + seg(id) + '/archive', accept: 'application/x-tar+zstd', signal: o.signal });
  }

  /** The node's ed25519 public key (PEM, PKIX) that verifies delivery records. */
  async deliveryPublicKey(o: CallOptions = {}): Promise<string> {
    const res = await this.t.request({ method: 'GET', path: '/v1/deliveries/key', accept: 'application/x-pem-file', signal: o.signal });
    return (await readAll(res)).toString('utf8');
  }

  /**
   * Makes an API key (admin keys only: `ForbiddenError` with a tenant key).
   * The answer carries its `secret`, shown this once.
   */
  createKey(req: CreateKeyRequest, o: CallOptions = {}): Promise<CreatedKey> {
    return this.t.json<CreatedKey>({ method: 'POST', path: '/v1/keys', json: req, signal: o.signal });
  }

  /** The live API keys, oldest first (with `revoked`, revoked ones too); a tenant key gets its own only. */
  async listKeys(o: CallOptions & { revoked?: boolean } = {}): Promise<Key[]> {
    const query: Query = { revoked: o.revoked ? '1' : undefined };
    return (await this.t.json<Key[]>({ method: 'GET', path: '/v1/keys', query, signal: o.signal })) ?? [];
  }

  /** One API key by id or (live) name, or `KeyNotFoundError`. */
  getKey(idOrName: string, o: CallOptions = {}): Promise<Key> {
    return this.t.json<Key>({ method: 'GET', path: '/v1/keys/' + seg(idOrName), signal: o.signal });
  }

  /** Revokes an API key at once: its open streams end, it authenticates nothing more (admin keys only). */
  async revokeKey(idOrName: string, o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: '/v1/keys/' + seg(idOrName), signal: o.signal });
  }

  /**
   * Usage in `[since, until)` (default: the current UTC day until now),
   * grouped by sandbox (default), API key or UTC day, each entry priced
   * in US dollars. `since` and `until` are `Date`s or RFC 3339 strings.
   * A bad window or group is an {@link InvalidArgumentError}.
   */
  usage(o: CallOptions & { since?: Date | string; until?: Date | string; groupBy?: UsageGroupBy } = {}): Promise<Usage> {
    const time = (t?: Date | string) => (t instanceof Date ? t.toISOString().replace(/\.\d{3}Z$/, 'Z') : t || undefined);
    const query: Query = { since: time(o.since), until: time(o.until), group_by: o.groupBy || undefined };
    return this.t.json<Usage>({ method: 'GET', path: '/v1/usage', query, signal: o.signal });
  }

  /**
   * Replaces an API key's daily spending limit in US dollars (`null`: no
   * limit); with `resumeSuspended`, the sandboxes the limit suspended
   * resume once the key is under it. Admin keys only. Answers the key's
   * record (wire field names).
   */
  setKeyLimit(id: string, dailyLimitUsd: number | null, o: CallOptions & { resumeSuspended?: boolean } = {}): Promise<KeyLimitAnswer> {
    const json = { daily_limit_usd: dailyLimitUsd, resume_suspended: o.resumeSuspended || undefined };
    return this.t.json<KeyLimitAnswer>({ method: 'PUT', path: '/v1/keys/' + seg(id) + '/limit', json, signal: o.signal });
  }

  /** Images. */
  async listImages(o: CallOptions = {}): Promise<Image[]> {
    return (await this.t.json<Image[]>({ method: 'GET', path: '/v1/images', signal: o.signal })) ?? [];
  }
}

/** A handle on one sandbox. Its calls address the sandbox by id. */
export class Sandbox {
  /** The sandbox object as last seen. */
  info: SandboxInfo;
  readonly client: Client;

  constructor(client: Client, info: SandboxInfo) {
    this.client = client;
    this.info = info;
  }

  get id(): string { return this.info.id; }
  get name(): string { return this.info.name; }
  get state(): string { return this.info.state; }
  get labels(): Record<string, string> { return this.info.labels ?? {}; }
  get network(): NetworkRules { return this.info.network; }

  private get t(): Transport { return this.client.t; }
  private p(...rest: string[]): string { return sbPath(this.info.id, ...rest); }

  /** @internal Makes this handle the sandbox `info` (after a promotion). */
  adopt(info: SandboxInfo): this {
    this.info = info;
    return this;
  }

  /** Reads the sandbox object again. */
  async refresh(o: CallOptions = {}): Promise<this> {
    this.info = await this.t.json<SandboxInfo>({ method: 'GET', path: this.p(), signal: o.signal });
    return this;
  }

  /** Deletes the sandbox. */
  async delete(o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: this.p(), signal: o.signal });
  }

  /** `await using sb = await client.create()` deletes it at the end of the scope (a sandbox already gone is fine). */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.delete();
    } catch (e) {
      if (!(e instanceof SandboxNotFoundError)) throw e;
    }
  }

  /** `PUT /v1/sandboxes/{id}`: the fields given change. */
  async update(req: UpdateSandboxRequest, o: CallOptions = {}): Promise<this> {
    this.info = await this.t.json<SandboxInfo>({ method: 'PUT', path: this.p(), json: req, signal: o.signal });
    return this;
  }

  /** Renames the sandbox (`PUT` with `{"name": newName}`). */
  rename(newName: string, o: CallOptions = {}): Promise<this> {
    return this.update({ name: newName }, o);
  }

  /** Stops it: processes end, the disk stays; the next exec boots it. */
  async stop(o: CallOptions = {}): Promise<this> {
    this.info = await this.t.json<SandboxInfo>({ method: 'POST', path: this.p('stop'), signal: o.signal });
    return this;
  }

  /**
   * Runs a command and waits for it (buffered answer). A string runs as
   * `["sh","-c",cmd]`; an array is the argv; an object is a wire exec
   * request (options override its fields).
   */
  exec(cmd: Command, o: ExecOptions = {}): Promise<ExecResult> {
    return this.t.json<ExecResult>({ method: 'POST', path: this.p('exec'), json: execRequest(cmd, o), signal: o.signal });
  }

  /**
   * Runs a command, streaming: yields `start`, `stdout`, `stderr` events
   * as output comes, and ends with `exit`. An `error` line (the sandbox
   * died) is thrown as a typed error.
   */
  async *execStream(cmd: Command, o: ExecOptions = {}): AsyncGenerator<ExecEvent, void, undefined> {
    const res = await this.t.request({ method: 'POST', path: this.p('exec'), json: execRequest(cmd, o), accept: NDJSON, signal: o.signal });
    try {
      for await (const ev of ndjsonLines(res)) {
        if (ev.type === 'error') throw errorFromCode(ev.code || 'internal', ev.error ?? '', { streamed: true });
        yield ev as ExecEvent;
        if (ev.type === 'exit') return;
      }
      throw new SbxProtocolError('exec stream ended without an exit line');
    } finally {
      res.destroy();
    }
  }

  /** Starts a detached process; returns its pid. */
  async start(cmd: Command, o: ExecOptions = {}): Promise<number> {
    const out = await this.t.json<{ pid: number }>({ method: 'POST', path: this.p('exec'), json: { ...execRequest(cmd, o), detach: true }, signal: o.signal });
    return out.pid;
  }

  /**
   * Starts a command on a pseudo-terminal (default a login shell), as
   * `docker exec -it`, over the terminal WebSocket; resolves once it runs.
   * With `keep` it outlives {@link Pty.close}: attach again with
   * {@link attachPty}. Throws {@link InvalidArgumentError} (bad size or
   * query), {@link SandboxNotFoundError}.
   */
  pty(o: PtyOptions = {}): Promise<Pty> {
    const q = new URLSearchParams({ tty: '1' });
    for (const a of o.cmd ?? []) q.append('cmd', a);
    if (o.cwd) q.set('cwd', o.cwd);
    for (const [k, v] of Object.entries(o.env ?? {})) q.append('env', `${k}=${v}`);
    if (o.rows) q.set('rows', String(o.rows));
    if (o.cols) q.set('cols', String(o.cols));
    if (o.timeoutMs) q.set('timeout_ms', String(o.timeoutMs));
    if (o.keep) q.set('keep', '1');
    return openPty(this.t, this.p('exec'), q);
  }

  /**
   * Attaches again to the terminal of process `pid`: one started with
   * `keep` whose client went, or one in a copy made by a snapshot or fork
   * (same pid). Its latest 64 KiB of output are read first. Closing it only
   * detaches. Throws {@link ConflictError} while another client is
   * attached (one at a time), {@link InvalidArgumentError} for a process
   * that is not a terminal, {@link ProcessNotFoundError}.
   */
  attachPty(pid: number, o: AttachPtyOptions = {}): Promise<Pty> {
    const q = new URLSearchParams();
    if (o.rows || o.cols) {
      q.set('rows', String(o.rows ?? 0));
      q.set('cols', String(o.cols ?? 0));
    }
    return openPty(this.t, this.p('processes', String(pid), 'tty'), q);
  }

  /** Processes started by exec. */
  async processes(o: CallOptions = {}): Promise<ProcessInfo[]> {
    return (await this.t.json<ProcessInfo[]>({ method: 'GET', path: this.p('processes'), signal: o.signal })) ?? [];
  }

  /** Sends a signal to a process's group. */
  async signal(pid: number, signal: number, o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'POST', path: this.p('processes', String(pid), 'signal'), json: { signal }, signal: o.signal });
  }

  /**
   * Reads a regular file's bytes. Throws {@link FileNotFoundError}, {@link TooLargeError} when
   * the file is over `maxBytes` (the server's default is 1 GiB), {@link InvalidArgumentError}
   * for a directory, a FIFO or a device.
   */
  async readFile(path: string, o: CallOptions & { maxBytes?: number } = {}): Promise<Buffer> {
    const query: Query = { path, max_bytes: o.maxBytes !== undefined ? String(o.maxBytes) : undefined };
    const res = await this.t.request({ method: 'GET', path: this.p('files'), query, signal: o.signal });
    return readAll(res);
  }

  /** Reads a file as UTF-8 text. */
  async readText(path: string, o: CallOptions & { maxBytes?: number } = {}): Promise<string> {
    return (await this.readFile(path, o)).toString('utf8');
  }

  /** Writes a file (parents created; atomic replace). `mode` is a number, e.g. `0o755`. */
  writeFile(path: string, data: string | Uint8Array, o: CallOptions & { mode?: number } = {}): Promise<WriteFileResult> {
    const query: Query = { path, mode: o.mode !== undefined ? o.mode.toString(8) : undefined };
    return this.t.json<WriteFileResult>({ method: 'PUT', path: this.p('files'), query, body: data, contentType: 'application/octet-stream', signal: o.signal });
  }

  /** Lists a directory, by name. */
  async listFiles(dir: string, o: CallOptions = {}): Promise<FileInfo[]> {
    return (await this.t.json<FileInfo[]>({ method: 'GET', path: this.p('files'), query: { path: dir, list: '1' }, signal: o.signal })) ?? [];
  }

  /** Deletes a file, or a directory (`recursive` for a non-empty one). */
  async deleteFile(path: string, o: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: this.p('files'), query: { path, recursive: o.recursive ? '1' : undefined }, signal: o.signal });
  }

  /** Takes a disk checkpoint (NDJSON; progress to `onProgress`). */
  checkpoint(o: LongOptions & { comment?: string } = {}): Promise<Checkpoint> {
    const json = o.comment !== undefined ? { comment: o.comment } : {};
    return this.t.long<Checkpoint>({ method: 'POST', path: this.p('checkpoint'), json, signal: o.signal }, o.onProgress);
  }

  /** Checkpoints, newest first, `v0` last. */
  async checkpoints(o: CallOptions = {}): Promise<Checkpoint[]> {
    return (await this.t.json<Checkpoint[]>({ method: 'GET', path: this.p('checkpoints'), signal: o.signal })) ?? [];
  }

  /** One checkpoint; `verify` rereads its chunks. */
  getCheckpoint(id: string, o: CallOptions & { verify?: boolean } = {}): Promise<Checkpoint> {
    return this.t.json<Checkpoint>({ method: 'GET', path: this.p('checkpoints', seg(id)), query: { verify: o.verify ? '1' : undefined }, signal: o.signal });
  }

  /** Restores a checkpoint: the sandbox stops; the next request boots it on that disk. */
  async restore(id: string, o: LongOptions = {}): Promise<this> {
    const info = await this.t.long<SandboxInfo>({ method: 'POST', path: this.p('checkpoints', seg(id), 'restore'), signal: o.signal }, o.onProgress);
    if (info) this.info = info;
    return this;
  }

  /** Paths added, modified and deleted from `from` to `to` (default `live`, the disk now). */
  diff(o: CallOptions & { from?: string; to?: string; limit?: number } = {}): Promise<Diff> {
    const query: Query = { from: o.from || undefined, limit: o.limit ? String(o.limit) : undefined };
    return this.t.json<Diff>({ method: 'GET', path: this.p('checkpoints', seg(o.to || 'live'), 'diff'), query, signal: o.signal });
  }

  /** Takes a memory snapshot (NDJSON). */
  snapshot(o: LongOptions & { name?: string; retentionDays?: number; metadata?: Record<string, unknown> } = {}): Promise<Snapshot> {
    const json: SnapshotRequest = {};
    if (o.name !== undefined) json.name = o.name;
    if (o.retentionDays !== undefined) json.retention_days = o.retentionDays;
    if (o.metadata !== undefined) json.metadata = o.metadata;
    return this.t.long<Snapshot>({ method: 'POST', path: this.p('snapshot'), json, signal: o.signal }, o.onProgress);
  }

  /** Forks live copies (NDJSON). */
  async fork(req: ForkRequest = {}, o: LongOptions = {}): Promise<ForkResult> {
    const out = await this.t.long<ForkResultWire>({ method: 'POST', path: this.p('fork'), json: req, signal: o.signal }, o.onProgress);
    const res: ForkResult = { snapshot: out.snapshot, pausedMs: out.paused_ms, copies: [], errors: [] };
    for (const c of out.copies ?? []) {
      if (c.sandbox) {
        res.copies.push(this.client.wrap(c.sandbox));
        res.errors.push(null);
      } else {
        res.copies.push(null);
        res.errors.push(errorFromCode(c.error?.code || 'fork_failed', c.error?.message ?? 'fork failed', { streamed: true }));
      }
    }
    return res;
  }

  /** Forks one copy and returns it; a failed copy is thrown. */
  async forkOne(req: Omit<ForkRequest, 'count'> = {}, o: LongOptions = {}): Promise<Sandbox> {
    const r = await this.fork(req, o);
    const c = r.copies[0];
    if (!c) throw r.errors[0] ?? new SbxProtocolError('fork answered no copy');
    return c;
  }

  /**
   * Packs `paths` (absolute; a directory whole, a symlink as a link) into a
   * signed delivery (NDJSON; progress to `onProgress`): the archive in the
   * blob store, its record appended to the node's chain. A stopped sandbox
   * boots, a suspended one wakes. With `teardown` the sandbox is deleted
   * afterwards and the record's `teardown` says what that freed. Throws
   * {@link InvalidArgumentError} (a path missing, escaping, or over the size
   * limit: nothing is stored), {@link ConflictError} (busy).
   */
  deliver(paths: string[], o: LongOptions & { name?: string; metadata?: Record<string, unknown>; teardown?: boolean } = {}): Promise<Delivery> {
    const json: DeliveryRequest = { paths };
    if (o.name !== undefined) json.name = o.name;
    if (o.metadata !== undefined) json.metadata = o.metadata;
    if (o.teardown) json.teardown = true;
    return this.t.long<Delivery>({ method: 'POST', path: this.p('deliveries'), json, signal: o.signal }, o.onProgress);
  }

  /** This sandbox's deliveries, oldest first. */
  deliveries(o: CallOptions = {}): Promise<Delivery[]> {
    return this.client.listDeliveries({ ...o, sandbox: this.info.id });
  }

  /** The network rules. */
  getNetwork(o: CallOptions = {}): Promise<NetworkRules> {
    return this.t.json<NetworkRules>({ method: 'GET', path: this.p('network'), signal: o.signal });
  }

  /** Replaces the network rules; answers them as stored. */
  async setNetwork(rules: NetworkRules, o: CallOptions = {}): Promise<NetworkRules> {
    const out = await this.t.json<NetworkRules>({ method: 'PUT', path: this.p('network'), json: rules, signal: o.signal });
    this.info.network = out;
    return out;
  }

  /** What the host refused, and counts. */
  networkLog(o: CallOptions = {}): Promise<NetworkLog> {
    return this.t.json<NetworkLog>({ method: 'GET', path: this.p('network', 'log'), signal: o.signal });
  }

  /** The secrets, by name: placeholders and rules, never values. */
  async secrets(o: CallOptions = {}): Promise<SecretInfo[]> {
    return (await this.t.json<{ secrets: SecretInfo[] }>({ method: 'GET', path: this.p('secrets'), signal: o.signal })).secrets;
  }

  /** Replaces all the secrets (`[]` removes them); a secret that keeps its name keeps its placeholder. */
  async setSecrets(secrets: Secret[], o: CallOptions = {}): Promise<SecretInfo[]> {
    const r = await this.t.json<{ secrets: SecretInfo[] }>({ method: 'PUT', path: this.p('secrets'), json: { secrets }, signal: o.signal });
    return r.secrets;
  }

  /** Adds a secret or replaces its value and rules; without `value` an existing secret keeps its value. */
  putSecret(name: string, s: { value?: string; rules: SecretRule[] }, o: CallOptions = {}): Promise<SecretInfo> {
    return this.t.json<SecretInfo>({ method: 'PUT', path: this.p('secrets', seg(name)), json: { value: s.value, rules: s.rules }, signal: o.signal });
  }

  /** Removes a secret. */
  async deleteSecret(name: string, o: CallOptions = {}): Promise<void> {
    await this.t.json({ method: 'DELETE', path: this.p('secrets', seg(name)), signal: o.signal });
  }

  /** TCP ports programs listen on. */
  async ports(o: CallOptions = {}): Promise<Port[]> {
    return (await this.t.json<Port[]>({ method: 'GET', path: this.p('ports'), signal: o.signal })) ?? [];
  }

  /** Suspends it (memory and disk to the blob store); `wakeOn` an event key. */
  async suspend(o: LongOptions & { wakeOn?: string } = {}): Promise<this> {
    const json = o.wakeOn ? { wake_on: o.wakeOn } : {};
    const info = await this.t.long<SandboxInfo>({ method: 'POST', path: this.p('suspend'), json, signal: o.signal }, o.onProgress);
    if (info) this.info = info;
    return this;
  }

  /** Resumes a suspended sandbox. */
  async resume(o: LongOptions = {}): Promise<this> {
    const info = await this.t.long<SandboxInfo>({ method: 'POST', path: this.p('resume'), signal: o.signal }, o.onProgress);
    if (info) this.info = info;
    return this;
  }

  /**
   * Events delivered to the sandbox, oldest first: every page (sbxd
   * answers at most 100 events or 4 MiB a page, and the next page's
   * cursor in `X-Next-Cursor`).
   */
  async events(o: CallOptions = {}): Promise<SbxEvent[]> {
    const out: SbxEvent[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 100000; pages++) {
      const res = await this.t.request({
        method: 'GET', path: this.p('events'), query: cursor ? { cursor } : undefined,
        accept: 'application/json', signal: o.signal,
      });
      const buf = await readAll(res);
      let page: SbxEvent[];
      try {
        page = buf.length ? (JSON.parse(buf.toString('utf8')) as SbxEvent[]) : [];
      } catch (e) {
        throw new SbxProtocolError(`decode GET events answer: ${(e as Error).message}`);
      }
      out.push(...(page ?? []));
      const next = res.headers['x-next-cursor'];
      if (typeof next !== 'string' || next === '') break;
      cursor = next;
    }
    return out;
  }
}
