"""Typed objects of the sbx API (docs/api.md).

Each is a dataclass built with ``from_dict`` from the JSON object sbxd
answers. Parsing is tolerant: unknown fields are ignored (and kept in
``raw``), missing ones take their defaults. Times are timezone-aware
:class:`datetime.datetime` values (``None`` when absent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, List, Mapping, Optional

__all__ = [
    "parse_time",
    "NetworkRules",
    "Volume",
    "Source",
    "SandboxInfo",
    "UndoInfo",
    "ExecResult",
    "ExecEvent",
    "FileInfo",
    "Checkpoint",
    "Change",
    "Diff",
    "Snapshot",
    "Process",
    "Port",
    "NetworkCounts",
    "NetworkRefusal",
    "NetworkLog",
    "Event",
    "EventResult",
    "Image",
    "Health",
]

_TIME_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|z|[+-]\d{2}:\d{2})?$"
)


def parse_time(value: Any) -> Optional[datetime]:
    """Parse an RFC 3339 time (nanoseconds allowed) into an aware datetime; ``None`` if absent or unparsable."""
    if not isinstance(value, str) or not value:
        return None
    m = _TIME_RE.match(value)
    if not m:
        return None
    y, mo, d, h, mi, s, frac, tz = m.groups()
    us = int((frac or "0")[:6].ljust(6, "0"))
    if tz in (None, "Z", "z"):
        tzinfo = timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        tzinfo = timezone(sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    try:
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), us, tzinfo=tzinfo)
    except ValueError:
        return None


def _d(obj: Any) -> Dict[str, Any]:
    return obj if isinstance(obj, dict) else {}


def _s(v: Any, default: str = "") -> str:
    return v if isinstance(v, str) else default


def _i(v: Any, default: int = 0) -> int:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, (int, float)):
        return int(v)
    return default


def _f(v: Any, default: float = 0.0) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return default


def _b(v: Any, default: bool = False) -> bool:
    return v if isinstance(v, bool) else default


def _strs(v: Any) -> List[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def _smap(v: Any) -> Dict[str, str]:
    return {str(k): str(x) for k, x in v.items()} if isinstance(v, dict) else {}


@dataclass
class NetworkRules:
    """A sandbox's egress rules: ``{internet, allow, deny, connect}``.

    ``internet=False`` cuts all egress; a non-empty ``allow`` (domains, ``*.x.org``
    wildcards, IPv4 CIDRs) is the only egress allowed; ``deny`` wins over
    ``allow``; ``connect`` names other sandboxes this one may reach.
    """

    internet: bool = True
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)
    connect: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, obj: Any) -> "NetworkRules":
        """Build from a JSON object; ``internet`` is true when absent, as in the API."""
        o = _d(obj)
        return cls(internet=_b(o.get("internet"), True), allow=_strs(o.get("allow")),
                   deny=_strs(o.get("deny")), connect=_strs(o.get("connect")))

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object sent to sbxd (all four fields)."""
        return {"internet": self.internet, "allow": list(self.allow), "deny": list(self.deny),
                "connect": list(self.connect)}


def rules_to_dict(rules: Any) -> Dict[str, Any]:
    """Accept a :class:`NetworkRules` or a plain dict and return the dict to send."""
    if isinstance(rules, NetworkRules):
        return rules.to_dict()
    if isinstance(rules, Mapping):
        return dict(rules)
    raise TypeError("network rules: want NetworkRules or a dict, got %r" % (type(rules).__name__,))


@dataclass
class Volume:
    """A named host directory mounted read-write at ``path``."""

    name: str
    path: str

    @classmethod
    def from_dict(cls, obj: Any) -> "Volume":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(name=_s(o.get("name")), path=_s(o.get("path")))

    def to_dict(self) -> Dict[str, str]:
        """The JSON object sent to sbxd."""
        return {"name": self.name, "path": self.path}


@dataclass
class Source:
    """What a sandbox was forked or started from."""

    sandbox: str = ""
    snapshot: str = ""

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["Source"]:
        """Build from a JSON object; ``None`` for null."""
        if not isinstance(obj, dict):
            return None
        return cls(sandbox=_s(obj.get("sandbox")), snapshot=_s(obj.get("snapshot")))


