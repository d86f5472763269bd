/**
 * The undo helpers of docs/undo.md: {@link tryInCopy}, {@link guarded},
 * {@link checkpointFor}, {@link remember}, {@link goBackTo}, {@link chain}.
 * They are thin: the classification of commands and the undos themselves
 * (git, checkpoint, snapshot) are sbxd's (`POST /v1/classify`, guarded
 * exec), so every SDK agrees by construction.
 *
 * **These patterns are a convenience, not a security boundary.** sbxd picks
 * an undo from the text of a command, and a command can do more than its
 * text says. The sandbox is the boundary; effects outside it (a `git push`,
 * an HTTP POST to an allowed host) are undone by no undo.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { InvalidArgumentError, SandboxNotFoundError, SnapshotNotFoundError } from './errors.js';
import { Runtime, type CallOptions, type Command, type Sandbox } from './client.js';
import type { ExecResult, NetworkRules, Snapshot, UndoKind } from './types.js';

const ALPHABET = 'abcdefghijklmnopqrstuvwxyz0123456789';

/** 6 random `[a-z0-9]`. */
export function randomSuffix(n = 6): string {
  const b = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += ALPHABET[b[i] % ALPHABET.length];
  return s;
}

/**
 * `<name>-<tag>-<6 random>`, the name cut to its first 63 - len(tag) - 8
 * bytes so that the whole is at most 63 bytes (as Go's `suffixed` in
 * client/undo.go).
 */
export function derivedName(name: string, tag: string): string {
  const max = 63 - Buffer.byteLength(tag) - 8;
  const b = Buffer.from(name, 'utf8');
  const base = b.length > max ? b.subarray(0, max).toString('utf8') : name;
  return `${base}-${tag}-${randomSuffix()}`;
}

/** Result of {@link tryInCopy}. */
export interface TryResult {
  /** True when the copy replaced the original. */
  kept: boolean;
  /** The agent's sandbox from now on: the original, or the promoted copy (same name, new id). */
  sandbox: Sandbox;
  /** The step's exec result. */
  step: ExecResult;
  /** The check's exec result; `null` when it did not run. */
  verify: ExecResult | null;
  /** Name of a sandbox that could not be deleted, or `''`. */
  leftover: string;
}

/** Options of {@link tryInCopy}. */
export interface TryOptions {
  /** Start the copy with `{"internet": false}` (default true); false keeps the original's rules. */
  offline?: boolean;
  /** Working directory of step and verify. */
  cwd?: string;
}

async function deleteQuietly(sb: Sandbox, attempts = 1): Promise<boolean> {
  for (let i = 0; i < attempts; i++) {
    try {
      await sb.delete();
      return true;
    } catch (e) {
      if (e instanceof SandboxNotFoundError) return true;
    }
  }
  return false;
}

/**
 * Promotes `replacement` into `original`'s place: (rules), rename the
 * original away, rename the replacement to the name, delete the original
 * (3 attempts). A failure before the delete puts things back, deletes the
 * replacement and throws. On success `original` (the handle) is made the
 * replacement's handle too, and returned; `leftover` names an old original
 * that could not be deleted.
 */
async function promote(original: Sandbox, replacement: Sandbox, rules: NetworkRules | null): Promise<{ sandbox: Sandbox; leftover: string }> {
  const name = original.name;
  const oldName = derivedName(name, 'old');
  let renamedAway = false;
  try {
    if (rules) await replacement.network.set(rules);
    await original.rename(oldName);
    renamedAway = true;
    await replacement.rename(name);
  } catch (err) {
    if (renamedAway) {
      try { await original.rename(name); } catch { /* leave it; the error below says what failed */ }
    }
    await deleteQuietly(replacement, 2);
    throw err;
  }
  const deleted = await deleteQuietly(original, 3);
  const leftover = deleted ? '' : oldName;
  original.adopt(replacement.info);
  return { sandbox: original, leftover };
}

/**
 * Runs `step` in a live copy of `sandbox` and keeps the copy only if it
 * exits 0 and `verify` (when given) exits 0 too; otherwise the copy is
 * deleted and the original, which ran on untouched, is returned.
 *
 * When the copy is kept it takes the original's name, labels and network
 * rules, and the original is deleted: use the returned sandbox (the same
 * handle object, now pointing at the copy's id).
 */
export async function tryInCopy(sandbox: Sandbox, step: string, verify?: string | null, options: TryOptions = {}): Promise<TryResult> {
  const offline = options.offline ?? true;
  await sandbox.refresh(); // its current name and labels
  const rules = await sandbox.network.get();
  const labels = sandbox.labels;
  const copy = await sandbox.fork({
    name: derivedName(sandbox.name, 'try'),
    labels,
    ...(offline ? { network: { internet: false } } : {}),
  });
  let stepRes: ExecResult;
  let verifyRes: ExecResult | null = null;
  const opts = options.cwd !== undefined ? { cwd: options.cwd } : {};
  try {
    stepRes = await copy.exec(step, opts);
    if (stepRes.exitCode === 0 && verify) verifyRes = await copy.exec(verify, opts);
  } catch (err) {
    await deleteQuietly(copy, 2);
    throw err;
  }
  const passed = stepRes.exitCode === 0 && (verifyRes === null || verifyRes.exitCode === 0);
  if (!passed) {
    const gone = await deleteQuietly(copy, 3);
    return { kept: false, sandbox, step: stepRes, verify: verifyRes, leftover: gone ? '' : copy.name };
  }
  const { sandbox: kept, leftover } = await promote(sandbox, copy, rules);
  return { kept: true, sandbox: kept, step: stepRes, verify: verifyRes, leftover };
}

