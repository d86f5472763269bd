/**
 * `@sbx/sdk` — the TypeScript SDK of sbx, a sandbox runtime for AI agents.
 *
 * ```ts
 * import { Client, guarded } from '@sbx/sdk';
 * const client = new Client();          // $SBX_URL + $SBX_API_KEY, else the socket
 * await using sb = await client.create({ cpus: 1, memory_mb: 512 });
 * const r = await sb.exec('echo hello');
 * ```
 *
 * @module
 */
export * from './errors.js';
export * from './types.js';
export { Client, Sandbox, DEFAULT_SOCKET, execRequest } from './client.js';
export type { ClientOptions, CallOptions, LongOptions, ExecOptions, ForkResult, Command } from './client.js';
export { Pty } from './pty.js';
export type { PtyOptions, AttachPtyOptions } from './pty.js';
export { checkpointFor } from './classify.js';
export {
  tryInCopy, guarded, remember, goBackTo, chain, randomSuffix, GIT_SNAPSHOT_SCRIPT, GIT_ROLLBACK_SCRIPT,
} from './undo.js';
export type { TryResult, TryOptions, GuardResult, GuardOptions, RememberOptions, ChainMark } from './undo.js';