@dataclass
class SandboxInfo:
    """The sandbox object of ``GET /v1/sandboxes/{name}``."""

    id: str = ""
    name: str = ""
    state: str = ""
    image: str = ""
    cpus: float = 0.0
    memory_mb: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    network: NetworkRules = field(default_factory=NetworkRules)
    volumes: List[Volume] = field(default_factory=list)
    timeout_ms: int = 0
    keep_alive_while_running: bool = False
    state_reason: str = ""
    wake_on: str = ""
    suspend_time: Optional[datetime] = None
    create_time: Optional[datetime] = None
    source: Optional[Source] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> "SandboxInfo":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(
            id=_s(o.get("id")), name=_s(o.get("name")), state=_s(o.get("state")),
            image=_s(o.get("image")), cpus=_f(o.get("cpus")), memory_mb=_i(o.get("memory_mb")),
            env=_smap(o.get("env")), labels=_smap(o.get("labels")),
            network=NetworkRules.from_dict(o.get("network")),
            volumes=[Volume.from_dict(v) for v in o.get("volumes") or [] if isinstance(v, dict)],
            timeout_ms=_i(o.get("timeout_ms")),
            keep_alive_while_running=_b(o.get("keep_alive_while_running")),
            state_reason=_s(o.get("state_reason")), wake_on=_s(o.get("wake_on")),
            suspend_time=parse_time(o.get("suspend_time")),
            create_time=parse_time(o.get("create_time")),
            source=Source.from_dict(o.get("source")), raw=dict(o),
        )


@dataclass
class UndoInfo:
    """The ``undo`` object of a guarded exec's answer (docs/undo.md).

    ``kind`` is what was taken (``none``, ``checkpoint``, ``snapshot``),
    ``undo_class`` the classification of ``undo: auto`` (JSON ``class``),
    ``checkpoint``/``snapshot`` the ids taken, ``rolled_back`` whether it
    was put back, ``rollback_error`` why a rollback failed.
    """

    kind: str = ""
    undo_class: str = ""
    checkpoint: str = ""
    snapshot: str = ""
    rolled_back: bool = False
    rollback_error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["UndoInfo"]:
        """Build from a JSON object; ``None`` when absent."""
        if not isinstance(obj, dict):
            return None
        return cls(kind=_s(obj.get("kind")), undo_class=_s(obj.get("class")),
                   checkpoint=_s(obj.get("checkpoint")), snapshot=_s(obj.get("snapshot")),
                   rolled_back=_b(obj.get("rolled_back")),
                   rollback_error=_s(obj.get("rollback_error")), raw=dict(obj))


@dataclass
class ExecResult:
    """A finished command: output, exit code, duration, and the undo taken (if any).

    A non-zero exit is not an error: read ``exit_code`` (124 with
    ``timed_out`` after a timeout). With ``encoding="base64"`` the exact
    bytes are in ``stdout_bytes``/``stderr_bytes`` and ``stdout``/``stderr``
    hold them decoded as UTF-8 (errors replaced).
    """

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    duration_ms: int = 0
    pid: int = 0
    timed_out: bool = False
    truncated: bool = False
    undo: Optional[UndoInfo] = None
    stdout_bytes: Optional[bytes] = field(default=None, repr=False)
    stderr_bytes: Optional[bytes] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0

    @classmethod
    def from_dict(cls, obj: Any, base64_encoded: bool = False) -> "ExecResult":
        """Build from the buffered exec answer (decoding base64 output when asked)."""
        o = _d(obj)
        out, err = _s(o.get("stdout")), _s(o.get("stderr"))
        ob = eb = None
        if base64_encoded:
            import base64

            ob, eb = base64.b64decode(out), base64.b64decode(err)
            out, err = ob.decode("utf-8", "replace"), eb.decode("utf-8", "replace")
        return cls(stdout=out, stderr=err, exit_code=_i(o.get("exit_code")),
                   duration_ms=_i(o.get("duration_ms")), pid=_i(o.get("pid")),
                   timed_out=_b(o.get("timed_out")), truncated=_b(o.get("truncated")),
                   undo=UndoInfo.from_dict(o.get("undo")), stdout_bytes=ob, stderr_bytes=eb,
                   raw=dict(o))


