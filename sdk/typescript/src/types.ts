/**
 * Wire types of the sbx REST API v1, as sbxd sends and takes them (JSON
 * snake_case field names, mirroring the Go package `api/`).
 *
 * @module
 */

/** A sandbox's lifecycle state. */
export type SandboxState = 'creating' | 'running' | 'paused' | 'stopped' | 'suspended' | 'deleting';

/** Egress rules of a sandbox: `GET|PUT /v1/sandboxes/{name}/network`. */
export interface NetworkRules {
  /** `false` cuts all egress. Absent: `true`. */
  internet?: boolean;
  /** Non-empty: only these domains (`*.example.org`) and IPv4 CIDRs. */
  allow?: string[];
  /** Same forms; wins over `allow`. */
  deny?: string[];
  /** Names of other sandboxes this one may connect to. */
  connect?: string[];
}

/** A named host directory mounted in the sandbox. */
export interface Volume {
  name: string;
  path: string;
}

/** What a sandbox was forked or started from. */
export interface SandboxSource {
  sandbox?: string;
  snapshot?: string;
}

/** The sandbox object. */
export interface SandboxInfo {
  /** Immutable: `sbx_` + 16 hex digits. */
  id: string;
  /** Unique: `[a-z0-9][a-z0-9-]{0,62}`. */
  name: string;
  state: SandboxState;
  /** Why the sandbox is in a state it was not asked into. */
  state_reason?: string;
  image: string;
  cpus: number;
  memory_mb: number;
  /** Disk quota in MiB of what the sandbox writes; 0 when sbxd has no disk quotas. */
  disk_mb?: number;
  env: Record<string, string>;
  labels: Record<string, string>;
  network: NetworkRules;
  volumes?: Volume[] | null;
  timeout_ms: number;
  keep_alive_while_running?: boolean;
  wake_on?: string;
  suspend_time?: string;
  /** RFC 3339 UTC. */
  create_time: string;
  source: SandboxSource | null;
}

/** Body of `POST /v1/sandboxes`; every field optional. */
export interface CreateSandboxRequest {
  name?: string;
  image?: string;
  cpus?: number;
  memory_mb?: number;
  disk_mb?: number;
  env?: Record<string, string>;
  labels?: Record<string, string>;
  network?: NetworkRules;
  volumes?: Volume[];
  /** Start from a memory snapshot (by id), running. */
  snapshot?: string;
  /** Idle time before auto-suspend in ms; 0 = never. */
  timeout_ms?: number;
  keep_alive_while_running?: boolean;
  /** Secrets held by sbxd: the sandbox sees a placeholder in `$name`. */
  secrets?: Secret[];
}

/** Body of `PUT /v1/sandboxes/{name}`: the fields given change. */
export interface UpdateSandboxRequest {
  /** Rename the sandbox (409 `name_taken` when another has the name). */
  name?: string;
  /** Replaces all of the sandbox's labels. */
  labels?: Record<string, string>;
  timeout_ms?: number;
  keep_alive_while_running?: boolean;
}

/** The `undo` kinds of exec and of {@link checkpointFor}. */
export type UndoKind = 'none' | 'git' | 'checkpoint' | 'fork';

/** The `undo` field of exec: what to take before the command. */
export type ExecUndoMode = 'none' | 'auto' | 'checkpoint' | 'snapshot';

/** What a guarded exec took and whether it rolled back. */
export interface ExecUndo {
  /** `none`, `checkpoint` or `snapshot`. */
  kind: string;
  /** For `undo: "auto"`: the class of the command (`none`, `git`, `checkpoint`, `fork`). */
  class?: string;
  /** The checkpoint id taken (`v4`), or empty. */
  checkpoint?: string;
  /** The snapshot id taken, or empty. */
  snapshot?: string;
  rolled_back?: boolean;
  rollback_error?: string;
}

