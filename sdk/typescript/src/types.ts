/**
 * The public types of the sbx API v1, in camelCase: the types generated
 * from api/openapi.yaml (`types.gen.ts`, `npm run gen`) under the SDK's
 * names, refined only where the schema cannot say more (a discriminated
 * union of stream events). The wire is snake_case; the transport converts
 * (`wire.ts`).
 *
 * @module
 */
import type * as G from './types.gen.js';

/** A sandbox's lifecycle state. */
export type SandboxState = G.State;
/** Egress rules of a sandbox: `internet`, `allow`, `deny`, `connect` (`sb.network.get()`). */
export interface NetworkRules extends G.NetworkRules {}
/** A named host directory mounted in the sandbox. */
export interface Volume extends G.Volume {}
/** What a sandbox was forked or started from. */
export interface SandboxSource extends G.Source {}
/** The sandbox object (`GET /v1/sandboxes/{name}`), as `sb.info`. */
export interface SandboxInfo extends G.Sandbox {}
/** Body of `POST /v1/sandboxes`; every field optional. */
export interface CreateSandboxRequest extends G.CreateSandboxRequest {}
/** Body of `PUT /v1/sandboxes/{name}`: the fields given change. */
export interface UpdateSandboxRequest extends G.UpdateSandboxRequest {}
/** Body of `POST /v1/sandboxes/{name}/fork`. */
export interface ForkRequest extends G.ForkRequest {}
/** Body of `POST /v1/sandboxes/{name}/snapshot`. */
export interface SnapshotRequest extends G.SnapshotRequest {}
/** Body of `POST /v1/sandboxes/{name}/deliveries`. */
export interface DeliveryRequest extends G.DeliveryRequest {}
/** Body of `POST /v1/keys`. */
export interface CreateKeyRequest extends G.CreateKeyRequest {}
/** The error object of the API. */
export interface ErrorBody extends G.ErrorBody {}
/** One entry of a directory listing; `mode` the permission bits (420 = 0o644). */
export interface FileInfo extends G.FileInfo {}
/** Answer of a file write. */
export interface WriteFileResult extends G.FileWritten {}
/** A disk checkpoint: `v0` (the fresh disk), `v1`, ... */
export interface Checkpoint extends G.Checkpoint {}
/** A path that differs between two disks. */
export interface Change extends G.Change {}
/** Answer of `GET .../checkpoints/{id}/diff`. */
export interface Diff extends G.Diff {}
/** A memory snapshot; `id` names it (`snap_…`). */
export interface Snapshot extends G.Snapshot {}
/** A signed delivery record. */
export interface Delivery extends G.Delivery {}
/** The DSSE envelope of a delivery record, exactly as signed. */
export type DsseEnvelope = G.Delivery['envelope'];
/** What deleting a delivered sandbox freed (`teardown: true`). */
export interface Teardown extends G.Teardown {}
/** An API key's record, never its secret. */
export interface Key extends G.Key {}
/** The answer of `POST /v1/keys`: the record and, this once, the secret. */
export interface CreatedKey extends G.CreatedKey {}
/** The answer of `PUT /v1/keys/{id}/limit`: the key's record. */
export interface KeyLimitAnswer extends G.Key {}
/** Usage grouping of `GET /v1/usage`. */
export type UsageGroupBy = G.Usage['groupBy'];
/** The answer of `GET /v1/usage`. */
export interface Usage extends G.Usage {}
/** The usage of one group. */
export interface UsageEntry extends G.UsageEntry {}
/** sbxd's prices, in US dollars. */
export interface UsagePrices extends G.UsagePrices {}
/** One sbxd node of `GET /v1/nodes`. */
export interface Node extends G.Node {}
/** What a node published for placement. */
export interface NodeCapacity extends G.NodeCapacity {}
/** Counts of network decisions. */
export interface NetworkCounts extends G.NetworkCounts {}
/** One refused destination. */
export interface NetworkRefusal extends G.NetworkRefusal {}
/** Answer of `GET .../network/log` (`sb.network.log()`). */
export interface NetworkLog extends G.NetworkLog {}
/** Where a secret may be sent. */
export interface SecretRule extends G.SecretRule {}
/** A secret as given. */
export interface Secret extends G.Secret {}
/** A secret as answered: placeholder and rules, never the value. */
export interface SecretInfo extends G.SecretInfo {}
/** One request that carried a secret's placeholder through the egress proxy. */
export interface SecretUse extends G.SecretUse {}
/** An event delivered to a sandbox (`data` is the caller's JSON, untouched). */
export interface SbxEvent extends G.Event {}
/** Answer of `POST /v1/events/{key}`. */
export interface EventResult extends G.EventResult {}
/** A process started by exec. */
export interface ProcessInfo extends G.Process {}
/** A TCP port a program listens on inside a sandbox. */
export interface Port extends G.Port {}
/** Answer of `GET /v1/health`. */
export interface Health extends G.Health {}
/** An image. */
export interface Image extends G.Image {}
/** The wire form of a fork's result (the SDK answers {@link Sandbox} objects instead). */
export interface ForkResultWire extends G.ForkResult {}

/** The classes of {@link checkpointFor} and of guarded exec's `undo.class`: the lightest undo that covers a command. */
export type UndoKind = G.ClassifyResult['undo'];

/**
 * The `undo` option of exec: what sbxd takes before the command. `auto`
 * picks by the command's class (git → a repository snapshot when `cwd` is
 * in a git work tree, else a checkpoint; fork → a memory snapshot; none →
 * nothing); `git` needs `cwd` in a work tree (409 `conflict` otherwise).
 */
export type ExecUndoMode = Exclude<G.ExecRequest['undo'], '' | undefined>;

/** A repository snapshot of guarded exec (`undo: 'git'`): what a rollback puts back. */
export interface GitUndo extends G.GitUndo {}

/** What a guarded exec took (`kind`: `none`, `git`, `checkpoint`, `snapshot`) and whether it rolled back (`result.undo`). */
export interface ExecUndo extends G.UndoResult {}

/** The buffered answer of exec: `exitCode`, `stdout`, `stderr`, `durationMs` (ms), ... */
export interface ExecResult extends Omit<G.ExecResult, 'pid'> {
  /** The process id in the sandbox. */
  pid?: number;
}

/** One event of a streamed exec. */
export type ExecEvent =
  | { type: 'start'; pid: number }
  | { type: 'stdout'; data: string }
  | { type: 'stderr'; data: string }
  | { type: 'exit'; exitCode: number; durationMs: number; timedOut?: boolean; undo?: ExecUndo };

/** The answer of `POST /v1/classify` ({@link Runtime.classify}): `undo`, the lightest undo that covers the command, and `reason`, one sentence. */
export interface ClassifyResult extends G.ClassifyResult {}

/** Receives the `info` lines of a long operation: the message, and its time (RFC 3339). */
export type ProgressCallback = (message: string, time?: string) => void;