@dataclass
class ExecEvent:
    """One line of a streamed exec: ``start`` (pid), ``stdout``/``stderr`` (data), ``exit``.

    ``error`` lines are raised as :class:`sbx.SbxError`, not yielded. With
    ``encoding="base64"``, ``data_bytes`` holds the exact bytes.
    """

    type: str
    data: str = ""
    pid: int = 0
    exit_code: Optional[int] = None
    duration_ms: int = 0
    timed_out: bool = False
    error: str = ""
    code: str = ""
    undo: Optional[UndoInfo] = None
    data_bytes: Optional[bytes] = field(default=None, repr=False)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> "ExecEvent":
        """Build from one NDJSON line."""
        o = _d(obj)
        ec = o.get("exit_code")
        return cls(type=_s(o.get("type")), data=_s(o.get("data")), pid=_i(o.get("pid")),
                   exit_code=ec if isinstance(ec, int) and not isinstance(ec, bool) else None,
                   duration_ms=_i(o.get("duration_ms")), timed_out=_b(o.get("timed_out")),
                   error=_s(o.get("error")), code=_s(o.get("code")),
                   undo=UndoInfo.from_dict(o.get("undo")), raw=dict(o))


@dataclass
class FileInfo:
    """One entry of a directory listing."""

    name: str = ""
    path: str = ""
    type: str = ""
    size: int = 0
    mode: int = 0
    mod_time: Optional[datetime] = None
    link_target: str = ""

    @classmethod
    def from_dict(cls, obj: Any) -> "FileInfo":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(name=_s(o.get("name")), path=_s(o.get("path")), type=_s(o.get("type")),
                   size=_i(o.get("size")), mode=_i(o.get("mode")),
                   mod_time=parse_time(o.get("mod_time")), link_target=_s(o.get("link_target")))


@dataclass
class Checkpoint:
    """A disk checkpoint: ``v0`` (the fresh disk), ``v1``, ..."""

    id: str = ""
    create_time: Optional[datetime] = None
    comment: str = ""
    source_id: Optional[str] = None
    health: str = ""
    size_bytes: int = 0
    files: int = 0
    added_bytes: int = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> "Checkpoint":
        """Build from a JSON object."""
        o = _d(obj)
        sid = o.get("source_id")
        return cls(id=_s(o.get("id")), create_time=parse_time(o.get("create_time")),
                   comment=_s(o.get("comment")), source_id=sid if isinstance(sid, str) else None,
                   health=_s(o.get("health")), size_bytes=_i(o.get("size_bytes")),
                   files=_i(o.get("files")), added_bytes=_i(o.get("added_bytes")), raw=dict(o))


@dataclass
class Change:
    """A path that differs between two disks."""

    path: str = ""
    type: str = ""
    old_type: str = ""
    link_target: str = ""
    size: int = 0
    old_size: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> "Change":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(path=_s(o.get("path")), type=_s(o.get("type")), old_type=_s(o.get("old_type")),
                   link_target=_s(o.get("link_target")), size=_i(o.get("size")),
                   old_size=_i(o.get("old_size")))


@dataclass
class Diff:
    """Paths added, modified and deleted from checkpoint ``from_`` to ``to``."""

    from_: str = ""
    to: str = ""
    added: List[Change] = field(default_factory=list)
    modified: List[Change] = field(default_factory=list)
    deleted: List[Change] = field(default_factory=list)
    truncated: bool = False

    @classmethod
    def from_dict(cls, obj: Any) -> "Diff":
        """Build from a JSON object."""
        o = _d(obj)

        def ch(k: str) -> List[Change]:
            return [Change.from_dict(x) for x in o.get(k) or [] if isinstance(x, dict)]

        return cls(from_=_s(o.get("from")), to=_s(o.get("to")), added=ch("added"),
                   modified=ch("modified"), deleted=ch("deleted"), truncated=_b(o.get("truncated")))


@dataclass
class Snapshot:
    """A memory snapshot: disk, memory and processes of a sandbox at one instant."""

    id: str = ""
    name: str = ""
    sandbox: str = ""
    create_time: Optional[datetime] = None
    expire_time: Optional[datetime] = None
    memory_bytes: int = 0
    disk_bytes: int = 0
    stored_bytes: int = 0
    metadata: Any = None
    billable: bool = False
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> "Snapshot":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(id=_s(o.get("id")), name=_s(o.get("name")), sandbox=_s(o.get("sandbox")),
                   create_time=parse_time(o.get("create_time")),
                   expire_time=parse_time(o.get("expire_time")),
                   memory_bytes=_i(o.get("memory_bytes")), disk_bytes=_i(o.get("disk_bytes")),
                   stored_bytes=_i(o.get("stored_bytes")), metadata=o.get("metadata"),
                   billable=_b(o.get("billable")), raw=dict(o))


