/**
 * The sbx client: {@link Runtime} talks to one sbxd (`runtime.sandboxes`,
 * `runtime.snapshots`); {@link Sandbox} is a handle on one sandbox with its
 * methods (`Sandbox.create()` uses a default runtime from the environment).
 * Every field and option is camelCase; the transport converts to and from
 * the wire's snake_case.
 *
 * @module
 */
import { SandboxNotFoundError, SbxProtocolError, errorFromCode } from './errors.js';
import type { IncomingMessage } from 'node:http';
import { Transport, readAll, seg, type Query } from './http.js';
import { openPty, type AttachPtyOptions, type Pty, type PtyOptions } from './pty.js';
import type {
  Checkpoint, ClassifyResult, CreateKeyRequest, CreatedKey, CreateSandboxRequest, Delivery, DeliveryRequest, Diff, EventResult, ExecEvent, ExecResult, ExecUndoMode,
  FileInfo, ForkRequest, ForkResultWire, Health, Image, NetworkLog, NetworkRules, Port, ProcessInfo, Secret, SecretInfo, SecretRule,
  Key, Node, ProgressCallback, SandboxInfo, SbxEvent, Snapshot, SnapshotRequest, UpdateSandboxRequest, Usage, UsageGroupBy, KeyLimitAnswer, WriteFileResult,
} from './types.js';
import type { ExecRequest as WireExecRequest } from './types.gen.js';

// Node 20 has Symbol.asyncDispose (as Symbol.for('nodejs.asyncDispose')); older
// runtimes get the same registered symbol, so `await using` works everywhere.
(Symbol as { asyncDispose?: symbol }).asyncDispose ??= Symbol.for('nodejs.asyncDispose');
(Symbol as { dispose?: symbol }).dispose ??= Symbol.for('nodejs.dispose');

/** Where sbxd listens when neither option nor `SBX_SOCKET` says otherwise. */
export const DEFAULT_SOCKET = '/run/sbx/sbx.sock';

/** Options of a {@link Runtime}. */
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

/** A command: a shell line (run as `["sh","-c",line]`), or an argv (`cmd[0]` without a `/` is looked up in PATH). */
export type Command = string | string[];

/** Options of {@link Runtime.create} and {@link Sandbox.create}: the sandbox's fields (all optional), and the call's. */
export type CreateOptions = CreateSandboxRequest & LongOptions;

/** Options of {@link Sandbox.fork} and {@link Sandbox.forkMany}: the copies' name, labels and network rules. */
export type ForkOptions = Omit<ForkRequest, 'count'> & LongOptions;

/** Options of {@link Sandbox.snapshot}. */
export type SnapshotOptions = SnapshotRequest & LongOptions;

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
  /**
   * Taken by sbxd before the command: `auto` (the lightest that covers the
   * command), `git`, `checkpoint`, `snapshot`, `none`. The result's `undo`
   * says what was taken.
   */
  undo?: ExecUndoMode;
  /** Put the undo back when the command exits non-zero; needs `undo`. */
  rollbackOnFailure?: boolean;
}

/** The exec request (camelCase) of a command and its options. */
export type ExecRequest = Omit<WireExecRequest, 'undo'> & { undo?: ExecUndoMode };

/** Result of {@link Sandbox.forkMany}: the copies made, and why the others failed. */
export interface ForkManyResult {
  /** The copies that were made, in order. */
  sandboxes: Sandbox[];
  /** One typed error per copy that failed (empty when all were made). */
  errors: Error[];
  /** The id of the snapshot the fork took for itself. */
  snapshot: string;
  /** How long the original was paused, in ms. */
  pausedMs: number;
}

