"""Undo helpers (docs/undo.md): ``try_in_copy``, ``checkpoint_for``, ``guarded``, ``remember``, ``go_back_to``, ``chain``.

Each works on a :class:`sbx.Sandbox` (answers the value) and on an
``sbx.aio.AsyncSandbox`` (answers a coroutine): they are written once, as
operations the handle's client drives. Classification and the undo itself
live in sbxd (``POST /v1/classify``, guarded exec); these are thin calls.

**These patterns are a convenience, not a security boundary.** They pick
an undo from the text of a command, and a command can do more than its
text says. The sandbox is the boundary. Effects outside the sandbox (a
``git push``, an HTTP ``POST`` to an allowed host) are undone by no undo.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass
from typing import Any, Optional

from .client import Command, RuntimeOps, SandboxOps
from .errors import InvalidArgument, SandboxNotFound, SbxError, SnapshotNotFound
from ._transport import Sleep
from .types import ExecResult, NetworkRules

__all__ = ["TryResult", "GuardResult", "try_in_copy", "checkpoint_for", "guarded", "remember", "go_back_to",
           "chain", "NONE", "GIT", "CHECKPOINT", "FORK", "KINDS"]

#: The undo classes of ``POST /v1/classify`` (docs/undo.md), lightest first.
NONE, GIT, CHECKPOINT, FORK = "none", "git", "checkpoint", "fork"
KINDS = (NONE, GIT, CHECKPOINT, FORK)

_ALNUM = string.ascii_lowercase + string.digits
_NAME_MAX = 63


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
    sandbox: Any
    step: ExecResult
    verify: Optional[ExecResult]
    leftover: str = ""


@dataclass
class GuardResult:
    """What :func:`guarded` did.

    ``sandbox``: the sandbox (the handle passed in). ``undo``: the class
    sbxd gave the command (``none``, ``git``, ``checkpoint``, ``fork``).
    ``result``: the exec result (its ``undo`` says what was taken). ``rolled_back``: whether the command's effects were undone.
    ``rollback_error``: why a rollback failed (``""`` if it did not).
    """

    sandbox: Any
    undo: str
    result: ExecResult
    rolled_back: bool
    rollback_error: str = ""


def _delete_quietly(sb: SandboxOps) -> Any:
    """Delete ``sb``, trying three times; True when it is gone (an operation)."""
    for attempt in range(3):
        try:
            yield from sb.delete.gen()
            return True
        except SandboxNotFound:
            return True
        except SbxError:
            if attempt < 2:
                yield Sleep(0.2 * (attempt + 1))
    return False


def _promote(original: SandboxOps, new: SandboxOps, rules: Optional[NetworkRules]) -> Any:
    """Put ``new`` in ``original``'s place (docs/undo.md, tryInCopy step 5). Answers a leftover name.

    On a failure before the delete, the original gets its name back, the
    new sandbox is deleted, and the error is raised.
    """
    name = original.name
    renamed = False
    try:
        if rules is not None:
            yield from new.set_network.gen(rules)
        yield from original.rename.gen(_derived(name, "old"))
        renamed = True
        yield from new.rename.gen(name)
    except BaseException:
        if renamed:
            try:
                yield from original.rename.gen(name)
            except SbxError:
                pass
        yield from _delete_quietly(new)
        raise
    if (yield from _delete_quietly(original)):
        return ""
    return original.name


def _run(sb: SandboxOps, command: str, cwd: Optional[str]) -> Any:
    return (yield from sb.exec.gen(["sh", "-c", command], cwd=cwd))


def try_in_copy(sandbox: Any, step: str, verify: Optional[str] = None, offline: bool = True,
                cwd: Optional[str] = None) -> Any:
    """Run ``step`` in a live copy of ``sandbox`` and keep the copy only if a check passes.

    The copy is a fork named ``<name>-try-<6 random>`` with the original's
    labels, offline (``{"internet": false}``) unless ``offline=False``.
    ``step`` runs in it, then ``verify`` (when given; else the step's exit
    code decides). Failed: the copy is deleted and the original, untouched,
    is answered. Passed: the copy gets the original's network rules and
    name, the original is deleted, and the handle ``sandbox`` is updated
    in place to the copy (its id; ``result.sandbox`` is ``sandbox``), as
    in the Go and TypeScript SDKs. Answers a :class:`TryResult` (a
    coroutine of it for an ``AsyncSandbox``).

    Errors of the fork itself (SandboxHasVolume, Conflict for a stopped
    original) are raised before anything changed; a failed promotion is
    undone (the original keeps its name) and raised.
    """
    return sandbox._drive(_try_in_copy(sandbox, step, verify, offline, cwd))


def _try_in_copy(sandbox: SandboxOps, step: str, verify: Optional[str], offline: bool,
                 cwd: Optional[str]) -> Any:
    rules = yield from sandbox.get_network.gen()
    labels = dict(sandbox.labels)
    copy = yield from sandbox.fork.gen(_derived(sandbox.name, "try"), labels=labels,
                                       network={"internet": False} if offline else None)
    try:
        step_res = yield from _run(copy, step, cwd)
        verify_res: Optional[ExecResult] = None
        passed = step_res.exit_code == 0
        if passed and verify:
            verify_res = yield from _run(copy, verify, cwd)
            passed = verify_res.exit_code == 0
    except BaseException:
        yield from _delete_quietly(copy)
        raise
    if not passed:
        leftover = "" if (yield from _delete_quietly(copy)) else copy.name
        return TryResult(False, sandbox, step_res, verify_res, leftover)
    leftover = yield from _promote(sandbox, copy, rules)
    sandbox.info = copy.info   # the caller's handle follows, as in the Go and TypeScript SDKs
    return TryResult(True, sandbox, step_res, verify_res, leftover)


def checkpoint_for(command: Command, client: Optional[RuntimeOps] = None) -> Any:
    """The lightest undo that covers ``command``, as sbxd classifies it (``POST /v1/classify``).

    Answers a :class:`Classification`: a str, ``"none"``, ``"git"``,
    ``"checkpoint"`` or ``"fork"``, with its ``reason``. ``client`` defaults
    to ``Runtime()`` from the environment; with an ``AsyncRuntime`` the
    answer is a coroutine. Raises InvalidArgument.
    """
    if client is None:
        from .client import Runtime

        client = Runtime()
    return client.classify(command)


def guarded(sandbox: Any, command: Command, cwd: Optional[str] = None) -> Any:
    """Run ``command`` under the lightest undo that covers it, and roll back if it exits non-zero.

    One guarded exec: ``undo="auto"`` with ``rollback_on_failure=True``.
    sbxd classifies the command (:func:`checkpoint_for`) and takes nothing
    (``none``), a repository snapshot of the git work tree around ``cwd``
    (``git``; a disk checkpoint when ``cwd`` is not in a work tree), a disk
    checkpoint (``checkpoint``; a rollback ends the sandbox's processes) or
    a memory snapshot restored in place (``fork``). Answers a
    :class:`GuardResult` (a coroutine of it for an ``AsyncSandbox``).
    Raises what exec raises; CheckpointFailed/SnapshotFailed when the undo
    could not be taken (the command did not run).
    """
    return sandbox._drive(_guarded(sandbox, command, cwd))


def _guarded(sandbox: SandboxOps, command: Command, cwd: Optional[str]) -> Any:
    res = yield from sandbox.exec.gen(command, cwd=cwd, undo="auto", rollback_on_failure=True)
    u = res.undo
    kind = (u.undo_class or u.kind) if u else NONE
    return GuardResult(sandbox, kind, res, bool(u and u.rolled_back), u.rollback_error if u else "")


def remember(sandbox: Any, step: str, retention_days: float = 1) -> Any:
    """Take a memory snapshot named ``step`` as a link of the sandbox's chain (kept by sbxd).

    ``step`` is 1-63 bytes. The snapshot's metadata is
    ``{"sbx_chain": {"sandbox": <name>, "step": step}}``. Answers the
    :class:`Snapshot` (a coroutine of it for an ``AsyncSandbox``). Raises
    InvalidArgument, Conflict (not running), SnapshotFailed.
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


def chain(sandbox: Any) -> Any:
    """The sandbox's chain: snapshots taken by :func:`remember` for its name, oldest first.

    A list of :class:`Snapshot` (a coroutine of it for an ``AsyncSandbox``)."""
    return sandbox._drive(_chain(sandbox))


def _chain(sandbox: SandboxOps) -> Any:
    snaps = [s for s in (yield from sandbox.client.list_snapshots.gen(sandbox.name))
             if _chain_of(s.metadata).get("sandbox") == sandbox.name]
    snaps.reverse()   # sbxd lists newest first
    return sorted(snaps, key=lambda s: s.create_time.timestamp() if s.create_time else 0.0)


def go_back_to(sandbox: Any, step: str) -> Any:
    """Replace the sandbox by a new one started from the newest snapshot of ``step`` in its chain.

    The new sandbox runs with the memory and processes of that step, and
    gets the current name, labels and network rules; the current one is
    deleted. The handle ``sandbox`` is updated in place to the new sandbox
    (the old id is gone) and answered (a coroutine of it for an
    ``AsyncSandbox``), as in the Go and TypeScript SDKs. Raises
    SnapshotNotFound (nothing changed) when the chain has no such step.
    Later steps' snapshots are kept until they expire.
    """
    return sandbox._drive(_go_back_to(sandbox, step))


def _go_back_to(sandbox: SandboxOps, step: str) -> Any:
    snaps = [s for s in (yield from _chain(sandbox)) if _chain_of(s.metadata).get("step") == step]
    if not snaps:
        raise SnapshotNotFound("snapshot_not_found", 404,
                               f"sandbox {sandbox.name!r} has no chain step {step!r}")
    snap = snaps[-1]
    rules = yield from sandbox.get_network.gen()
    new = yield from sandbox.client.create.gen(_derived(sandbox.name, "back"), snapshot=snap.id,
                                               labels=dict(sandbox.labels), network=rules)
    yield from _promote(sandbox, new, None)
    sandbox.info = new.info   # the caller's handle follows, as in the Go and TypeScript SDKs
    return sandbox
