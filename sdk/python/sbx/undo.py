"""Undo helpers (docs/undo.md): ``try_in_copy``, ``guarded``, ``remember``, ``go_back_to``, ``chain``.

**These patterns are a convenience, not a security boundary.** They pick
an undo from the text of a command, and a command can do more than its
text says. The sandbox is the boundary. Effects outside the sandbox (a
``git push``, an HTTP ``POST`` to an allowed host) are undone by no undo.
"""

from __future__ import annotations

import secrets
import string
import time
from dataclasses import dataclass
from typing import Any, List, Optional

from .classify import CHECKPOINT, FORK, GIT, NONE, checkpoint_for
from .client import Sandbox
from .errors import InvalidArgument, SandboxNotFound, SbxError, SnapshotNotFound
from .types import ExecResult, NetworkRules, Snapshot

__all__ = ["TryResult", "GuardResult", "try_in_copy", "guarded", "remember", "go_back_to", "chain",
           "GIT_SNAPSHOT_SCRIPT", "GIT_ROLLBACK_SCRIPT"]

_ALNUM = string.ascii_lowercase + string.digits
_NAME_MAX = 63

#: The repository snapshot script of ``guarded`` (exit 3: not a git working tree).
GIT_SNAPSHOT_SCRIPT = """set -e
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
"""

#: The rollback script of ``guarded``: ``sh -c SCRIPT sh TOP HEAD REF ITREE WTREE``.
GIT_ROLLBACK_SCRIPT = """set -e
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
"""


def _rand6() -> str:
    return "".join(secrets.choice(_ALNUM) for _ in range(6))


def _derived(name: str, tag: str) -> str:
    """A temporary name: ``name``, ``-<tag>-`` and 6 random ``[a-z0-9]``.

    ``name`` is cut to its first ``63 - len(tag) - 8`` bytes so that the
    whole is at most 63 bytes (as Go's ``suffixed`` in client/undo.go):
    52 for ``try`` and ``old``, 51 for ``back``.
    """
    limit = _NAME_MAX - len(tag.encode()) - 8
    b = name.encode()
    base = b[:limit].decode("utf-8", "ignore") if len(b) > limit else name
    return f"{base}-{tag}-{_rand6()}"


@dataclass
class TryResult:
    """What :func:`try_in_copy` did.

    ``kept``: the copy replaced the original. ``sandbox``: the agent's
    sandbox from now on: the handle passed in, which, when ``kept``, has
    been updated in place to the promoted copy (the original's id is gone). ``step``/``verify``: the exec
    results (``verify`` is ``None`` when it did not run). ``leftover``: the
    name of a sandbox that could not be deleted, or ``""``.
    """

    kept: bool
    sandbox: Sandbox
    step: ExecResult
    verify: Optional[ExecResult]
    leftover: str = ""


@dataclass
class GuardResult:
    """What :func:`guarded` did.

    ``sandbox``: the agent's sandbox from now on. ``undo``: the undo taken
    (``none``, ``git``, ``checkpoint``, ``fork``). ``result``: the exec
    result. ``rolled_back``: whether the command's effects were undone.
    ``rollback_error``: why a rollback failed (``""`` if it did not).
    """

    sandbox: Sandbox
    undo: str
    result: ExecResult
    rolled_back: bool
    rollback_error: str = ""


def _delete_quietly(sb: Sandbox) -> bool:
    """Delete ``sb``, trying three times; True when it is gone."""
    for attempt in range(3):
        try:
            sb.delete()
            return True
        except SandboxNotFound:
            return True
        except SbxError:
            if attempt < 2:
                time.sleep(0.2 * (attempt + 1))
    return False


def _promote(original: Sandbox, new: Sandbox, rules: Optional[NetworkRules]) -> str:
    """Put ``new`` in ``original``'s place (docs/undo.md, tryInCopy step 5). Returns a leftover name.

    On a failure before the delete, the original gets its name back, the
    new sandbox is deleted, and the error is raised.
    """
    name = original.name
    renamed = False
    try:
        if rules is not None:
            new.set_network(rules)
        original.rename(_derived(name, "old"))
        renamed = True
        new.rename(name)
    except BaseException:
        if renamed:
            try:
                original.rename(name)
            except SbxError:
                pass
        _delete_quietly(new)
        raise
    if _delete_quietly(original):
        return ""
    return original.name


def _run(sb: Sandbox, command: str, cwd: Optional[str]) -> ExecResult:
    return sb.exec(["sh", "-c", command], cwd=cwd)


def try_in_copy(sandbox: Sandbox, step: str, verify: Optional[str] = None, offline: bool = True,
                cwd: Optional[str] = None) -> TryResult:
    """Run ``step`` in a live copy of ``sandbox`` and keep the copy only if a check passes.

    The copy is a fork named ``<name>-try-<6 random>`` with the original's
    labels, offline (``{"internet": false}``) unless ``offline=False``.
    ``step`` runs in it, then ``verify`` (when given; else the step's exit
    code decides). Failed: the copy is deleted and the original, untouched,
    is returned. Passed: the copy gets the original's network rules and
    name, the original is deleted, and the handle ``sandbox`` is updated
    in place to the copy (its id; ``result.sandbox`` is ``sandbox``), as
    in the Go and TypeScript SDKs.

    Errors of the fork itself (SandboxHasVolume, Conflict for a stopped
    original) are raised before anything changed; a failed promotion is
    undone (the original keeps its name) and raised.
    """
    rules = sandbox.get_network()
    labels = dict(sandbox.labels)
    copy = sandbox.fork_one(_derived(sandbox.name, "try"), labels=labels,
                            network={"internet": False} if offline else None)
    try:
        step_res = _run(copy, step, cwd)
        verify_res: Optional[ExecResult] = None
        passed = step_res.exit_code == 0
        if passed and verify:
            verify_res = _run(copy, verify, cwd)
            passed = verify_res.exit_code == 0
    except BaseException:
        _delete_quietly(copy)
        raise
    if not passed:
        leftover = "" if _delete_quietly(copy) else copy.name
        return TryResult(False, sandbox, step_res, verify_res, leftover)
    leftover = _promote(sandbox, copy, rules)
    sandbox.info = copy.info   # the caller's handle follows, as in the Go and TypeScript SDKs
    return TryResult(True, sandbox, step_res, verify_res, leftover)