/** Builds the request (camelCase; the transport sends it snake_case) of an exec. */
export function execRequest(cmd: Command, o: ExecOptions = {}): ExecRequest {
  if (typeof cmd !== 'string' && !Array.isArray(cmd)) {
    throw new TypeError('exec: the command is a shell line (string) or an argv (string[])');
  }
  const req: ExecRequest = typeof cmd === 'string' ? { cmd: ['sh', '-c', cmd] } : { cmd };
  if (o.cwd !== undefined) req.cwd = o.cwd;
  if (o.env !== undefined) req.env = o.env;
  if (o.timeoutMs !== undefined) req.timeoutMs = o.timeoutMs;
  if (typeof o.stdin === 'string') req.stdin = o.stdin;
  else if (o.stdin !== undefined) req.stdinBase64 = Buffer.from(o.stdin).toString('base64');
  if (o.encoding !== undefined) req.encoding = o.encoding;
  if (o.undo !== undefined) req.undo = o.undo;
  if (o.rollbackOnFailure !== undefined) req.rollbackOnFailure = o.rollbackOnFailure;
  return req;
}

/** Splits call options (signal, onProgress) off a request's fields. */
function split<T extends object>(o: T & LongOptions): { req: T; signal?: AbortSignal; onProgress?: ProgressCallback } {
  const { signal, onProgress, ...req } = o;
  return { req: req as T, signal, onProgress };
}

function sbPath(idOrName: string, ...rest: string[]): string {
  return '/v1/sandboxes/' + seg(idOrName) + rest.map((r) => '/' + r).join('');
}

/** `runtime.sandboxes`: create, get, list, update and delete sandboxes. */
export interface Sandboxes {
  /** {@link Runtime.create}: a new sandbox, running; `{ snapshot }` starts it from a memory snapshot. */
  create(opts?: CreateOptions): Promise<Sandbox>;
  /** {@link Runtime.get}: a sandbox by name or id; {@link SandboxNotFoundError} if none. */
  get(nameOrId: string, o?: CallOptions): Promise<Sandbox>;
  /** {@link Runtime.list}: sandboxes, oldest first; with `labels`, those that carry all of them. */
  list(o?: CallOptions & { labels?: Record<string, string> }): Promise<Sandbox[]>;
  /** {@link Runtime.update}: the fields given change. */
  update(nameOrId: string, req: UpdateSandboxRequest, o?: CallOptions): Promise<Sandbox>;
  /** {@link Runtime.delete}: deletes a sandbox by name or id. */
  delete(nameOrId: string, o?: CallOptions): Promise<void>;
}

/** `runtime.snapshots`: the memory snapshots (taken with {@link Sandbox.snapshot}). */
export interface Snapshots {
  /** Snapshots not expired, newest first; with `sandbox` (a name), of that sandbox. */
  list(o?: CallOptions & { sandbox?: string }): Promise<Snapshot[]>;
  /** One snapshot by id, or {@link SnapshotNotFoundError}. */
  get(id: string, o?: CallOptions): Promise<Snapshot>;
  /** Deletes a snapshot. */
  delete(id: string, o?: CallOptions): Promise<void>;
}

let defaultRuntime: Runtime | undefined;

/**
 * A client of one sbxd. `new Runtime()` reads the environment: `SBX_URL`
 * and `SBX_API_KEY` (TCP), else `SBX_SOCKET`, else {@link DEFAULT_SOCKET}.
 */
export class Runtime {
  /** @internal */
  readonly t: Transport;
  /** Sandboxes: `runtime.sandboxes.create({ snapshot })`, `.get`, `.list`, `.update`, `.delete`. */
  readonly sandboxes: Sandboxes;
  /** Memory snapshots: `runtime.snapshots.list`, `.get`, `.delete`. */
  readonly snapshots: Snapshots;

  /**
   * The runtime `Sandbox.create()` and `Sandbox.connect()` use: made from
   * the environment on first use, then the same one.
   */
  static default(): Runtime {
    defaultRuntime ??= new Runtime();
    return defaultRuntime;
  }

