"""sbx: the Python SDK of sbx, a sandbox runtime for AI agents.

Quick start::

    import sbx

    with sbx.Client() as c:                       # $SBX_URL/$SBX_API_KEY or $SBX_SOCKET
        with c.create("dev", cpus=1, memory_mb=512) as sb:   # deleted on exit
            print(sb.exec("python3 --version").stdout)

Undo helpers (docs/undo.md): :func:`try_in_copy`, :func:`checkpoint_for`,
:func:`guarded`, :func:`remember`, :func:`go_back_to`, :func:`chain`. They
are a convenience, not a security boundary: the sandbox is the boundary.
"""

from .classify import CHECKPOINT, FORK, GIT, KINDS, NONE, checkpoint_for
from .client import DEFAULT_SOCKET, Client, ExecStream, ForkResult, Sandbox
from .pty import Pty
from .errors import (Capacity, CaptureLimit, CheckpointFailed, CheckpointNotFound, Conflict, ConnectionFailed, FileNotFound,
                     EventNotFound, Forbidden, ForkFailed, KeyNotFound, ImageNotFound, Internal, InvalidArgument, MethodNotAllowed, NameTaken,
                     NotFound, PortTimeout, PortUnreachable, ProcessNotFound, ProtocolError, QuotaExceeded,
                     RestoreFailed, ResumeFailed, SandboxHasVolume, SandboxNotFound, SbxError,
                     SnapshotFailed, SnapshotNotFound, SuspendFailed, TooLarge, Unauthorized,
                     Unavailable, error_for)
from .types import (Change, Checkpoint, CreatedKey, Delivery, Diff, Event, EventResult, ExecEvent, ExecResult, FileInfo,
                    Health, Image, Key, NetworkCounts, NetworkLog, NetworkRefusal, NetworkRules, Port,
                    Process, SandboxInfo, Secret, SecretInfo, SecretRule, SecretUse, Snapshot, Source, Teardown,
                    UndoInfo, Usage, UsageEntry, UsagePrices, Volume)
from .undo import GuardResult, TryResult, chain, go_back_to, guarded, remember, try_in_copy

__version__ = "0.1.0"

__all__ = [
    "Pty",
    "Client", "Sandbox", "ExecStream", "ForkResult", "DEFAULT_SOCKET",
    "checkpoint_for", "NONE", "GIT", "CHECKPOINT", "FORK", "KINDS",
    "try_in_copy", "guarded", "remember", "go_back_to", "chain", "TryResult", "GuardResult",
    "SandboxInfo", "NetworkRules", "Volume", "Source", "ExecResult", "ExecEvent", "UndoInfo",
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
