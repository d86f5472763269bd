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
