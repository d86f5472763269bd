/**
 * `@sbx/sdk` — the TypeScript SDK of sbx, a sandbox runtime for AI agents.
 *
 * ```ts
 * import { Sandbox } from '@sbx/sdk';
 * await using sb = await Sandbox.create({ cpus: 1, memoryMb: 512 }); // $SBX_URL + $SBX_API_KEY, else the socket
 * const r = await sb.exec('echo hello');
 * console.log(r.exitCode, r.stdout);
 * ```
 *
 * @module
 */
export * from './errors.js';
export * from './types.js';
export { Runtime, Client, Sandbox, SandboxNetwork, DEFAULT_SOCKET, execRequest } from './client.js';
export type {
  ClientOptions, CallOptions, LongOptions, ExecOptions, ExecRequest, ForkManyResult, ForkOptions, CreateOptions, SnapshotOptions,
  Command, Sandboxes, Snapshots,
} from './client.js';
export { Pty } from './pty.js';
export type { PtyOptions, AttachPtyOptions } from './pty.js';
export { tryInCopy, guarded, checkpointFor, remember, goBackTo, chain, randomSuffix } from './undo.js';
export type { TryResult, TryOptions, GuardResult, GuardOptions, RememberOptions, ChainMark } from './undo.js';