/** Body of `POST /v1/sandboxes/{name}/exec`. */
export interface ExecRequest {
  cmd: string[];
  cwd?: string;
  env?: Record<string, string>;
  timeout_ms?: number;
  stdin?: string;
  stdin_base64?: string;
  encoding?: 'utf-8' | 'base64';
  detach?: boolean;
  undo?: ExecUndoMode;
  rollback_on_failure?: boolean;
}

/** The buffered answer of exec. */
export interface ExecResult {
  pid?: number;
  stdout: string;
  stderr: string;
  exit_code: number;
  duration_ms: number;
  timed_out?: boolean;
  truncated?: boolean;
  undo?: ExecUndo;
}

/** One event of a streamed exec. */
export type ExecEvent =
  | { type: 'start'; pid: number }
  | { type: 'stdout'; data: string }
  | { type: 'stderr'; data: string }
  | { type: 'exit'; exit_code: number; duration_ms: number; timed_out?: boolean; undo?: ExecUndo };

/** One entry of a directory listing. */
export interface FileInfo {
  name: string;
  path: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
  /** Permission bits (decimal in JSON; e.g. 420 = 0o644). */
  mode: number;
  mod_time: string;
  link_target?: string;
}

/** Answer of a file write. */
export interface WriteFileResult {
  path: string;
  size: number;
  mode: number;
}

/** A disk checkpoint: `v0` (the fresh disk), `v1`, ... */
export interface Checkpoint {
  id: string;
  create_time: string;
  comment: string;
  source_id: string | null;
  health: 'ok' | 'damaged' | string;
  size_bytes?: number;
  files?: number;
  added_bytes?: number;
  /** When it was safely in the blob store; null while it is a snapshot on its node only, stored in the background. */
  store_time?: string | null;
}

/** A path that differs between two disks. */
export interface Change {
  path: string;
  type: string;
  old_type?: string;
  link_target?: string;
  size: number;
  old_size: number;
}

/** Answer of `GET .../checkpoints/{id}/diff`. */
export interface Diff {
  from: string;
  to: string;
  added: Change[];
  modified: Change[];
  deleted: Change[];
  truncated?: boolean;
}

/** A memory snapshot. */
export interface Snapshot {
  id: string;
  name: string;
  sandbox: string;
  create_time: string;
  expire_time: string | null;
  memory_bytes: number;
  disk_bytes: number;
  stored_bytes: number;
  metadata: any;
  billable?: boolean;
  /** "ok", or "damaged" when its memory record cannot be read (delete it). */
  health?: string;
}

/** Body of `POST /v1/sandboxes/{name}/snapshot`. */
export interface SnapshotRequest {
  name?: string;
  retention_days?: number;
  metadata?: Record<string, unknown>;
}

/** Body of `POST /v1/sandboxes/{name}/deliveries`. */
export interface DeliveryRequest {
  /** Absolute paths in the sandbox (1 to 256, none inside another); each archived under its path without the leading `/`. */
  paths: string[];
  /** A label for the caller (at most 63 bytes); need not be unique. */
  name?: string;
  /** The caller's JSON object (at most 64 KiB), signed with the record. */
  metadata?: Record<string, unknown>;
  /** Delete the sandbox once the delivery is recorded. */
  teardown?: boolean;
}

/** The DSSE envelope of a delivery record, exactly as signed. */
export interface DsseEnvelope {
  /** `application/vnd.in-toto+json`. */
  payloadType: string;
  /** The in-toto Statement v1, base64. */
  payload: string;
  signatures: Array<{ keyid: string; sig: string }>;
}

/** What deleting a delivered sandbox freed (`teardown: true`). */
export interface Teardown {
  /** True when the sandbox was deleted; `error` says why not. */
  deleted: boolean;
  error?: string;
  /** Bytes of the writable layer's files. */
  layer_bytes: number;
  /** Checkpoints deleted, and what they had added to the blob store (bytes). */
  checkpoints: number;
  checkpoint_bytes: number;
  /** Processes still running, ended with it. */
  processes: number;
  /** What the delete removed from the host: `container`, `network`, `mounts`, `layer`, `sandbox_dir`. */
  removed: string[];
  /** What a check found still there. */
  left?: string[];
}

