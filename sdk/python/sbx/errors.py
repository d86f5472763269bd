"""Typed errors of the sbx API.

Every error answer of sbxd (``{"error": {"code", "message"}}``) and every
``error`` line of a streamed (NDJSON) operation is raised as an instance of
:class:`SbxError`, or of the subclass registered for its ``code``:
``except sbx.SandboxNotFound`` catches a missing sandbox, ``except
sbx.NotFound`` every not-found code, ``except sbx.SbxError`` everything.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "SbxError",
    "InvalidArgument",
    "Unauthorized",
    "Forbidden",
    "KeyNotFound",
    "NotFound",
    "SandboxNotFound",
    "CheckpointNotFound",
    "SnapshotNotFound",
    "ImageNotFound",
    "FileNotFound",
    "ProcessNotFound",
    "MethodNotAllowed",
    "NameTaken",
    "Conflict",
    "SandboxHasVolume",
    "TooLarge",
    "QuotaExceeded",
    "CheckpointFailed",
    "RestoreFailed",
    "SnapshotFailed",
    "ForkFailed",
    "SuspendFailed",
    "ResumeFailed",
    "Internal",
    "Unavailable",
    "PortUnreachable",
    "ProtocolError",
    "ConnectionFailed",
    "error_for",
]


class SbxError(Exception):
    """An error answered by sbxd (or met while talking to it).

    Attributes:
        code: the API's snake_case error code (``"sandbox_not_found"``).
        status: the HTTP status; 0 for an ``error`` line of an NDJSON stream
            and for errors found by the SDK itself.
        message: the human text of the error.
        request_id: sbxd's request id (set on 5xx answers), else ``""``.
    """

    #: The API code this class stands for (``""`` for the base class).
    CODE: str = ""

    def __init__(self, code: str, status: int = 0, message: str = "", request_id: str = "") -> None:
        self.code = code
        self.status = status
        self.message = message
        self.request_id = request_id
        text = f"{code}: {message}" if message else code
        if request_id:
            text += f" (request {request_id})"
        super().__init__(text)

    def __reduce__(self):  # keep pickling working with the 4-argument init
        return (self.__class__, (self.code, self.status, self.message, self.request_id))


class InvalidArgument(SbxError):
    """400 ``invalid_argument``: a field is malformed or out of range; the message names it."""

    CODE = "invalid_argument"


class Unauthorized(SbxError):
    """401 ``unauthorized``: missing or wrong API key (TCP only)."""

    CODE = "unauthorized"


class Forbidden(SbxError):
    """403 ``forbidden``: a tenant key asked for what only admin keys may do (managing keys)."""

    CODE = "forbidden"


class NotFound(SbxError):
    """404: base of every not-found error; also the ``not_found`` code (no such route)."""

    CODE = "not_found"


class SandboxNotFound(NotFound):
    """404 ``sandbox_not_found``: no sandbox has that name or id."""

    CODE = "sandbox_not_found"


class CheckpointNotFound(NotFound):
    """404 ``checkpoint_not_found``: the sandbox has no checkpoint with that id."""

    CODE = "checkpoint_not_found"


class SnapshotNotFound(NotFound):
    """404 ``snapshot_not_found``: no snapshot has that id (or it expired), or no chain step has that name."""

    CODE = "snapshot_not_found"


class ImageNotFound(NotFound):
    """404 ``image_not_found``: no image has that name."""

    CODE = "image_not_found"


class FileNotFound(NotFound):
    """404 ``file_not_found``: the path does not exist inside the sandbox."""

    CODE = "file_not_found"


class ProcessNotFound(NotFound):
    """404 ``process_not_found``: no process started by exec has that pid."""

    CODE = "process_not_found"


class EventNotFound(NotFound):
    """404 ``event_not_found``: no pending event has that id."""

    CODE = "event_not_found"


class KeyNotFound(NotFound):
    """404 ``key_not_found``: no live API key has that id or name."""

    CODE = "key_not_found"


class MethodNotAllowed(SbxError):
    """405 ``method_not_allowed``: the route exists for other methods."""

    CODE = "method_not_allowed"


class NameTaken(SbxError):
    """409 ``name_taken``: a sandbox with that name exists."""

    CODE = "name_taken"


class Conflict(SbxError):
    """409 ``conflict``: another operation runs on the sandbox, or its state forbids the request."""

    CODE = "conflict"


class SandboxHasVolume(SbxError):
    """409 ``sandbox_has_volume``: snapshot, fork or suspend of a sandbox with volumes."""

    CODE = "sandbox_has_volume"


class TooLarge(SbxError):
    """413 ``too_large``: the request body is over the endpoint's limit."""

    CODE = "too_large"