def guarded(sandbox: Sandbox, command: str, cwd: Optional[str] = None) -> GuardResult:
    """Take the lightest undo that covers ``command`` (:func:`checkpoint_for`), run it, roll back on failure.

    ``none``: just runs it. ``git``: snapshots the repository around
    ``cwd`` and puts it back when the command exits non-zero (falls back
    to ``checkpoint`` when ``cwd`` is not in a git working tree).
    ``checkpoint``: one server-side guarded exec (``undo: checkpoint``,
    ``rollback_on_failure``); a rollback ends the sandbox's processes.
    ``fork``: :func:`try_in_copy` with the original's network rules; the
    copy takes the original's place only on success.
    """
    kind = checkpoint_for(command)
    if kind == NONE:
        res = _run(sandbox, command, cwd)
        return GuardResult(sandbox, NONE, res, False)
    if kind == FORK:
        tr = try_in_copy(sandbox, command, None, offline=False, cwd=cwd)
        return GuardResult(tr.sandbox, FORK, tr.step, not tr.kept)
    if kind == GIT:
        snap = _run(sandbox, GIT_SNAPSHOT_SCRIPT, cwd)
        fields = snap.stdout.strip().rsplit(" ", 4) if snap.exit_code == 0 else []
        if len(fields) == 5:
            res = _run(sandbox, command, cwd)
            if res.exit_code == 0:
                return GuardResult(sandbox, GIT, res, False)
            # No cwd: the script cds to the top itself, and the command may
            # have removed its own cwd.
            rb = sandbox.exec(["sh", "-c", GIT_ROLLBACK_SCRIPT, "sh", *fields])
            if rb.exit_code == 0:
                return GuardResult(sandbox, GIT, res, True)
            return GuardResult(sandbox, GIT, res, False,
                               f"git rollback exited {rb.exit_code}: {rb.stderr.strip()[:500]}")
        kind = CHECKPOINT   # not a git working tree (exit 3) or git could not snapshot it
    res = sandbox.exec(["sh", "-c", command], cwd=cwd, undo="checkpoint", rollback_on_failure=True)
    rolled = bool(res.undo and res.undo.rolled_back)
    err = res.undo.rollback_error if res.undo else ""
    return GuardResult(sandbox, CHECKPOINT, res, rolled, err)


def remember(sandbox: Sandbox, step: str, retention_days: float = 1) -> Snapshot:
    """Take a memory snapshot named ``step`` as a link of the sandbox's chain (kept by sbxd).

    ``step`` is 1-63 bytes. The snapshot's metadata is
    ``{"sbx_chain": {"sandbox": <name>, "step": step}}``.
    """
    n = len(step.encode())
    if not 1 <= n <= 63:
        raise InvalidArgument("invalid_argument", 0, f"step: want 1 to 63 bytes, got {n}")
    return sandbox.snapshot(step, retention_days=retention_days,
                            metadata={"sbx_chain": {"sandbox": sandbox.name, "step": step}})


def _chain_of(md: Any) -> dict:
    if isinstance(md, dict) and isinstance(md.get("sbx_chain"), dict):
        return md["sbx_chain"]
    return {}


def chain(sandbox: Sandbox) -> List[Snapshot]:
    """The sandbox's chain: snapshots taken by :func:`remember` for its name, oldest first."""
    snaps = [s for s in sandbox.client.list_snapshots(sandbox.name)
             if _chain_of(s.metadata).get("sandbox") == sandbox.name]
    snaps.reverse()   # sbxd lists newest first
    return sorted(snaps, key=lambda s: s.create_time.timestamp() if s.create_time else 0.0)


def go_back_to(sandbox: Sandbox, step: str) -> Sandbox:
    """Replace the sandbox by a new one started from the newest snapshot of ``step`` in its chain.

    The new sandbox runs with the memory and processes of that step, and
    gets the current name, labels and network rules; the current one is
    deleted. The handle ``sandbox`` is updated in place to the new sandbox
    (the old id is gone) and returned, as in the Go and TypeScript SDKs. Raises
    SnapshotNotFound (nothing changed) when the chain has no such step.
    Later steps' snapshots are kept until they expire.
    """
    snaps = [s for s in chain(sandbox) if _chain_of(s.metadata).get("step") == step]
    if not snaps:
        raise SnapshotNotFound("snapshot_not_found", 404,
                               f"sandbox {sandbox.name!r} has no chain step {step!r}")
    snap = snaps[-1]
    rules = sandbox.get_network()
    new = sandbox.client.create(_derived(sandbox.name, "back"), snapshot=snap.id,
                                labels=dict(sandbox.labels), network=rules)
    _promote(sandbox, new, None)
    sandbox.info = new.info   # the caller's handle follows, as in the Go and TypeScript SDKs
    return sandbox
