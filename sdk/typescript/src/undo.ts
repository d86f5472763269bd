/**
 * The undo helpers of docs/undo.md: {@link tryInCopy}, {@link guarded},
 * {@link remember}, {@link goBackTo}, {@link chain}.
 *
 * **These patterns are a convenience, not a security boundary.** They pick
 * an undo from the text of a command, and a command can do more than its
 * text says. The sandbox is the boundary; effects outside it (a `git push`,
 * an HTTP POST to an allowed host) are undone by no undo.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import { InvalidArgumentError, SandboxNotFoundError, SnapshotNotFoundError } from './errors.js';
import type { Sandbox } from './client.js';
import { checkpointFor } from './classify.js';
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
    if (rules) await replacement.setNetwork(rules);
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
  const rules = await sandbox.getNetwork();
  const labels = sandbox.labels;
  const copy = await sandbox.forkOne({
    name: derivedName(sandbox.name, 'try'),
    labels,
    ...(offline ? { network: { internet: false } } : {}),
  });
  let stepRes: ExecResult;
  let verifyRes: ExecResult | null = null;
  const opts = options.cwd !== undefined ? { cwd: options.cwd } : {};
  try {
    stepRes = await copy.exec(step, opts);
    if (stepRes.exit_code === 0 && verify) verifyRes = await copy.exec(verify, opts);
  } catch (err) {
    await deleteQuietly(copy, 2);
    throw err;
  }
  const passed = stepRes.exit_code === 0 && (verifyRes === null || verifyRes.exit_code === 0);
  if (!passed) {
    const gone = await deleteQuietly(copy, 3);
    return { kept: false, sandbox, step: stepRes, verify: verifyRes, leftover: gone ? '' : copy.name };
  }
  const { sandbox: kept, leftover } = await promote(sandbox, copy, rules);
  return { kept: true, sandbox: kept, step: stepRes, verify: verifyRes, leftover };
}

/** Repository snapshot script of docs/undo.md; prints `top head ref itree wtree`, exits 3 outside a work tree. */
export const GIT_SNAPSHOT_SCRIPT = `set -e
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit 3
top=$(git rev-parse --show-toplevel)
cd "$top"
head=$(git rev-parse -q --verify HEAD || echo none)
ref=$(git symbolic-ref -q HEAD || echo detached)
itree=$(git write-tree)
idx=$(mktemp)
cp "$(git rev-parse --git-path index)" "$idx" 2>/dev/null || rm -f "$idx"
wtree=$(GIT_INDEX_FILE="$idx" git add -A . && GIT_INDEX_FILE="$idx" git write-tree)
rm -f "$idx"
c=$(git commit-tree "$wtree" -m "sbx guard")
git update-ref refs/sbx/guard "$c"
echo "$top $head $ref $itree $wtree"
`;

/** Rollback script of docs/undo.md (`sh -c SCRIPT sh TOP HEAD REF ITREE WTREE`). */
export const GIT_ROLLBACK_SCRIPT = `set -e
cd "$1"
for op in rebase merge cherry-pick revert am; do git "$op" --abort >/dev/null 2>&1 || true; done
if [ "$2" != none ]; then
  if [ "$3" = detached ]; then git update-ref --no-deref HEAD "$2"
  else git update-ref "$3" "$2" && git symbolic-ref HEAD "$3"; fi
fi
git read-tree "$5"
git checkout-index -a -f
git clean -fdq
git read-tree "$4"
`;

/** Result of {@link guarded}. */
export interface GuardResult {
  /** The agent's sandbox from now on. */
  sandbox: Sandbox;
  /** The undo taken: `none`, `git`, `checkpoint` or `fork`. */
  undo: UndoKind;
  /** The command's exec result. */
  result: ExecResult;
  /** True when the command failed and its effects were undone. */
  rolled_back: boolean;
  /** Why a rollback failed, when it did. */
  rollback_error?: string;
}