class QuotaExceeded(SbxError):
    """429 ``quota_exceeded``: a spending or resource limit would be passed."""

    CODE = "quota_exceeded"


class Capacity(SbxError):
    """429 ``capacity``: the host admits no more sandboxes or snapshots, or
    the sandboxes' CPUs or memory together would pass its overcommit
    limit; nothing was made."""

    CODE = "capacity"


class CaptureLimit(SbxError):
    """507 ``capture_limit``: capturing the sandbox's disk (a checkpoint,
    snapshot, fork or suspend, or a diff of the live disk) passed a bound
    (time, bytes read, or tree depth); the message names it. Nothing was
    recorded and the sandbox runs on."""

    CODE = "capture_limit"


class CheckpointFailed(SbxError):
    """500 ``checkpoint_failed``: a disk checkpoint failed; nothing was recorded."""

    CODE = "checkpoint_failed"


class RestoreFailed(SbxError):
    """500 ``restore_failed``: a restore failed; the disk is as it was."""

    CODE = "restore_failed"


class SnapshotFailed(SbxError):
    """500 ``snapshot_failed``: a memory snapshot failed; nothing was recorded."""

    CODE = "snapshot_failed"


class ForkFailed(SbxError):
    """500 ``fork_failed``: a fork (or one copy of it) failed."""

    CODE = "fork_failed"


class SuspendFailed(SbxError):
    """500 ``suspend_failed``: a suspend failed; the sandbox runs on."""

    CODE = "suspend_failed"


class ResumeFailed(SbxError):
    """500 ``resume_failed``: a resume failed; the sandbox stays suspended."""

    CODE = "resume_failed"


class Internal(SbxError):
    """500 ``internal``: anything else; sbxd logs the cause under ``request_id``."""

    CODE = "internal"


class Unavailable(SbxError):
    """503 ``unavailable``: sbxd or one of its dependencies is not ready."""

    CODE = "unavailable"


class PortUnreachable(SbxError):
    """502 ``port_unreachable``: nothing listens on the sandbox's port."""

    CODE = "port_unreachable"


class PortTimeout(SbxError):
    """504 ``port_timeout``: a request to a sandbox's port (a preview) got
    no connection or no response head within its deadline."""

    CODE = "port_timeout"


class ProtocolError(SbxError):
    """The SDK could not understand an answer (bad JSON, a stream cut short).

    Its code is ``"protocol"``: it is not an API code.
    """

    CODE = "protocol"


class ConnectionFailed(SbxError):
    """sbxd could not be reached (socket missing, connection refused or cut).

    Its code is ``"connection_failed"``: it is not an API code.
    """

    CODE = "connection_failed"


_BY_CODE: Dict[str, Type[SbxError]] = {
    cls.CODE: cls
    for cls in (
        InvalidArgument, Unauthorized, Forbidden, KeyNotFound, NotFound, SandboxNotFound, CheckpointNotFound,
        SnapshotNotFound, ImageNotFound, FileNotFound, ProcessNotFound, EventNotFound,
        MethodNotAllowed, NameTaken, Conflict, SandboxHasVolume, TooLarge, QuotaExceeded, Capacity,
        CaptureLimit, CheckpointFailed, RestoreFailed, SnapshotFailed, ForkFailed, SuspendFailed,
        ResumeFailed, Internal, Unavailable, PortUnreachable, PortTimeout,
    )
}

_CODE_OF_STATUS = {400: "invalid_argument", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                   405: "method_not_allowed", 409: "conflict", 413: "too_large",
                   429: "quota_exceeded", 502: "port_unreachable", 503: "unavailable",
                   504: "port_timeout", 507: "capture_limit"}


def error_for(code: Optional[str], status: int = 0, message: str = "", request_id: str = "") -> SbxError:
    """Return the typed error for an API ``code`` (an unknown code gives :class:`SbxError`).

    Without a code, the code is guessed from the HTTP ``status``.
    """
    if not code:
        code = _CODE_OF_STATUS.get(status, "internal")
    cls = _BY_CODE.get(code, SbxError)
    return cls(code, status, message, request_id)