  constructor(options: ClientOptions = {}) {
    this.sandboxes = {
      create: (o) => this.create(o),
      get: (n, o) => this.get(n, o),
      list: (o) => this.list(o),
      update: (n, r, o) => this.update(n, r, o),
      delete: (n, o) => this.delete(n, o),
    };
    this.snapshots = {
      list: (o) => this.listSnapshots(o),
      get: (id, o) => this.getSnapshot(id, o),
      delete: (id, o) => this.deleteSnapshot(id, o),
    };
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
   * Creates and starts a sandbox (`POST /v1/sandboxes`): `{ name, image,
   * cpus, memoryMb, diskMb, env, labels, network, timeoutMs, secrets,
   * snapshot, ... }`, all optional; `snapshot` (an id) starts it from a
   * memory snapshot, running. With `onProgress` it streams progress (the
   * default image's first build takes minutes). Throws
   * {@link InvalidArgumentError}, `NameTakenError`, `CapacityError`, ...
   */
  async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const { req, signal, onProgress } = split<CreateSandboxRequest>(opts);
    const r = { method: 'POST', path: '/v1/sandboxes', json: req, signal };
    const info = onProgress ? await this.t.long<SandboxInfo>(r, onProgress) : await this.t.json<SandboxInfo>(r);
    return this.wrap(info);
  }

  /**
   * Classifies a command (`POST /v1/classify`): the lightest undo that
   * covers it (`none`, `git`, `checkpoint`, `fork`) and why. A string is a
   * shell line; an argv `["sh","-c",S]` classifies S. Throws
   * {@link InvalidArgumentError} for an empty command.
   */
  classify(cmd: Command, o: CallOptions = {}): Promise<ClassifyResult> {
    return this.t.json<ClassifyResult>({ method: 'POST', path: '/v1/classify', json: { cmd }, signal: o.signal });
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
   * without it), oldest first, each with `expireTime`: every page of
   * `GET /v1/events`.
   */
  async pendingEvents(key?: string, o: CallOptions = {}): Promise<SbxEvent[]> {
    const out: SbxEvent[] = [];
    let cursor: string | undefined;
    for (let pages = 0; pages < 100000; pages++) {
      const query: Query = {};
      if (key) query.key = key;
      if (cursor) query.cursor = cursor;
      const page = await this.t.jsonPage<SbxEvent[] | null>({ method: 'GET', path: '/v1/events', query, signal: o.signal });
      out.push(...(page.value ?? []));
      if (!page.next) break;
      cursor = page.next;
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
   * the record's `archiveDigest`; verify the record itself with
   * `sbx delivery verify` rather than trust the transfer.
   */
  async deliveryArchive(id: string, o: CallOptions = {}): Promise<Buffer> {
    return readAll(await this.deliveryArchiveStream(id, o));
  }

  /**
   * The archive of a delivery as a stream (`Content-Length` is its size,
   * `X-Sbx-Digest` its `archive_digest`); a chunk lost from the blob store
   * cuts the stream (an `error` event). Read it to the end or destroy it.
   * Its bytes are the archive's, as sent.
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
    const query: Query = { since: time(o.since), until: time(o.until), groupBy: o.groupBy || undefined };
    return this.t.json<Usage>({ method: 'GET', path: '/v1/usage', query, signal: o.signal });
  }

  /**
   * The nodes of the cluster sbxd belongs to, by name (`GET /v1/nodes`);
   * a single sbxd lists itself alone. Admin keys only (ForbiddenError).
   */
  nodes(o: CallOptions = {}): Promise<Node[]> {
    return this.t.json<Node[]>({ method: 'GET', path: '/v1/nodes', signal: o.signal });
  }

  /**
   * Replaces an API key's daily spending limit in US dollars (`null`: no
   * limit); with `resumeSuspended`, the sandboxes the limit suspended
   * resume once the key is under it. Admin keys only. Answers the key's
   * record.
   */
  setKeyLimit(id: string, dailyLimitUsd: number | null, o: CallOptions & { resumeSuspended?: boolean } = {}): Promise<KeyLimitAnswer> {
    const json = { dailyLimitUsd, resumeSuspended: o.resumeSuspended || undefined };
    return this.t.json<KeyLimitAnswer>({ method: 'PUT', path: '/v1/keys/' + seg(id) + '/limit', json, signal: o.signal });
  }

  /** Images. */
  async listImages(o: CallOptions = {}): Promise<Image[]> {
    return (await this.t.json<Image[]>({ method: 'GET', path: '/v1/images', signal: o.signal })) ?? [];
  }
}

/**
 * `sb.network`: the sandbox's egress rules, enforced on the host. Each
 * call reads or writes sbxd's rules (`GET|PUT .../network`).
 */
export class SandboxNetwork {
  /** @internal */
  constructor(private readonly sb: Sandbox) {}

  /** The rules now: `{ internet, allow, deny, connect }`. */
  get(o: CallOptions = {}): Promise<NetworkRules> {
    return this.sb.client.t.json<NetworkRules>({ method: 'GET', path: sbPath(this.sb.id, 'network'), signal: o.signal });
  }

  /**
   * Replaces the rules; answers them as stored (lists in canonical form).
   * `internet` left out means true. Throws {@link InvalidArgumentError}
   * for a malformed domain or CIDR (the rules stay as they were).
   */
  async set(rules: NetworkRules, o: CallOptions = {}): Promise<NetworkRules> {
    const out = await this.sb.client.t.json<NetworkRules>({ method: 'PUT', path: sbPath(this.sb.id, 'network'), json: rules, signal: o.signal });
    this.sb.info.network = out;
    return out;
  }

  /**
   * Cuts all egress: replaces the rules with `{internet: false}` (no
   * allow, deny or connect entries), in one request, as Go's
   * `Network().Off` and Python's `network.off()`.
   */
  off(o: CallOptions = {}): Promise<NetworkRules> {
    return this.set({ internet: false }, o);
  }

  /** Opens egress to the internet: replaces the rules with `{internet: true}` (no lists), in one request. */
  on(o: CallOptions = {}): Promise<NetworkRules> {
    return this.set({ internet: true }, o);
  }

  /** What the host refused (`refused`, newest first), counts, and the requests that carried a secret. */
  log(o: CallOptions = {}): Promise<NetworkLog> {
    return this.sb.client.t.json<NetworkLog>({ method: 'GET', path: sbPath(this.sb.id, 'network', 'log'), signal: o.signal });
  }
}

/**
 * A handle on one sandbox; its calls address the sandbox by id.
 * `await using sb = await Sandbox.create()` deletes it at the end of the
 * scope.
 */
export class Sandbox {
  /** The sandbox object as last seen (refreshed by {@link refresh} and the calls that answer it). */
  info: SandboxInfo;
  /** The runtime this handle talks through. */
  readonly client: Runtime;
  /** The egress rules: `sb.network.get()`, `.set({...})`, `.off()`, `.on()`, `.log()`. */
  readonly network: SandboxNetwork;

  constructor(client: Runtime, info: SandboxInfo) {
    this.client = client;
    this.info = info;
    this.network = new SandboxNetwork(this);
  }

  /**
   * Creates a sandbox through the default runtime ({@link Runtime.default}:
   * `SBX_URL` + `SBX_API_KEY`, else the socket `SBX_SOCKET` or
   * {@link DEFAULT_SOCKET}). Options as {@link Runtime.create}.
   */
  static create(opts: CreateOptions = {}): Promise<Sandbox> {
    return Runtime.default().create(opts);
  }

  /** Gets an existing sandbox by name or id through the default runtime; {@link SandboxNotFoundError} if none. */
  static connect(nameOrId: string, o: CallOptions = {}): Promise<Sandbox> {
    return Runtime.default().get(nameOrId, o);
  }

  /** Immutable: `sbx_` + 16 hex digits. */
  get id(): string { return this.info.id; }
  /** The name as last seen (a promotion by {@link tryInCopy} keeps it). */
  get name(): string { return this.info.name; }
  get state(): string { return this.info.state; }
  get labels(): Record<string, string> { return this.info.labels ?? {}; }

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

  /** `await using sb = await Sandbox.create()` deletes it at the end of the scope (a sandbox already gone is fine). */
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
   * Runs a command and waits for it: `{ exitCode, stdout, stderr,
   * durationMs, timedOut, truncated, undo }`. A string runs as
   * `["sh","-c",cmd]`; an array is the argv. A command that fails is not an
   * error: read `exitCode` (124 on timeout). Throws
   * {@link SandboxNotFoundError}, {@link InvalidArgumentError}, ...
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
    for await (const ev of this.t.lines<ExecEvent>({ method: 'POST', path: this.p('exec'), json: execRequest(cmd, o), signal: o.signal })) {
      yield ev;
      if (ev.type === 'exit') return;
    }
    throw new SbxProtocolError('exec stream ended without an exit line');
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
    const query: Query = { path, maxBytes: o.maxBytes !== undefined ? String(o.maxBytes) : undefined };
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

  /**
   * Takes a memory snapshot (memory, processes and disk): `{ name,
   * retentionDays, metadata }`, all optional (`metadata` is your JSON
   * object, kept as is; default retention 7 days). Answers the snapshot,
   * with its `id`; start a sandbox from it with
   * `runtime.sandboxes.create({ snapshot: id })`. Throws
   * `SandboxHasVolumeError`, `SnapshotFailedError` (nothing changed), ...
   */
  snapshot(opts: SnapshotOptions = {}): Promise<Snapshot> {
    const { req, signal, onProgress } = split<SnapshotRequest>(opts);
    return this.t.long<Snapshot>({ method: 'POST', path: this.p('snapshot'), json: req, signal }, onProgress);
  }

  /**
   * Forks a live copy (memory, processes, disk) and answers it, a
   * {@link Sandbox}: `{ name, labels, network }` are the copy's (default a
   * generated name, and the original's labels and rules). The original
   * pauses for a moment and runs on. A copy that could not be made is
   * thrown (typed: `CapacityError`, `ForkFailedError`, ...).
   */
  async fork(opts: ForkOptions = {}): Promise<Sandbox> {
    const r = await this.forkCopies(undefined, opts);
    const c = r.sandboxes[0];
    if (!c) throw r.errors[0] ?? new SbxProtocolError('fork answered no copy');
    return c;
  }

  /**
   * Forks `n` live copies (1 to 16) from one snapshot: with `name` they are
   * NAME-1 ... NAME-n. Answers the copies that were made and one typed
   * error per copy that was not (a fork can succeed in part); throws when
   * the fork as a whole fails ({@link InvalidArgumentError} for `n` out of
   * range, sbxd's check).
   */
  forkMany(n: number, opts: ForkOptions = {}): Promise<ForkManyResult> {
    return this.forkCopies(n, opts);
  }

  private async forkCopies(n: number | undefined, opts: ForkOptions): Promise<ForkManyResult> {
    const { req, signal, onProgress } = split<Omit<ForkRequest, 'count'>>(opts);
    const json: ForkRequest = n === undefined ? req : { ...req, count: n };
    const out = await this.t.long<ForkResultWire>({ method: 'POST', path: this.p('fork'), json, signal }, onProgress);
    const res: ForkManyResult = { sandboxes: [], errors: [], snapshot: out.snapshot, pausedMs: out.pausedMs };
    for (const c of out.copies ?? []) {
      if (c.sandbox) res.sandboxes.push(this.client.wrap(c.sandbox));
      else res.errors.push(errorFromCode(c.error?.code || 'fork_failed', c.error?.message ?? 'fork failed', { streamed: true }));
    }
    return res;
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
    const json = o.wakeOn ? { wakeOn: o.wakeOn } : {};
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
      const page = await this.t.jsonPage<SbxEvent[] | null>({ method: 'GET', path: this.p('events'), query: cursor ? { cursor } : undefined, signal: o.signal });
      out.push(...(page.value ?? []));
      if (!page.next) break;
      cursor = page.next;
    }
    return out;
  }
}

/** The former name of {@link Runtime}. */
export const Client = Runtime;
/** The former name of {@link Runtime}. */
export type Client = Runtime;