/**
 * The lightest undo that covers `command`, as sbxd classifies it
 * (`POST /v1/classify`): `none` (reads), `git` (edits inside a git work
 * tree), `checkpoint` (other changes on disk), `fork` (changes to running
 * processes). A string is a shell line; an argv `["sh","-c",S]` classifies
 * S. Uses `runtime`, else {@link Runtime.default}.
 */
export async function checkpointFor(command: Command, runtime?: Runtime, o: CallOptions = {}): Promise<UndoKind> {
  return (await (runtime ?? Runtime.default()).classify(command, o)).undo;
}

/** Result of {@link guarded}. */
export interface GuardResult {
  /** The agent's sandbox from now on (the same: every undo is put back in place). */
  sandbox: Sandbox;
  /** The command's class, the undo sbxd took for it: `none`, `git`, `checkpoint` or `fork`. */
  undo: UndoKind;
  /** The command's exec result; `result.undo` says what was taken (its `checkpoint`, `snapshot` or `git`). */
  result: ExecResult;
  /** True when the command failed and its effects were undone. */
  rolledBack: boolean;
  /** Why a rollback that was due failed, when it did. */
  rollbackError?: string;
}

/** Options of {@link guarded}. */
export interface GuardOptions extends CallOptions {
  /** Working directory (absolute); for class `git`, the work tree that contains it is snapshotted. */
  cwd?: string;
  env?: Record<string, string>;
  timeoutMs?: number;
}

/**
 * Runs `command` guarded, in one call: sbxd takes the lightest undo that
 * covers it (a repository snapshot of the git work tree around `cwd`, a
 * disk checkpoint, or a memory snapshot; nothing for a read), runs it, and
 * puts everything back when it exits non-zero.
 */
export async function guarded(sandbox: Sandbox, command: Command, options: GuardOptions = {}): Promise<GuardResult> {
  const result = await sandbox.exec(command, { ...options, undo: 'auto', rollbackOnFailure: true });
  const u = result.undo;
  const undo: UndoKind = u?.class ?? (u?.kind === 'snapshot' ? 'fork' : u?.kind === 'git' || u?.kind === 'checkpoint' ? u.kind : 'none');
  const out: GuardResult = { sandbox, undo, result, rolledBack: u?.rolledBack ?? false };
  if (u?.rollbackError) out.rollbackError = u.rollbackError;
  return out;
}

/** Options of {@link remember}. */
export interface RememberOptions {
  /** Days the snapshot is kept (default 1). */
  retentionDays?: number;
}

/** The `metadata.sbx_chain` of a chain snapshot (metadata is the caller's JSON: its keys stay snake_case, as every SDK writes them). */
export interface ChainMark {
  sandbox: string;
  step: string;
}

/**
 * Takes a memory snapshot of the sandbox as step `step` of its chain
 * (kept by sbxd, so a restarted agent can still go back).
 */
export function remember(sandbox: Sandbox, step: string, options: RememberOptions = {}): Promise<Snapshot> {
  const bytes = Buffer.byteLength(step, 'utf8');
  if (bytes < 1 || bytes > 63) {
    return Promise.reject(new InvalidArgumentError('invalid_argument', `step: must be 1 to 63 bytes, got ${bytes}`, { status: 0 }));
  }
  return sandbox.snapshot({
    name: step,
    retentionDays: options.retentionDays ?? 1,
    metadata: { sbx_chain: { sandbox: sandbox.name, step } },
  });
}

function chainMark(s: Snapshot): ChainMark | undefined {
  const m = s.metadata?.sbx_chain as Partial<ChainMark> | undefined;
  return m && typeof m === 'object' && typeof m.sandbox === 'string' && typeof m.step === 'string' ? (m as ChainMark) : undefined;
}

/** The sandbox's chain: its snapshots taken by {@link remember}, oldest first. */
export async function chain(sandbox: Sandbox): Promise<Snapshot[]> {
  const all = await sandbox.client.snapshots.list({ sandbox: sandbox.name });
  const mine = all.filter((s) => chainMark(s)?.sandbox === sandbox.name);
  return mine
    .map((s, i) => ({ s, i }))
    .sort((a, b) => Date.parse(a.s.createTime) - Date.parse(b.s.createTime) || b.i - a.i)
    .map((x) => x.s);
}

/**
 * Goes back to the newest snapshot of the chain taken at `step`: a new
 * sandbox from it (running, with that step's memory and processes) takes
 * the sandbox's name, labels and network rules; the current one is
 * deleted. Throws {@link SnapshotNotFoundError} (nothing changed) when the
 * chain has no such step. Returns the handle, now on the new sandbox.
 */
export async function goBackTo(sandbox: Sandbox, step: string): Promise<Sandbox> {
  const snaps = (await chain(sandbox)).filter((s) => chainMark(s)?.step === step);
  const snap = snaps[snaps.length - 1];
  if (!snap) {
    throw new SnapshotNotFoundError('snapshot_not_found', `no snapshot of step ${JSON.stringify(step)} in the chain of sandbox ${sandbox.name}`, { status: 404 });
  }
  await sandbox.refresh(); // its current name and labels
  const rules = await sandbox.network.get();
  const back = await sandbox.client.sandboxes.create({
    snapshot: snap.id,
    name: derivedName(sandbox.name, 'back'),
    labels: sandbox.labels,
    network: rules,
  });
  const { sandbox: now } = await promote(sandbox, back, null);
  return now;
}