/**
 * A delivery record: an archive (tar, zstd) of a sandbox's files and its
 * signed statement, one link of the node's chain. Verify it offline with
 * `sbx delivery verify` or the Go package `delivery`.
 */
export interface Delivery {
  id: string;
  name: string;
  /** Its place in the node's chain, from 1. */
  seq: number;
  /** The delivered sandbox's name and id (it may be gone). */
  sandbox: string;
  sandbox_id: string;
  /** `sha256:<hex>` of the archive's bytes. */
  archive_digest: string;
  archive_bytes: number;
  /** Regular files in the archive. */
  files: number;
  /** `sha256:<hex>` of the envelope; `previous` the digest of the record before it (`''` for the first). */
  digest: string;
  previous: string;
  envelope: DsseEnvelope;
  metadata: any;
  create_time: string;
  /** What the teardown freed (only in the answer of a delivery with `teardown`). */
  teardown?: Teardown;
}

/** Body of `POST /v1/keys` (admin keys only). */
export interface CreateKeyRequest {
  /** Unique among live keys: `[A-Za-z0-9][A-Za-z0-9._-]{0,62}`, not starting with `key_`. */
  name: string;
  /** Spending limit per UTC day in US dollars (≥ 0); absent or null for none. */
  daily_limit_usd?: number | null;
  labels?: Record<string, string>;
  /** An admin key sees every object and manages keys; a tenant key (the default) only what it made. */
  admin?: boolean;
}

/** An API key's record (`GET /v1/keys`); never its secret. */
export interface Key {
  /** `key_` and 16 hex digits; the objects the key makes belong to it. */
  id: string;
  name: string;
  labels: Record<string, string>;
  admin: boolean;
  /** US dollars per UTC day, or null for no limit. */
  daily_limit_usd: number | null;
  create_time: string;
  /** When it was revoked (listed with `revoked: true`). */
  revoke_time?: string;
}

/** The answer of `POST /v1/keys`: the record and, this once, the secret. */
export interface CreatedKey {
  id: string;
  name: string;
  labels: Record<string, string>;
  admin: boolean;
  daily_limit_usd: number | null;
  create_time: string;
  revoke_time?: string;
  /** The bearer token, `sbxk_…`; sbxd keeps only its SHA-256. */
  secret: string;
}

/** Usage grouping of `GET /v1/usage`. */
export type UsageGroupBy = 'sandbox' | 'key' | 'day';

/** The answer of `GET /v1/usage`: what was used in `[since, until)`, grouped and priced. */
export interface Usage {
  since: string;
  until: string;
  group_by: UsageGroupBy;
  prices: UsagePrices;
  /** One entry per group that used anything; days oldest first. */
  usage: UsageEntry[];
  /** The sum of every entry (its group fields are empty). */
  total: UsageEntry;
}

/** The usage of one group: only its own group field is set. */
export interface UsageEntry {
  /** The sandbox's name and id (group_by sandbox; it may be gone). */
  sandbox?: string;
  sandbox_id?: string;
  /** The id of the API key billed (group_by key; empty for the operator's). */
  key?: string;
  /** The UTC day, `YYYY-MM-DD` (group_by day). */
  day?: string;
  /** CPU time used; one core busy for a second is 1. */
  cpu_seconds: number;
  /** Memory allocated (memory_mb / 1024) times seconds running. */
  memory_gib_seconds: number;
  /** Checkpoint and snapshot bytes stored times seconds kept. */
  stored_byte_seconds: number;
  /** US dollars at `prices`. */
  cost: number;
}

/** The answer of `PUT /v1/keys/{id}/limit`: the key's record (its other fields as the API sends them). */
export interface KeyLimitAnswer {
  id: string;
  name: string;
  /** US dollars per UTC day, or null for no limit. */
  daily_limit_usd: number | null;
  [field: string]: unknown;
}