@dataclass
class Process:
    """A process started by exec."""

    pid: int = 0
    cmd: List[str] = field(default_factory=list)
    start_time: Optional[datetime] = None
    state: str = ""
    exit_code: Optional[int] = None
    output_bytes: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> "Process":
        """Build from a JSON object."""
        o = _d(obj)
        ec = o.get("exit_code")
        return cls(pid=_i(o.get("pid")), cmd=_strs(o.get("cmd")),
                   start_time=parse_time(o.get("start_time")), state=_s(o.get("state")),
                   exit_code=ec if isinstance(ec, int) else None,
                   output_bytes=_i(o.get("output_bytes")))


@dataclass
class Port:
    """A TCP port a program listens on inside a sandbox."""

    port: int = 0
    address: str = ""
    pid: int = 0
    command: str = ""

    @classmethod
    def from_dict(cls, obj: Any) -> "Port":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(port=_i(o.get("port")), address=_s(o.get("address")), pid=_i(o.get("pid")),
                   command=_s(o.get("command")))


@dataclass
class NetworkCounts:
    """Counts of the host's network decisions for a sandbox."""

    dns_answered: int = 0
    dns_refused: int = 0
    connections_allowed: int = 0
    connections_refused: int = 0
    packets_refused: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> "NetworkCounts":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(**{k: _i(o.get(k)) for k in ("dns_answered", "dns_refused", "connections_allowed",
                                                 "connections_refused", "packets_refused")})


@dataclass
class NetworkRefusal:
    """One refused destination of a network log."""

    time: Optional[datetime] = None
    kind: str = ""
    destination: str = ""
    address: str = ""
    port: int = 0
    reason: str = ""
    count: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> "NetworkRefusal":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(time=parse_time(o.get("time")), kind=_s(o.get("kind")),
                   destination=_s(o.get("destination")), address=_s(o.get("address")),
                   port=_i(o.get("port")), reason=_s(o.get("reason")), count=_i(o.get("count")))


@dataclass
class NetworkLog:
    """What the host refused for a sandbox, and counts of its decisions."""

    counts: NetworkCounts = field(default_factory=NetworkCounts)
    refused: List[NetworkRefusal] = field(default_factory=list)

    @classmethod
    def from_dict(cls, obj: Any) -> "NetworkLog":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(counts=NetworkCounts.from_dict(o.get("counts")),
                   refused=[NetworkRefusal.from_dict(x) for x in o.get("refused") or []
                            if isinstance(x, dict)])


@dataclass
class Event:
    """An event delivered to a sandbox (``GET /v1/sandboxes/{name}/events``).

    ``data`` is the posted body when it was JSON, ``data_text`` when it was
    UTF-8 text, ``data_base64`` otherwise.
    """

    id: str = ""
    key: str = ""
    data: Any = None
    data_text: str = ""
    data_base64: str = ""
    create_time: Optional[datetime] = None
    deliver_time: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> "Event":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(id=_s(o.get("id")), key=_s(o.get("key")), data=o.get("data"),
                   data_text=_s(o.get("data_text")), data_base64=_s(o.get("data_base64")),
                   create_time=parse_time(o.get("create_time")),
                   deliver_time=parse_time(o.get("deliver_time")), raw=dict(o))


@dataclass
class EventResult:
    """The answer of ``POST /v1/events/{key}``."""

    id: str = ""
    woken: List[str] = field(default_factory=list)
    pending: bool = False
    expire_time: Optional[datetime] = None

    @classmethod
    def from_dict(cls, obj: Any) -> "EventResult":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(id=_s(o.get("id")), woken=_strs(o.get("woken")), pending=_b(o.get("pending")),
                   expire_time=parse_time(o.get("expire_time")))


@dataclass
class Image:
    """An image: a read-only root filesystem shared by the sandboxes made from it."""

    name: str = ""
    digest: str = ""
    source: str = ""
    size_bytes: int = 0
    create_time: Optional[datetime] = None
    env: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, obj: Any) -> "Image":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(name=_s(o.get("name")), digest=_s(o.get("digest")), source=_s(o.get("source")),
                   size_bytes=_i(o.get("size_bytes")), create_time=parse_time(o.get("create_time")),
                   env=_strs(o.get("env")))


@dataclass
class Health:
    """The answer of ``GET /v1/health``."""

    status: str = ""
    version: str = ""
    runtime: str = ""
    warm_sandboxes: int = 0
    pid: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> "Health":
        """Build from a JSON object."""
        o = _d(obj)
        return cls(status=_s(o.get("status")), version=_s(o.get("version")),
                   runtime=_s(o.get("runtime")), warm_sandboxes=_i(o.get("warm_sandboxes")),
                   pid=_i(o.get("pid")))
