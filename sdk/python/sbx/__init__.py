"""sbx: the Python SDK of sbx, a sandbox runtime for AI agents.

Quick start::

    from sbx import Sandbox

    with Sandbox.create(network={"internet": False}) as sb:   # deleted on exit
        r = sb.exec("python3 --version")
        print(r.exit_code, r.stdout)

The default client comes from the environment: ``$SBX_URL`` with
``$SBX_API_KEY``, else the socket ``$SBX_SOCKET`` or ``/run/sbx/sbx.sock``;
``Runtime(url=..., api_key=...)`` chooses one (``runtime.sandboxes``,
``runtime.snapshots``). ``sbx.aio`` is the same SDK for asyncio.

Undo helpers (docs/undo.md): :func:`try_in_copy`, :func:`checkpoint_for`,
:func:`guarded`, :func:`remember`, :func:`go_back_to`, :func:`chain`. They
are a convenience, not a security boundary: the sandbox is the boundary.
"""

from ._version import __version__
from .client import (DEFAULT_SOCKET, Classification, Client, ExecStream, ForkResult, Network, Runtime, Sandbox,
                     Sandboxes, Snapshots)
from .pty import Pty
from .errors import (Capacity, CaptureLimit, CheckpointFailed, CheckpointNotFound, Conflict, ConnectionFailed, FileNotFound,
                     EventNotFound, Forbidden, ForkFailed, KeyNotFound, ImageNotFound, Internal, InvalidArgument, MethodNotAllowed, NameTaken,
                     NotFound, PortTimeout, PortUnreachable, ProcessNotFound, ProtocolError, QuotaExceeded,
                     RestoreFailed, ResumeFailed, SandboxHasVolume, SandboxNotFound, SbxError,
                     SnapshotFailed, SnapshotNotFound, SuspendFailed, TooLarge, Unauthorized,
                     Unavailable, error_for)
from .types import (Change, Checkpoint, CreatedKey, Delivery, Diff, Event, EventResult, ExecEvent, ExecResult, FileInfo,
                    GitUndo, Health, HostCapacity, Image, Key, NetworkCounts, NetworkLog, NetworkRefusal, NetworkRules, Port,
                    Process, SandboxInfo, Secret, SecretInfo, SecretRule, SecretUse, Snapshot, Source, Teardown,
                    UndoInfo, Usage, UsageEntry, UsagePrices, Volume)
from .undo import (CHECKPOINT, FORK, GIT, KINDS, NONE, GuardResult, TryResult, chain, checkpoint_for, go_back_to,
                   guarded, remember, try_in_copy)

__all__ = [
    "Pty",
    "Runtime", "Client", "Sandbox", "Sandboxes", "Snapshots", "Network", "Classification",
    "ExecStream", "ForkResult", "DEFAULT_SOCKET",
    "checkpoint_for", "NONE", "GIT", "CHECKPOINT", "FORK", "KINDS",
    "try_in_copy", "guarded", "remember", "go_back_to", "chain", "TryResult", "GuardResult",
    "SandboxInfo", "NetworkRules", "Volume", "Source", "ExecResult", "ExecEvent", "UndoInfo", "GitUndo", "HostCapacity",
    "FileInfo", "Checkpoint", "Change", "Diff", "Snapshot", "Process", "Port", "NetworkLog",
    "NetworkCounts", "NetworkRefusal", "Event", "EventResult", "Image", "Health",
    "Delivery", "Teardown", "Key", "CreatedKey", "Usage", "UsageEntry", "UsagePrices",
    "Secret", "SecretRule", "SecretInfo", "SecretUse",
    "SbxError", "InvalidArgument", "Unauthorized", "Forbidden", "KeyNotFound", "NotFound", "SandboxNotFound",
    "CheckpointNotFound", "SnapshotNotFound", "ImageNotFound", "FileNotFound", "ProcessNotFound",
    "EventNotFound", "CaptureLimit", "PortTimeout",
    "MethodNotAllowed", "NameTaken", "Conflict", "SandboxHasVolume", "TooLarge", "QuotaExceeded",
    "Capacity", "CheckpointFailed", "RestoreFailed", "SnapshotFailed", "ForkFailed", "SuspendFailed",
    "ResumeFailed", "Internal", "Unavailable", "PortUnreachable", "ProtocolError",
    "ConnectionFailed", "error_for", "__version__",
]