/** sbxd's prices, in US dollars. */
export interface UsagePrices {
  /** Per vCPU-hour used (default 0.025). */
  cpu_hour: number;
  /** Per GiB-hour allocated while running (default 0.0075). */
  memory_gib_hour: number;
  /** Per GB-month stored: 10^9 bytes for 30 days (default 0.08). */
  storage_gb_month: number;
}

/** Body of `POST /v1/sandboxes/{name}/fork`. */
export interface ForkRequest {
  name?: string;
  labels?: Record<string, string>;
  network?: NetworkRules;
  count?: number;
}

/** The error object of the API. */
export interface ErrorBody {
  code: string;
  message: string;
  request_id?: string;
}

/** The complete data of a fork. */
export interface ForkResultWire {
  snapshot: string;
  paused_ms: number;
  copies: Array<{ sandbox?: SandboxInfo; error?: ErrorBody }>;
}

/** Counts of network decisions. */
export interface NetworkCounts {
  dns_answered: number;
  dns_refused: number;
  connections_allowed: number;
  connections_refused: number;
  packets_refused: number;
}

/** One refused destination. */
export interface NetworkRefusal {
  time: string;
  kind: string;
  destination: string;
  address?: string;
  port?: number;
  reason: string;
  count: number;
}

/** Answer of `GET .../network/log`. */
export interface NetworkLog {
  counts: NetworkCounts;
  refused: NetworkRefusal[];
  /** Requests that carried a secret's placeholder, newest first. */
  secrets?: SecretUse[];
}

/** Where a secret may be sent: host, methods, and a path prefix (default `/`). */
export interface SecretRule {
  host: string;
  methods: string[];
  path_prefix?: string;
}

/** A secret as given; its value never enters the sandbox and is never answered. */
export interface Secret {
  name: string;
  value: string;
  rules: SecretRule[];
}

/** A secret as answered: placeholder and rules, never the value. */
export interface SecretInfo {
  name: string;
  placeholder: string;
  rules: SecretRule[];
  value_bytes: number;
  update_time: string;
}

/** One request that carried a secret's placeholder through the egress proxy. */
export interface SecretUse {
  time: string;
  secret: string;
  host: string;
  method: string;
  path: string;
  allowed: boolean;
  reason?: string;
}

/** An event delivered to a sandbox. */
export interface SbxEvent {
  id: string;
  key: string;
  data?: unknown;
  data_text?: string;
  data_base64?: string;
  create_time: string;
  deliver_time: string;
  /** On a pending event (`pendingEvents`): when it is dropped. */
  expire_time?: string;
}

/** Answer of `POST /v1/events/{key}`. */
export interface EventResult {
  id: string;
  woken: string[] | null;
  pending: boolean;
  expire_time?: string;
}

/** A process started by exec. */
export interface ProcessInfo {
  pid: number;
  cmd: string[];
  start_time: string;
  state: 'running' | 'exited';
  exit_code?: number;
  output_bytes: number;
}

/** A TCP port a program listens on inside a sandbox. */
export interface Port {
  port: number;
  address: string;
  pid?: number;
  command?: string;
  /**
   * Opens this port's preview without the key in the URL: add
   * `?sbx_preview=<token>` to its preview URL (naming the sandbox as the
   * list's request did). Minted by sbxd for the request's key; omitted over
   * the Unix socket.
   */
  preview_token?: string;
}

/** Answer of `GET /v1/health`. */
export interface Health {
  status: string;
  version: string;
  runtime: string;
  warm_sandboxes: number;
  pid: number;
}

/** An image. */
export interface Image {
  name: string;
  digest: string;
  source: string;
  size_bytes: number;
  create_time: string;
  env: string[] | null;
}

/** Receives the `info` lines of a long operation. */
export type ProgressCallback = (message: string, time?: string) => void;
