"""Typed objects of the sbx API (docs/api.md).

Each is a dataclass built with ``from_dict`` from the JSON object sbxd
answers. Parsing is tolerant: unknown fields are ignored (and kept in
``raw``), missing ones take their defaults. Times are timezone-aware
:class:`datetime.datetime` values (``None`` when absent).
"""

from __future__ import annotations

import re
import types
from dataclasses import MISSING, Field, dataclass, field, fields, is_dataclass
from datetime import datetime, timedelta, timezone
from typing import (Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Tuple, Type, TypeVar, Union,
                    get_args, get_origin, get_type_hints)

__all__ = [
    "parse_time",
    "NetworkRules",
    "Volume",
    "Source",
    "SandboxInfo",
    "UndoInfo",
    "GitUndo",
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
    "SecretUse",
    "SecretRule",
    "Secret",
    "SecretInfo",
    "Event",
    "EventResult",
    "Image",
    "Health",
    "HostCapacity",
    "NodeCapacity",
    "Node",
    "wire_schema",
    "Teardown",
    "Delivery",
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


# The generic from_dict. A field is read from the JSON member of its name
# (or of ``metadata["json"]``; ``None`` there means it is not in the JSON
# and keeps its default) and converted by its annotation. Scalars that are
# absent or wrong-typed take the field's default; ``raw`` is the whole object.

_UNIONS = (Union, getattr(types, "UnionType", Union))


def _json(name: Optional[str]) -> Dict[str, Any]:
    """Field metadata: the field's JSON member is ``name`` (``None``: not read from the JSON)."""
    return {"json": name}


def _opt(kind: type) -> Callable[[Any], Any]:
    return lambda v: v if isinstance(v, kind) and not isinstance(v, bool) else None


def _list_of(cls: Any) -> Callable[[Any], Any]:
    return lambda v: [cls.from_dict(x) for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _converter(owner: type, f: "Field[Any]", tp: Any) -> Callable[[Any], Any]:
    origin, args = get_origin(tp), get_args(tp)
    for kind, conv, zero in ((str, _s, ""), (bool, _b, False), (int, _i, 0), (float, _f, 0.0)):
        if tp is kind:
            dflt = f.default if f.default is not MISSING else zero
            return lambda v, conv=conv, dflt=dflt: conv(v, dflt)
    if tp is Any:
        return lambda v: v
    if origin in _UNIONS and len(args) == 2 and type(None) in args:
        inner = args[0] if args[1] is type(None) else args[1]
        if inner is datetime:
            return parse_time
        if inner in (str, int):
            return _opt(inner)
        if inner is float:
            return lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        if is_dataclass(inner):
            return inner.from_dict  # type: ignore[union-attr]
    if is_dataclass(tp):
        return tp.from_dict  # type: ignore[union-attr]
    if origin is list and args == (str,):
        return _strs
    if origin is list and len(args) == 1 and is_dataclass(args[0]):
        return _list_of(args[0])
    if origin is dict and args == (str, str):
        return _smap
    if origin is dict and args == (str, Any):
        return lambda v: v if isinstance(v, dict) else {}
    raise TypeError("sbx.types: no JSON conversion for %s.%s: %r" % (owner.__name__, f.name, tp))


_Plan = List[Tuple[str, Optional[str], Callable[[Any], Any]]]
_PLANS: Dict[type, _Plan] = {}


def _plan(cls: type) -> _Plan:
    """(attribute, JSON member or None for the whole object, converter) of each field of cls."""
    plan = _PLANS.get(cls)
    if plan is None:
        hints = get_type_hints(cls)
        plan = []
        for f in fields(cls):
            key = f.metadata.get("json", f.name)
            if f.name == "raw":
                plan.append((f.name, None, dict))
            elif f.init and key is not None:
                plan.append((f.name, key, _converter(cls, f, hints[f.name])))
        _PLANS[cls] = plan
    return plan


_M = TypeVar("_M", bound="_Model")


def _build(cls: Type[_M], o: Dict[str, Any]) -> _M:
    return cls(**{a: conv(o if k is None else o.get(k)) for a, k, conv in _plan(cls)})


class _Model:
    """Base of the typed objects: ``from_dict`` driven by the dataclass fields."""

    @classmethod
    def from_dict(cls: Type[_M], obj: Any) -> _M:
        """Build from a JSON object (a non-object gives the defaults)."""
        return _build(cls, _d(obj))


def _wire(schema: str, required: Tuple[str, ...] = ()) -> Callable[[Type[_M]], Type[_M]]:
    """Declare the class's component schema of api/openapi.yaml and the fields it requires.

    Parsing stays tolerant (a required field that is absent takes its
    default); the declaration is what tests/test_types_schema.py checks
    against the schema, so that a field added on one side only fails.
    """
    def mark(cls: Type[_M]) -> Type[_M]:
        setattr(cls, "__wire_schema__", schema)
        setattr(cls, "__wire_required__", frozenset(required))
        return cls
    return mark


def wire_schema(cls: type) -> Tuple[str, FrozenSet[str]]:
    """(component schema name, required JSON members) of a wire type; ``("", {})`` for others."""
    return getattr(cls, "__wire_schema__", ""), getattr(cls, "__wire_required__", frozenset())


@_wire("NetworkRules")
@dataclass
class NetworkRules(_Model):
    """A sandbox's egress rules: ``{internet, allow, deny, connect}``.

    ``internet=False`` cuts all egress; a non-empty ``allow`` (domains, ``*.x.org``
    wildcards, IPv4 CIDRs) is the only egress allowed; ``deny`` wins over
    ``allow``; ``connect`` names other sandboxes this one may reach.
    """

    internet: bool = True  # true when absent, as in the API
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)
    connect: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object sent to sbxd (all four fields)."""
        return {"internet": self.internet, "allow": list(self.allow), "deny": list(self.deny),
                "connect": list(self.connect)}

    _KEYS = ("internet", "allow", "deny", "connect")

    def keys(self) -> Tuple[str, ...]:
        """The four field names, so that ``dict(rules)`` and ``rules["allow"]`` work as on a dict."""
        return self._KEYS

    def __getitem__(self, key: str) -> Any:
        """``rules["allow"]``: a field by its name. Raises KeyError for any other key."""
        if key not in self._KEYS:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """A field by its name, or ``default`` for any other key."""
        return getattr(self, key) if key in self._KEYS else default


def rules_to_dict(rules: Any) -> Dict[str, Any]:
    """Accept a :class:`NetworkRules` or a plain dict and return the dict to send."""
    if isinstance(rules, NetworkRules):
        return rules.to_dict()
    if isinstance(rules, Mapping):
        return dict(rules)
    raise TypeError("network rules: want NetworkRules or a dict, got %r" % (type(rules).__name__,))


@_wire("Volume", ("name", "path"))
@dataclass
class Volume(_Model):
    """A named host directory mounted read-write at ``path``."""

    name: str
    path: str

    def to_dict(self) -> Dict[str, str]:
        """The JSON object sent to sbxd."""
        return {"name": self.name, "path": self.path}


@_wire("Source")
@dataclass
class Source(_Model):
    """What a sandbox was forked or started from."""

    sandbox: str = ""
    snapshot: str = ""

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["Source"]:  # type: ignore[override]
        """Build from a JSON object; ``None`` for null."""
        return _build(cls, obj) if isinstance(obj, dict) else None


@_wire("Sandbox", ("id", "name", "state", "image", "cpus", "memory_mb", "disk_mb", "env", "labels", "network", "volumes",
        "timeout_ms", "keep_alive_while_running", "recovery_interval_ms", "create_time", "source"))
@dataclass
class SandboxInfo(_Model):
    """The sandbox object of ``GET /v1/sandboxes/{name}``."""

    id: str = ""
    name: str = ""
    state: str = ""
    image: str = ""
    cpus: float = 0.0
    memory_mb: int = 0
    disk_mb: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    network: NetworkRules = field(default_factory=NetworkRules)
    volumes: List[Volume] = field(default_factory=list)
    timeout_ms: int = 0
    keep_alive_while_running: bool = False
    recovery_interval_ms: int = 0
    recovery_time: Optional[datetime] = None
    state_reason: str = ""
    wake_on: str = ""
    suspend_time: Optional[datetime] = None
    create_time: Optional[datetime] = None
    source: Optional[Source] = None
    node: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@_wire("GitUndo", ("repo", "head", "ref", "index_tree", "work_tree"))
@dataclass
class GitUndo(_Model):
    """The repository snapshot of undo ``git`` (docs/undo.md), what its rollback puts back.

    ``repo`` is the work tree's top directory inside the sandbox; ``head``
    HEAD's commit (``none`` in a repository without commits); ``ref`` the
    branch HEAD was on (``refs/heads/main``) or ``detached``;
    ``index_tree`` the tree of the index, ``work_tree`` the tree of the
    working tree with its untracked files.
    """

    repo: str = ""
    head: str = ""
    ref: str = ""
    index_tree: str = ""
    work_tree: str = ""

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["GitUndo"]:  # type: ignore[override]
        """Build from a JSON object; ``None`` when absent."""
        return _build(cls, obj) if isinstance(obj, dict) else None


@_wire("UndoResult", ("kind", "rolled_back"))
@dataclass
class UndoInfo(_Model):
    """The ``undo`` object of a guarded exec's answer (docs/undo.md).

    ``kind`` is what was taken (``none``, ``git``, ``checkpoint``,
    ``snapshot``), ``undo_class`` the classification of ``undo: auto``
    (JSON ``class``: ``none``, ``git``, ``checkpoint``, ``fork``),
    ``checkpoint``/``snapshot`` the ids taken, ``git`` the repository
    snapshot, ``rolled_back`` whether it was put back, ``rollback_error``
    why a rollback failed.
    """

    kind: str = ""
    undo_class: str = field(default="", metadata=_json("class"))
    checkpoint: str = ""
    snapshot: str = ""
    git: Optional[GitUndo] = None
    rolled_back: bool = False
    rollback_error: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["UndoInfo"]:  # type: ignore[override]
        """Build from a JSON object; ``None`` when absent."""
        return _build(cls, obj) if isinstance(obj, dict) else None


@_wire("ExecResult", ("pid", "stdout", "stderr", "exit_code", "duration_ms"))
@dataclass
class ExecResult(_Model):
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
    stdout_bytes: Optional[bytes] = field(default=None, repr=False, metadata=_json(None))
    stderr_bytes: Optional[bytes] = field(default=None, repr=False, metadata=_json(None))
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0

    @classmethod
    def from_dict(cls, obj: Any, base64_encoded: bool = False) -> "ExecResult":
        """Build from the buffered exec answer (decoding base64 output when asked)."""
        r = _build(cls, _d(obj))
        if base64_encoded:
            import base64

            r.stdout_bytes, r.stderr_bytes = base64.b64decode(r.stdout), base64.b64decode(r.stderr)
            r.stdout = r.stdout_bytes.decode("utf-8", "replace")
            r.stderr = r.stderr_bytes.decode("utf-8", "replace")
        return r


@_wire("ExecEvent", ("type",))
@dataclass
class ExecEvent(_Model):
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
    data_bytes: Optional[bytes] = field(default=None, repr=False, metadata=_json(None))
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@_wire("FileInfo", ("name", "path", "type", "size", "mode", "mod_time"))
@dataclass
class FileInfo(_Model):
    """One entry of a directory listing."""

    name: str = ""
    path: str = ""
    type: str = ""
    size: int = 0
    mode: int = 0
    mod_time: Optional[datetime] = None
    link_target: str = ""


@_wire("Checkpoint", ("id", "create_time", "store_time", "comment", "source_id", "health", "size_bytes", "files",
        "added_bytes"))
@dataclass
class Checkpoint(_Model):
    """A disk checkpoint: ``v0`` (the fresh disk), ``v1``, ..."""

    id: str = ""
    create_time: Optional[datetime] = None
    comment: str = ""
    source_id: Optional[str] = None
    health: str = ""
    size_bytes: int = 0
    files: int = 0
    added_bytes: int = 0
    # When it was safely in the blob store; None while it is a snapshot on
    # its node only, stored in the background.
    store_time: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@_wire("Change", ("path", "type", "size", "old_size"))
@dataclass
class Change(_Model):
    """A path that differs between two disks."""

    path: str = ""
    type: str = ""
    old_type: str = ""
    link_target: str = ""
    size: int = 0
    old_size: int = 0


@_wire("Diff", ("from", "to", "added", "modified", "deleted"))
@dataclass
class Diff(_Model):
    """Paths added, modified and deleted from checkpoint ``from_`` to ``to``."""

    from_: str = field(default="", metadata=_json("from"))
    to: str = ""
    added: List[Change] = field(default_factory=list)
    modified: List[Change] = field(default_factory=list)
    deleted: List[Change] = field(default_factory=list)
    truncated: bool = False


@_wire("Snapshot", ("id", "name", "sandbox", "create_time", "expire_time", "memory_bytes", "disk_bytes", "stored_bytes",
        "metadata", "billable", "health", "store_time"))
@dataclass
class Snapshot(_Model):
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
    # "ok", or "damaged" when its memory record cannot be read (delete it).
    health: str = "ok"
    # When its memory image was safely in the blob store; None while it is
    # only on the node that took it, being stored in the background.
    store_time: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@_wire("Process", ("pid", "cmd", "start_time", "state", "output_bytes"))
@dataclass
class Process(_Model):
    """A process started by exec."""

    pid: int = 0
    cmd: List[str] = field(default_factory=list)
    start_time: Optional[datetime] = None
    state: str = ""
    exit_code: Optional[int] = None
    output_bytes: int = 0


@_wire("Port", ("port", "address"))
@dataclass
class Port(_Model):
    """A TCP port a program listens on inside a sandbox."""

    port: int = 0
    address: str = ""
    pid: int = 0
    command: str = ""
    # Opens this port's preview without the key in the URL: add
    # "?sbx_preview=<token>" to its preview URL (naming the sandbox as the
    # list's request did). Minted by sbxd for the request's key; "" over
    # the Unix socket.
    preview_token: str = ""


@_wire("NetworkCounts", ("dns_answered", "dns_refused", "connections_allowed", "connections_refused", "packets_refused"))
@dataclass
class NetworkCounts(_Model):
    """Counts of the host's network decisions for a sandbox."""

    dns_answered: int = 0
    dns_refused: int = 0
    connections_allowed: int = 0
    connections_refused: int = 0
    packets_refused: int = 0


@_wire("NetworkRefusal", ("time", "kind", "destination", "reason", "count"))
@dataclass
class NetworkRefusal(_Model):
    """One refused destination of a network log."""

    time: Optional[datetime] = None
    kind: str = ""
    destination: str = ""
    address: str = ""
    port: int = 0
    reason: str = ""
    count: int = 0


@_wire("NetworkLog", ("counts", "refused"))
@dataclass
class NetworkLog(_Model):
    """What the host refused for a sandbox, and counts of its decisions."""

    counts: NetworkCounts = field(default_factory=NetworkCounts)
    refused: List[NetworkRefusal] = field(default_factory=list)
    secrets: List[SecretUse] = field(default_factory=list)


@_wire("SecretUse", ("time", "secret", "host", "method", "path", "allowed"))
@dataclass
class SecretUse(_Model):
    """One request that carried a secret's placeholder through the egress proxy."""

    time: Optional[datetime] = None
    secret: str = ""
    host: str = ""
    method: str = ""
    path: str = ""
    allowed: bool = False
    reason: str = ""


@_wire("SecretRule", ("host", "methods"))
@dataclass
class SecretRule(_Model):
    """Where a secret may be sent: a host, methods, and a path prefix (``/`` by default)."""

    host: str = ""
    methods: List[str] = field(default_factory=list)
    path_prefix: str = ""

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object sent to sbxd."""
        out: Dict[str, Any] = {"host": self.host, "methods": list(self.methods)}
        if self.path_prefix:
            out["path_prefix"] = self.path_prefix
        return out


@_wire("Secret", ("name", "value", "rules"))
@dataclass
class Secret(_Model):
    """A secret as given: the sandbox sees only a placeholder in ``$name``."""

    name: str = ""
    value: str = ""
    rules: List[SecretRule] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object sent to sbxd."""
        return {"name": self.name, "value": self.value, "rules": [r.to_dict() for r in self.rules]}


def secret_to_dict(s: Any) -> Dict[str, Any]:
    """Accept a :class:`Secret` or a plain dict and return the dict to send."""
    if isinstance(s, Secret):
        return s.to_dict()
    if isinstance(s, Mapping):
        out = dict(s)
        out["rules"] = [r.to_dict() if isinstance(r, SecretRule) else dict(r) for r in out.get("rules") or []]
        return out
    raise TypeError("secret: want Secret or a dict, got %r" % (type(s).__name__,))


@_wire("SecretInfo", ("name", "placeholder", "rules", "value_bytes", "update_time"))
@dataclass
class SecretInfo(_Model):
    """A secret as answered: its placeholder and rules, never its value."""

    name: str = ""
    placeholder: str = ""
    rules: List[SecretRule] = field(default_factory=list)
    value_bytes: int = 0
    update_time: Optional[datetime] = None


@_wire("Event", ("id", "key", "create_time", "deliver_time"))
@dataclass
class Event(_Model):
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
    #: On a pending event (``Client.pending_events``): when it is dropped.
    expire_time: Optional[datetime] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@_wire("EventResult", ("id", "woken", "pending"))
@dataclass
class EventResult(_Model):
    """The answer of ``POST /v1/events/{key}``."""

    id: str = ""
    woken: List[str] = field(default_factory=list)
    pending: bool = False
    expire_time: Optional[datetime] = None


@_wire("Image", ("name", "digest", "source", "size_bytes", "create_time", "env"))
@dataclass
class Image(_Model):
    """An image: a read-only root filesystem shared by the sandboxes made from it."""

    name: str = ""
    digest: str = ""
    source: str = ""
    size_bytes: int = 0
    create_time: Optional[datetime] = None
    env: List[str] = field(default_factory=list)


@_wire("Capacity", ("host_cpus", "host_memory_mb", "max_sandbox_cpus", "max_sandbox_memory_mb", "cpu_overcommit",
        "memory_overcommit", "max_sandboxes", "max_snapshots"))
@dataclass
class HostCapacity(_Model):
    """What the host admits (``capacity`` of ``GET /v1/health``, docs/security.md).

    ``host_cpus`` and ``host_memory_mb`` (MiB) are the host's;
    ``max_sandbox_cpus``/``max_sandbox_memory_mb`` bound one sandbox;
    ``cpu_overcommit``/``memory_overcommit`` are the factors by which the
    sandboxes together may pass the host; ``max_sandboxes`` and
    ``max_snapshots`` bound their numbers.
    """

    host_cpus: int = 0
    host_memory_mb: int = 0
    max_sandbox_cpus: float = 0.0
    max_sandbox_memory_mb: int = 0
    cpu_overcommit: float = 0.0
    memory_overcommit: float = 0.0
    max_sandboxes: int = 0
    max_snapshots: int = 0

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["HostCapacity"]:  # type: ignore[override]
        """Build from a JSON object; ``None`` when absent."""
        return _build(cls, obj) if isinstance(obj, dict) else None


@_wire("NodeCapacity", ("cpus", "memory_bytes", "free_memory_bytes", "sandboxes", "images", "snapshot_images"))
@dataclass
class NodeCapacity(_Model):
    """What a node published for placement: the machine's ``cpus``,
    ``memory_bytes`` and ``free_memory_bytes`` (MemAvailable), its
    ``sandboxes`` (warm pool left out), and the ids of the ``images`` and
    ``snapshot_images`` (memory images) it holds locally."""

    cpus: int = 0
    memory_bytes: int = 0
    free_memory_bytes: int = 0
    sandboxes: int = 0
    images: List[str] = field(default_factory=list)
    snapshot_images: List[str] = field(default_factory=list)


@_wire("Node", ("name", "url", "state", "version", "protocol", "epoch", "self", "join_time", "heartbeat_time",
        "lease_expire_time", "capacity"))
@dataclass
class Node(_Model):
    """One sbxd node of ``GET /v1/nodes``.

    ``state`` is ``active``, ``draining``, ``stopped`` (it left) or
    ``lost`` (its lease ran out without it leaving); ``url`` is where the
    other nodes reach it; ``epoch`` counts its joins; ``self`` marks the
    node that answered. A single sbxd lists itself alone, with
    ``heartbeat_time`` and ``lease_expire_time`` ``None``.
    """

    name: str = ""
    url: str = ""
    state: str = ""
    version: str = ""
    protocol: int = 0
    epoch: int = 0
    self: bool = False
    join_time: Optional[datetime] = None
    heartbeat_time: Optional[datetime] = None
    lease_expire_time: Optional[datetime] = None
    capacity: NodeCapacity = field(default_factory=NodeCapacity)


@_wire("Health", ("status", "version", "runtime", "warm_sandboxes", "pid", "layers", "disk_quota", "default_disk_mb",
        "checkpoints"))
@dataclass
class Health(_Model):
    """The answer of ``GET /v1/health``.

    ``runtime`` is the OCI runtime and its platform (``runsc/systrap``),
    ``platform`` runsc's platform (``kvm`` or ``systrap``) and
    ``platform_reason`` why; ``layers`` is ``btrfs`` or ``dir`` (with
    ``layers_note`` saying why btrfs is not in use when it was wanted);
    ``disk_quota`` whether sandboxes get one, ``default_disk_mb`` its size
    in MiB; ``checkpoints`` how disk checkpoints are taken
    (``btrfs-snapshot`` or ``capture``).
    """

    status: str = ""
    version: str = ""
    runtime: str = ""
    platform: str = ""
    platform_reason: str = ""
    warm_sandboxes: int = 0
    pid: int = 0
    layers: str = ""
    disk_quota: bool = False
    default_disk_mb: int = 0
    layers_note: str = ""
    checkpoints: str = ""
    capacity: Optional[HostCapacity] = None


@_wire("Key", ("id", "name", "labels", "admin", "daily_limit_usd", "create_time"))
@dataclass
class Key(_Model):
    """An API key's record (``GET /v1/keys``); never its secret.

    ``id`` is ``key_`` and 16 hex digits: the objects the key makes belong to
    it. An ``admin`` key sees every object and manages keys; a tenant key
    only what it made. ``daily_limit_usd`` is the spending limit per UTC day
    in US dollars, ``None`` for none. ``revoke_time`` is set on revoked keys
    (listed with ``revoked=True``).
    """

    id: str = ""
    name: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    admin: bool = False
    daily_limit_usd: Optional[float] = None
    create_time: Optional[datetime] = None
    revoke_time: Optional[datetime] = None


@_wire("CreatedKey", ("id", "name", "labels", "admin", "daily_limit_usd", "create_time", "secret"))
@dataclass
class CreatedKey(_Model):
    """The answer of ``POST /v1/keys``: the record and, this once, ``secret`` (``sbxk_…``).

    sbxd keeps only the secret's SHA-256: store it now.
    """

    id: str = ""
    name: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    admin: bool = False
    daily_limit_usd: Optional[float] = None
    create_time: Optional[datetime] = None
    revoke_time: Optional[datetime] = None
    secret: str = field(default="", repr=False)


@_wire("Teardown", ("deleted", "layer_bytes", "checkpoints", "checkpoint_bytes", "processes", "removed"))
@dataclass
class Teardown(_Model):
    """What deleting a delivered sandbox freed (a delivery with ``teardown=True``).

    ``deleted`` is true when the sandbox was deleted (``error`` says why not);
    ``layer_bytes`` is the size of its writable layer's files; ``checkpoints``
    how many checkpoints were deleted and ``checkpoint_bytes`` what they had
    added to the blob store; ``processes`` how many processes still ran.
    ``removed`` lists what the delete removed from the host (``container``,
    ``network``, ``mounts``, ``layer``, ``sandbox_dir``), ``left`` what a
    check found still there.
    """

    deleted: bool = False
    error: str = ""
    layer_bytes: int = 0
    checkpoints: int = 0
    checkpoint_bytes: int = 0
    processes: int = 0
    removed: List[str] = field(default_factory=list)
    left: List[str] = field(default_factory=list)

    @classmethod
    def from_dict(cls, obj: Any) -> Optional["Teardown"]:  # type: ignore[override]
        """Build from a JSON object; ``None`` when absent or null."""
        return _build(cls, obj) if isinstance(obj, dict) else None


@_wire("Delivery", ("id", "name", "seq", "sandbox", "sandbox_id", "archive_digest", "archive_bytes", "files", "digest",
        "previous", "envelope", "metadata", "create_time"))
@dataclass
class Delivery(_Model):
    """A delivery record: an archive (tar, zstd) of a sandbox's files and its signed statement.

    One link of the node's chain: ``seq`` is its place (from 1), ``digest``
    is ``sha256:<hex>`` of ``envelope`` (the DSSE envelope exactly as signed)
    and ``previous`` the digest of the record before it (``""`` for the
    first). ``archive_digest`` is ``sha256:<hex>`` of the archive's bytes,
    ``archive_bytes`` their size, ``files`` the regular files in it.
    ``sandbox``/``sandbox_id`` name the delivered sandbox (it may be gone).
    ``teardown`` is set only in the answer of a delivery with teardown.
    Verify a record offline with ``sbx delivery verify`` or the Go package
    ``delivery``.
    """

    id: str = ""
    name: str = ""
    seq: int = 0
    sandbox: str = ""
    sandbox_id: str = ""
    archive_digest: str = ""
    archive_bytes: int = 0
    files: int = 0
    digest: str = ""
    previous: str = ""
    envelope: Dict[str, Any] = field(default_factory=dict)
    metadata: Any = None
    create_time: Optional[datetime] = None
    teardown: Optional[Teardown] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@_wire("UsagePrices", ("cpu_hour", "memory_gib_hour", "storage_gb_month"))
@dataclass
class UsagePrices(_Model):
    """sbxd's prices in US dollars: ``cpu_hour`` per vCPU-hour used (default 0.025),
    ``memory_gib_hour`` per GiB-hour allocated while running (0.0075),
    ``storage_gb_month`` per GB-month stored, 10^9 bytes for 30 days (0.08)."""

    cpu_hour: float = 0.0
    memory_gib_hour: float = 0.0
    storage_gb_month: float = 0.0


@_wire("UsageEntry", ("cpu_seconds", "memory_gib_seconds", "stored_byte_seconds", "cost"))
@dataclass
class UsageEntry(_Model):
    """The usage of one group of ``GET /v1/usage``; only the group's own field is set.

    ``sandbox``/``sandbox_id`` (group_by sandbox; it may be gone), ``key``
    (group_by key: the API key billed, ``""`` the operator's), ``day``
    (group_by day, ``YYYY-MM-DD`` UTC). ``cpu_seconds`` is CPU time used,
    ``memory_gib_seconds`` memory allocated times seconds running,
    ``stored_byte_seconds`` checkpoint and snapshot bytes times seconds kept,
    ``cost`` US dollars at the prices.
    """

    sandbox: str = ""
    sandbox_id: str = ""
    key: str = ""
    day: str = ""
    cpu_seconds: float = 0.0
    memory_gib_seconds: float = 0.0
    stored_byte_seconds: float = 0.0
    cost: float = 0.0


@_wire("Usage", ("since", "until", "group_by", "prices", "usage", "total"))
@dataclass
class Usage(_Model):
    """The answer of ``GET /v1/usage``: usage in ``[since, until)``, grouped and priced.

    ``usage`` holds one entry per group that used anything (days oldest
    first); ``total`` sums them.
    """

    since: Optional[datetime] = None
    until: Optional[datetime] = None
    group_by: str = ""
    prices: UsagePrices = field(default_factory=UsagePrices)
    usage: List[UsageEntry] = field(default_factory=list)
    total: UsageEntry = field(default_factory=UsageEntry)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