/** Options of {@link guarded}. */
export interface GuardOptions {
  cwd?: string;
}

/**
 * Takes the lightest undo that covers `command` ({@link checkpointFor}),
 * runs it, and rolls back when it exits non-zero.
 */
export async function guarded(sandbox: Sandbox, command: string, options: GuardOptions = {}): Promise<GuardResult> {
  let kind = checkpointFor(command);
  const opts = options.cwd !== undefined ? { cwd: options.cwd } : {};
  if (kind === 'none') {
    const result = await sandbox.exec(command, opts);
    return { sandbox, undo: 'none', result, rolled_back: false };
  }
  if (kind === 'git') {
    const snap = await sandbox.exec(['sh', '-c', GIT_SNAPSHOT_SCRIPT], opts);
    const fields = snap.stdout.trim().split(' ');
    if (snap.exit_code === 0 && fields.length >= 5) {
      const [head, ref, itree, wtree] = fields.slice(-4);
      const top = fields.slice(0, -4).join(' ');
      const result = await sandbox.exec(command, opts);
      if (result.exit_code === 0) return { sandbox, undo: 'git', result, rolled_back: false };
      const rb = await sandbox.exec(['sh', '-c', GIT_ROLLBACK_SCRIPT, 'sh', top, head, ref, itree, wtree], opts);
      const out: GuardResult = { sandbox, undo: 'git', result, rolled_back: rb.exit_code === 0 };
      if (rb.exit_code !== 0) out.rollback_error = `rollback script exited ${rb.exit_code}: ${rb.stderr.trim()}`;
      return out;
    }
    // Not a git working tree (exit 3), or git could not snapshot it: take a checkpoint.
    kind = 'checkpoint';
  }
  if (kind === 'checkpoint') {
    const result = await sandbox.exec(command, { ...opts, undo: 'checkpoint', rollbackOnFailure: true });
    const out: GuardResult = { sandbox, undo: 'checkpoint', result, rolled_back: result.undo?.rolled_back ?? false };
    if (result.undo?.rollback_error) out.rollback_error = result.undo.rollback_error;
    return out;
  }
  const tr = await tryInCopy(sandbox, command, null, { offline: false, cwd: options.cwd });
  return { sandbox: tr.sandbox, undo: 'fork', result: tr.step, rolled_back: !tr.kept };
}

/** Options of {@link remember}. */
export interface RememberOptions {
  /** Days the snapshot is kept (default 1). */
  retentionDays?: number;
}

/** The `metadata.sbx_chain` of a chain snapshot. */
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

/** The sandbox's chain: its snapshots taken by {@link remember}, oldest first. */
export async function chain(sandbox: Sandbox): Promise<Snapshot[]> {
  const all = await sandbox.client.listSnapshots({ sandbox: sandbox.name });
  const mine = all.filter((s) => s.metadata && typeof s.metadata === 'object' && s.metadata.sbx_chain && s.metadata.sbx_chain.sandbox === sandbox.name);
  return mine
    .map((s, i) => ({ s, i }))
    .sort((a, b) => Date.parse(a.s.create_time) - Date.parse(b.s.create_time) || b.i - a.i)
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
  const snaps = (await chain(sandbox)).filter((s) => s.metadata.sbx_chain.step === step);
  const snap = snaps[snaps.length - 1];
  if (!snap) {
    throw new SnapshotNotFoundError('snapshot_not_found', `no snapshot of step ${JSON.stringify(step)} in the chain of sandbox ${sandbox.name}`, { status: 404 });
  }
  await sandbox.refresh(); // its current name and labels
  const rules = await sandbox.getNetwork();
  const back = await sandbox.client.create({
    snapshot: snap.id,
    name: derivedName(sandbox.name, 'back'),
    labels: sandbox.labels,
    network: rules,
  });
  const { sandbox: now } = await promote(sandbox, back, null);
  return now;
}
