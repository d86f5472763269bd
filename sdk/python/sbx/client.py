"""The sbx client: :class:`Runtime` (alias ``Client``) and the :class:`Sandbox` handle.

The operations live in :class:`RuntimeOps` and :class:`SandboxOps`, written once as generators of
requests (``@op``); ``sbx.aio`` drives the same ones with asyncio.
"""

from __future__ import annotations

import base64
import datetime as _dt
import http.client
import json
import os
from typing import (TYPE_CHECKING, Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from ._transport import NDJSON, J, L, R, Progress, Reply, Transport, iter_lines, labels_query, op, seg
from .errors import ConnectionFailed, ProtocolError, SandboxNotFound, SbxError, error_for
from .pty import Pty
from .types import (Checkpoint, CreatedKey, Delivery, Diff, Event, EventResult, ExecEvent, ExecResult, FileInfo,
                    Health, Image, Key, NetworkLog, NetworkRules, Node, Port, Process, SandboxInfo, Secret, SecretInfo,
                    SecretRule, Snapshot, Usage, Volume, rules_to_dict, secret_to_dict)

if TYPE_CHECKING:  # pragma: no cover
    from .undo import GuardResult, TryResult

__all__ = ["Runtime", "Client", "Sandbox", "Sandboxes", "Snapshots", "Network", "Classification", "ExecStream", "ExecFold",
           "ForkResult", "DEFAULT_SOCKET", "Command", "Rules", "RuntimeOps", "SandboxOps", "resolve_endpoint"]

#: Where sbxd listens when neither ``socket`` nor ``$SBX_SOCKET`` is given.
DEFAULT_SOCKET = "/run/sbx/sbx.sock"

#: A command: a shell command line (run as ``["sh", "-c", line]``) or an argv list.
Command = Union[str, Sequence[str]]
#: Network rules: a :class:`NetworkRules` or a dict ``{"internet": False, ...}``.
Rules = Union[NetworkRules, Mapping[str, Any]]


def _argv(cmd: Command) -> List[str]:
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    argv = list(cmd)
    if not argv or not all(isinstance(a, str) for a in argv):
        raise TypeError("cmd: want a shell command line or a non-empty list of strings")
    return argv


def _object(reply: Reply) -> Dict[str, Any]:
    """A reply's JSON object; ``{}`` when it is empty or not an object."""
    try:
        out = reply.json("answer")
    except ProtocolError:
        return {}
    return out if isinstance(out, dict) else {}


def _put(d: Dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` unless ``value`` is None (fields left unset are omitted)."""
    if value is not None:
        d[key] = value


def resolve_endpoint(socket: Optional[str], url: Optional[str],
                     api_key: Optional[str]) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """(socket path, URL, API key) of a client: the arguments, else ``$SBX_URL`` with ``$SBX_API_KEY``,
    else the socket ``$SBX_SOCKET`` or :data:`DEFAULT_SOCKET`. Exactly one of socket path and URL is set."""
    if url is None and socket is None:
        url = os.environ.get("SBX_URL") or None
        if url is None:
            socket = os.environ.get("SBX_SOCKET") or DEFAULT_SOCKET
    if api_key is None:
        api_key = os.environ.get("SBX_API_KEY") or None
    return (None if url else socket), url, api_key


class RuntimeOps:
    """The operations of a client, written once for :class:`Runtime` and ``sbx.aio.AsyncRuntime``.

    Not used directly: each method returns its value on a :class:`Runtime`
    and a coroutine of it on an ``AsyncRuntime``.
    """

    _t: Any
    #: The sandbox handle class this client makes.
    sandbox_class: Any

    def _drive(self, gen: Any) -> Any:  # pragma: no cover - defined by the subclasses
        raise NotImplementedError

    def _init_namespaces(self) -> None:
        self.sandboxes = Sandboxes(self)
        self.snapshots = Snapshots(self)

    @property
    def transport(self) -> Any:
        """The underlying transport (for the SDK's helpers)."""
        return self._t

    @property
    def is_socket(self) -> bool:
        """True when this client talks to sbxd over its Unix socket."""
        return not self._t.url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._t.where()!r})"

    def _wrap(self, obj: Any) -> Any:
        return self.sandbox_class(self, SandboxInfo.from_dict(obj))

    def _creating(self, made: Any) -> Any:
        """What ``sandboxes.create`` answers: the sandbox (sync); the async client wraps the coroutine."""
        return made

    # --- classification (docs/undo.md) ---------------------------------

    @op
    def classify(self, cmd: "Command") -> Classification:
        """The lightest undo that covers ``cmd`` (``POST /v1/classify``): ``none``, ``git``, ``checkpoint``, ``fork``.

        ``cmd`` is a shell line (classified as ``sh -c`` runs it) or an argv
        list, sent as is. The answer is a :class:`Classification`, a str
        equal to the class with its ``reason``. Raises InvalidArgument.
        """
        body = {"cmd": cmd if isinstance(cmd, str) else list(cmd)}
        out = (yield J("POST", "/v1/classify", body=body)) or {}
        return Classification(str(out.get("undo") or ""), str(out.get("reason") or ""))

    # --- health -----------------------------------------------------------

    @op
    def health(self) -> Health:
        """``GET /v1/health``."""
        return Health.from_dict((yield J("GET", "/v1/health")))

    @op
    def nodes(self) -> List[Node]:
        """The nodes of the cluster sbxd belongs to, by name (``GET /v1/nodes``).

        A single sbxd lists itself alone. Admin keys only (Forbidden)."""
        return [Node.from_dict(n) for n in (yield J("GET", "/v1/nodes")) or []]

    # --- sandboxes --------------------------------------------------------

    @op
    def create(self, name: Optional[str] = None, *, image: Optional[str] = None,
               cpus: Optional[float] = None, memory_mb: Optional[int] = None,
               env: Optional[Mapping[str, str]] = None, labels: Optional[Mapping[str, str]] = None,
               network: Optional[Rules] = None, volumes: Optional[Sequence[Union[Volume, Mapping[str, str]]]] = None,
               snapshot: Optional[str] = None, timeout_ms: Optional[int] = None,
               keep_alive_while_running: Optional[bool] = None, disk_mb: Optional[int] = None,
               secrets: Optional[Sequence[Union[Secret, Mapping[str, Any]]]] = None,
               progress: Optional[Progress] = None, recovery_interval_ms: Optional[int] = None) -> "Sandbox":
        """Create and start a sandbox (``POST /v1/sandboxes``); returns its handle.

        Every argument is optional; those left ``None`` are not sent and
        take sbxd's defaults. With ``snapshot`` (a snapshot id) the sandbox
        starts from that memory snapshot, running. With ``progress`` the
        call streams (NDJSON) and passes each progress line to it (the
        default image is built on first use, which takes minutes). On a
        cluster's node, ``recovery_interval_ms`` (5000 to 86400000) takes a
        recovery snapshot that often, from which another node recovers the
        sandbox if its node is lost.

        Raises InvalidArgument, NameTaken, ImageNotFound, SnapshotNotFound.
        """
        body: Dict[str, Any] = {}
        _put(body, "name", name)
        _put(body, "image", image)
        _put(body, "cpus", cpus)
        _put(body, "memory_mb", memory_mb)
        _put(body, "disk_mb", disk_mb)
        if env is not None:
            body["env"] = dict(env)
        if labels is not None:
            body["labels"] = dict(labels)
        if network is not None:
            body["network"] = rules_to_dict(network)
        if volumes is not None:
            body["volumes"] = [v.to_dict() if isinstance(v, Volume) else dict(v) for v in volumes]
        _put(body, "snapshot", snapshot)
        _put(body, "timeout_ms", timeout_ms)
        _put(body, "keep_alive_while_running", keep_alive_while_running)
        _put(body, "recovery_interval_ms", recovery_interval_ms)
        if secrets is not None:
            body["secrets"] = [secret_to_dict(s) for s in secrets]
        if progress is not None:
            return self._wrap((yield L("POST", "/v1/sandboxes", body=body, progress=progress)))
        return self._wrap((yield J("POST", "/v1/sandboxes", body=body)))

    @op
    def create_from_snapshot(self, snapshot: str, name: Optional[str] = None, **kwargs: Any) -> "Sandbox":
        """Start a new sandbox from a memory snapshot (by id), running, with its processes.

        Other keyword arguments are those of :meth:`create` (``labels``,
        ``network``, ``env``, ...).
        """
        return (yield from self.create.gen(name, snapshot=snapshot, **kwargs))

    @op
    def get(self, name: str) -> "Sandbox":
        """Find a sandbox by name or id. Raises SandboxNotFound."""
        return self._wrap((yield J("GET", "/v1/sandboxes/" + seg(name))))

    @op
    def list(self, labels: Optional[Mapping[str, str]] = None) -> List["Sandbox"]:
        """List sandboxes, oldest first; with ``labels``, those carrying all of them."""
        out = (yield J("GET", "/v1/sandboxes", labels_query(dict(labels or {}))))
        return [self._wrap(o) for o in out or []]

    @op
    def delete(self, name: str) -> None:
        """Delete a sandbox by name or id (stops it, removes everything it owns).

        Raises SandboxNotFound, Conflict (a delete already runs).
        """
        (yield J("DELETE", "/v1/sandboxes/" + seg(name)))

    @op
    def update(self, name: str, *, new_name: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
               timeout_ms: Optional[int] = None, keep_alive_while_running: Optional[bool] = None,
               recovery_interval_ms: Optional[int] = None) -> "Sandbox":
        """Change a sandbox (``PUT /v1/sandboxes/{name}``): rename it, relabel it, its idle timeout, its recovery interval (0: none).

        Fields left ``None`` stay. ``new_name`` is sent as ``{"name": ...}``;
        ``labels`` replaces the labels. Raises InvalidArgument, SandboxNotFound, NameTaken.
        """
        body: Dict[str, Any] = {}
        _put(body, "name", new_name)
        if labels is not None:
            body["labels"] = dict(labels)
        _put(body, "timeout_ms", timeout_ms)
        _put(body, "keep_alive_while_running", keep_alive_while_running)
        _put(body, "recovery_interval_ms", recovery_interval_ms)
        return self._wrap((yield J("PUT", "/v1/sandboxes/" + seg(name), body=body)))

    @op
    def rename(self, name: str, new_name: str) -> "Sandbox":
        """Rename a sandbox: ``PUT /v1/sandboxes/{name}`` ``{"name": new_name}``."""
        return (yield from self.update.gen(name, new_name=new_name))

    # --- snapshots --------------------------------------------------------

    @op
    def list_snapshots(self, sandbox: Optional[str] = None) -> List[Snapshot]:
        """Snapshots not expired, newest first; ``sandbox`` (name or id) selects one sandbox's."""
        q = [("sandbox", sandbox)] if sandbox else None
        return [Snapshot.from_dict(o) for o in (yield J("GET", "/v1/snapshots", q)) or []]

    @op
    def get_snapshot(self, snapshot_id: str) -> Snapshot:
        """One snapshot. Raises SnapshotNotFound (also when it expired)."""
        return Snapshot.from_dict((yield J("GET", "/v1/snapshots/" + seg(snapshot_id))))

    @op
    def delete_snapshot(self, snapshot_id: str) -> None:
        """Delete a snapshot; sandboxes started from it run on."""
        (yield J("DELETE", "/v1/snapshots/" + seg(snapshot_id)))

    # --- events -----------------------------------------------------------

    @op
    def post_event(self, key: str, data: Any = None, content_type: Optional[str] = None) -> EventResult:
        """Post an event to ``key`` (``POST /v1/events/{key}``): wakes sandboxes suspended on it.

        ``data`` may be bytes (sent as ``application/octet-stream`` unless
        ``content_type`` says otherwise, or as JSON when it is valid JSON),
        a str (the same, encoded as UTF-8), or any other value (sent as JSON).
        """
        if data is None:
            raw = b""
        elif isinstance(data, (bytes, bytearray)):
            raw = bytes(data)
        elif isinstance(data, str):
            raw = data.encode()
        else:
            raw = json.dumps(data, separators=(",", ":")).encode()
            content_type = content_type or "application/json"
        if not content_type:
            content_type = "application/octet-stream"
            try:
                json.loads(raw)
                content_type = "application/json"
            except ValueError:
                pass
        path = "/v1/events/" + "/".join(seg(p) for p in key.split("/"))
        reply = yield R("POST", path, raw_body=raw, content_type=content_type)
        return EventResult.from_dict(reply.json(f"POST {path}") or {})

    @op
    def pending_events(self, key: str = "") -> List[Event]:
        """Events kept for a key no sandbox waits on yet (of ``key``; of every key when empty).

        Oldest first, each with ``expire_time``: every page of ``GET /v1/events``.
        """
        out: List[Event] = []
        cursor = ""
        while True:
            query = [("key", key)] if key else []
            if cursor:
                query.append(("cursor", cursor))
            reply = yield R("GET", "/v1/events", query or None, accept="application/json")
            nxt = reply.headers.get("x-next-cursor") or ""
            page = reply.json("GET /v1/events") or []
            out.extend(Event.from_dict(o) for o in page or [])
            if not nxt:
                return out
            cursor = nxt

    @op
    def cancel_event(self, event_id: str) -> None:
        """Cancel a pending event (``DELETE /v1/events/{id}``); raises the 404 error if it is not pending."""
        (yield J("DELETE", "/v1/events/" + seg(event_id)))

    @op
    def cancel_events(self, key: str) -> int:
        """Cancel every pending event of ``key``; return how many there were."""
        r = (yield J("DELETE", "/v1/events", [("key", key)])) or {}
        return int(r.get("cancelled", 0))

    # --- API keys ---------------------------------------------------------

    @op
    def create_key(self, name: str, daily_limit_usd: Optional[float] = None,
                   labels: Optional[Mapping[str, str]] = None, admin: bool = False) -> CreatedKey:
        """Make an API key (admin keys only: Forbidden with a tenant key).

        ``daily_limit_usd`` is its spending limit per UTC day in US dollars
        (``None``: none); ``admin=True`` makes an admin key, else a tenant key
        that sees only what it makes. The answer carries ``secret``, shown
        this once. Raises InvalidArgument (naming the field), NameTaken."""
        body: Dict[str, Any] = {"name": name}
        if daily_limit_usd is not None:
            body["daily_limit_usd"] = daily_limit_usd
        if labels:
            body["labels"] = dict(labels)
        if admin:
            body["admin"] = True
        return CreatedKey.from_dict((yield J("POST", "/v1/keys", None, body)))

    @op
    def list_keys(self, revoked: bool = False) -> List[Key]:
        """The live API keys, oldest first (with ``revoked``, revoked ones too); a tenant key gets its own."""
        q = [("revoked", "1")] if revoked else None
        return [Key.from_dict(o) for o in (yield J("GET", "/v1/keys", q)) or []]

    @op
    def get_key(self, id_or_name: str) -> Key:
        """One API key by id or (live) name. Raises KeyNotFound."""
        return Key.from_dict((yield J("GET", "/v1/keys/" + seg(id_or_name))))

    @op
    def revoke_key(self, id_or_name: str) -> None:
        """Revoke an API key at once: its open streams end and it authenticates nothing more.

        Admin keys only (Forbidden). Raises KeyNotFound."""
        (yield J("DELETE", "/v1/keys/" + seg(id_or_name)))
    # --- usage ------------------------------------------------------------

    @op
    def usage(self, since: Any = None, until: Any = None, group_by: Optional[str] = None) -> Usage:
        """Usage in ``[since, until)`` (default: the current UTC day until now), grouped.

        ``since`` and ``until`` are ``datetime`` (naive ones are taken as UTC)
        or RFC 3339 strings; ``group_by`` is ``"sandbox"`` (default), ``"key"``
        or ``"day"``. Each entry carries ``cpu_seconds``, ``memory_gib_seconds``,
        ``stored_byte_seconds`` and ``cost`` in US dollars. Raises
        InvalidArgument for a bad window or group.
        """
        q = []
        for name, t in (("since", since), ("until", until)):
            if t is not None:
                q.append((name, _rfc3339(t)))
        if group_by:
            q.append(("group_by", group_by))
        return Usage.from_dict((yield J("GET", "/v1/usage", q or None)))

    @op
    def set_key_limit(self, key_id: str, daily_limit_usd: Optional[float],
                      resume_suspended: bool = False) -> Dict[str, Any]:
        """Replace an API key's daily spending limit in US dollars (``None``: no limit).

        With ``resume_suspended``, the sandboxes the limit suspended resume
        once the key is under it. Admin keys only. Returns the key's record
        (a dict of the wire fields). Raises InvalidArgument, NotFound.
        """
        body: Dict[str, Any] = {"daily_limit_usd": daily_limit_usd}
        if resume_suspended:
            body["resume_suspended"] = True
        return (yield J("PUT", "/v1/keys/" + seg(key_id) + "/limit", None, body)) or {}

    # --- deliveries -------------------------------------------------------

    @op
    def list_deliveries(self, sandbox: Optional[str] = None) -> List[Delivery]:
        """Delivery records in chain order (oldest first); ``sandbox`` (name or id) selects those of one sandbox."""
        q = [("sandbox", sandbox)] if sandbox else None
        return [Delivery.from_dict(o) for o in (yield J("GET", "/v1/deliveries", q)) or []]

    @op
    def get_delivery(self, delivery_id: str) -> Delivery:
        """One delivery record. Raises NotFound."""
        return Delivery.from_dict((yield J("GET", "/v1/deliveries/" + seg(delivery_id))))

    @op
    def delivery_archive(self, delivery_id: str) -> bytes:
        """The bytes of a delivery's archive (tar, zstd); their sha256 is the record's ``archive_digest``.

        Verify the record itself with ``sbx delivery verify`` rather than
        trust the transfer. Raises NotFound; ConnectionFailed when the answer
        is cut or shorter than its ``Content-Length`` (a chunk lost from the
        blob store)."""
        reply = yield R("GET", "/v1/deliveries/" + seg(delivery_id) + "/archive", accept="application/x-tar+zstd")
        return reply.body

    @op
    def delivery_public_key(self) -> bytes:
        """The node's ed25519 public key (PEM, PKIX) that verifies delivery records."""
        reply = yield R("GET", "/v1/deliveries/key", accept="application/x-pem-file")
        return reply.body

    # --- images -----------------------------------------------------------

    @op
    def list_images(self) -> List[Image]:
        """Every image."""
        return [Image.from_dict(o) for o in (yield J("GET", "/v1/images")) or []]

    @op
    def get_image(self, name: str) -> Image:
        """One image. Raises ImageNotFound."""
        return Image.from_dict((yield J("GET", "/v1/images/" + seg(name))))

    @op
    def delete_image(self, name: str) -> None:
        """Remove an image. Raises Conflict while a sandbox uses it."""
        (yield J("DELETE", "/v1/images/" + seg(name)))

    @op
    def build_image(self, name: str, *, suite: Optional[str] = None,
                    packages: Optional[Sequence[str]] = None, no_cache: Optional[bool] = None,
                    progress: Optional[Progress] = None) -> Image:
        """Build an image with mmdebstrap (minutes), streaming progress."""
        body: Dict[str, Any] = {"name": name}
        _put(body, "suite", suite)
        if packages is not None:
            body["packages"] = list(packages)
        if no_cache:
            body["no_cache"] = True
        return Image.from_dict((yield L("POST", "/v1/images/build", body=body, progress=progress)))

    @op
    def pull_image(self, name: str, ref: str, *, insecure: Optional[bool] = None,
                   platform: Optional[str] = None, progress: Optional[Progress] = None) -> Image:
        """Pull an image from an OCI registry."""
        body: Dict[str, Any] = {"name": name, "ref": ref}
        if insecure:
            body["insecure"] = True
        _put(body, "platform", platform)
        return Image.from_dict((yield L("POST", "/v1/images/pull", body=body, progress=progress)))


class Runtime(RuntimeOps):
    """A client of one sbxd, over its Unix socket or over TCP with an API key (sync).

    ``Runtime()`` uses ``$SBX_URL`` (with ``$SBX_API_KEY``) when set, else
    the socket ``$SBX_SOCKET`` or ``/run/sbx/sbx.sock``. Give ``url`` (and
    ``api_key``) or ``socket`` to choose. ``timeout`` (seconds) bounds each
    socket operation; the default ``None`` waits as long as sbxd takes (an
    exec runs up to its own ``timeout_ms``).

    ``runtime.sandboxes`` (``create``, ``get``, ``list``, ``delete``) and
    ``runtime.snapshots`` (``list``, ``get``, ``delete``) group the calls;
    the flat methods (``create``, ``list_snapshots``, ...) are the same.
    ``sbx.aio.AsyncRuntime`` is the same client for asyncio. Usable as a
    context manager; the client holds no connection between requests, so
    ``close`` only marks it closed.
    """

    def __init__(self, socket: Optional[str] = None, url: Optional[str] = None,
                 api_key: Optional[str] = None, timeout: Optional[float] = None) -> None:
        self._t = Transport(*resolve_endpoint(socket, url, api_key), timeout)
        self.sandbox_class = Sandbox
        self.closed = False
        self._init_namespaces()

    def _drive(self, gen: Any) -> Any:
        return self._t.run(gen)

    def close(self) -> None:
        """Mark the client closed (it keeps no connection open between requests)."""
        self.closed = True

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def write_delivery_archive(self, delivery_id: str, out: BinaryIO, chunk_size: int = 1 << 20) -> int:
        """Copy a delivery's archive (tar, zstd) into the binary file-like ``out``; returns the bytes written.

        Raises NotFound; ConnectionFailed when the answer is cut or shorter
        than its ``Content-Length`` (``out`` then holds a prefix)."""
        resp = self._t.request("GET", "/v1/deliveries/" + seg(delivery_id) + "/archive",
                               accept="application/x-tar+zstd")
        n = 0
        try:
            while True:
                b = resp.read(chunk_size)
                if not b:
                    break
                out.write(b)
                n += len(b)
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("connection_failed", 0, f"reading delivery {delivery_id}'s archive: {e}") from e
        finally:
            resp.close()
        want = resp.getheader("Content-Length")
        if want is not None and want.isdigit() and int(want) != n:
            raise ConnectionFailed("connection_failed", 0,
                                   f"delivery {delivery_id}'s archive: {n} of {want} bytes")
        return n



#: The former name of :class:`Runtime`, kept as an alias.
Client = Runtime


class Classification(str):
    """The answer of ``POST /v1/classify``: a str equal to the class (``none``, ``git``,
    ``checkpoint``, ``fork``), with ``undo`` (the same) and ``reason`` (one sentence)."""

    reason: str

    def __new__(cls, undo: str, reason: str = "") -> "Classification":
        self = super().__new__(cls, undo)
        self.reason = reason
        return self

    @property
    def undo(self) -> str:
        """The class: ``none``, ``git``, ``checkpoint`` or ``fork``."""
        return str(self)


class Sandboxes:
    """``runtime.sandboxes``: create, get, list and delete sandboxes (the client's methods of those names)."""

    def __init__(self, runtime: RuntimeOps) -> None:
        self._rt = runtime

    def create(self, name: Optional[str] = None, **opts: Any) -> Any:
        """:meth:`Runtime.create`: a new sandbox, running; ``snapshot=`` starts it from a memory snapshot.

        On an ``AsyncRuntime`` the answer is awaited, or entered with
        ``async with`` (the sandbox is deleted at the end)."""
        return self._rt._creating(self._rt.create(name, **opts))

    def get(self, name_or_id: str) -> Any:
        """:meth:`Runtime.get`: the sandbox of that name or id. Raises SandboxNotFound."""
        return self._rt.get(name_or_id)

    def connect(self, name_or_id: str) -> Any:
        """The same as :meth:`get`."""
        return self._rt.get(name_or_id)

    def list(self, labels: Optional[Mapping[str, str]] = None) -> Any:
        """:meth:`Runtime.list`: the sandboxes, oldest first; with ``labels``, those carrying all of them."""
        return self._rt.list(labels)

    def delete(self, name_or_id: str) -> Any:
        """:meth:`Runtime.delete`. Raises SandboxNotFound, Conflict."""
        return self._rt.delete(name_or_id)


class Snapshots:
    """``runtime.snapshots``: list, get and delete memory snapshots."""

    def __init__(self, runtime: RuntimeOps) -> None:
        self._rt = runtime

    def list(self, sandbox: Optional[str] = None) -> Any:
        """Snapshots not expired, newest first; ``sandbox`` (name or id) selects one sandbox's."""
        return self._rt.list_snapshots(sandbox)

    def get(self, snapshot_id: str) -> Any:
        """One snapshot. Raises SnapshotNotFound (also when it expired)."""
        return self._rt.get_snapshot(snapshot_id)

    def delete(self, snapshot_id: str) -> Any:
        """Delete a snapshot; sandboxes started from it run on. Raises SnapshotNotFound."""
        return self._rt.delete_snapshot(snapshot_id)


class Network:
    """``sb.network``: the sandbox's egress rules (``get``, ``set``, ``off``, ``on``, ``log``).

    On an ``AsyncSandbox`` each method answers a coroutine.
    """

    def __init__(self, sandbox: "SandboxOps") -> None:
        self._sb = sandbox

    def get(self) -> Any:
        """The rules (``GET .../network``): a :class:`NetworkRules`, also readable as ``rules["allow"]``."""
        return self._sb.get_network()

    def set(self, rules: "Optional[Rules]" = None, *, internet: Optional[bool] = None,
            allow: Optional[Sequence[str]] = None, deny: Optional[Sequence[str]] = None,
            connect: Optional[Sequence[str]] = None) -> Any:
        """Replace the rules: give ``rules`` (a :class:`NetworkRules` or dict) or the fields.

        Fields not given take the API's defaults (internet on, empty lists):
        ``set`` replaces, it does not merge. Returns the rules as stored.
        Raises InvalidArgument (a bad domain, CIDR or sandbox name).
        """
        if rules is None:
            body: Dict[str, Any] = {}
            _put(body, "internet", internet)
            for k, v in (("allow", allow), ("deny", deny), ("connect", connect)):
                if v is not None:
                    if isinstance(v, str):
                        raise TypeError(f"{k}: want a list of strings, not a str")
                    body[k] = list(v)
            rules = body
        elif any(v is not None for v in (internet, allow, deny, connect)):
            raise TypeError("network.set: give rules or fields, not both")
        return self._sb.set_network(rules)

    def off(self) -> Any:
        """Cut all egress: ``{"internet": false}``. Returns the rules as stored."""
        return self._sb.set_network({"internet": False})

    def on(self) -> Any:
        """Open egress to the internet, with no allow or deny list (``connect`` is cleared too)."""
        return self._sb.set_network({"internet": True})

    def log(self) -> Any:
        """What the host refused for the sandbox, and counts of its decisions (a :class:`NetworkLog`)."""
        return self._sb.network_log()

    def __repr__(self) -> str:
        return f"Network({self._sb.info.network!r})"


class ForkResult:
    """What :meth:`Sandbox.fork_many` made: one sandbox (or error) per requested copy.

    ``sandboxes[i]`` is the copy made, or ``None`` where it failed and
    ``errors[i]`` (an :class:`SbxError`) says why. ``snapshot`` is the id
    of the snapshot the fork took for itself; ``paused_ms`` how long the
    original was paused. ``copies`` is another name of ``sandboxes``.
    """

    def __init__(self, snapshot: str, sandboxes: List[Any], errors: List[Optional[SbxError]],
                 paused_ms: int) -> None:
        self.snapshot = snapshot
        self.sandboxes = sandboxes
        self.errors = errors
        self.paused_ms = paused_ms

    @property
    def copies(self) -> List[Any]:
        """The same as ``sandboxes``."""
        return self.sandboxes

    def __repr__(self) -> str:
        return f"ForkResult(snapshot={self.snapshot!r}, sandboxes={self.sandboxes!r}, errors={self.errors!r})"


class ExecFold:
    """What the lines of a streamed exec add up to (shared by the sync and async streams)."""

    def __init__(self, b64: bool) -> None:
        self._b64 = b64
        self._out: List[str] = []
        self._err: List[str] = []
        #: The process id inside the sandbox, once the start line came.
        self.pid = 0
        #: The final ``exit`` event, once it came.
        self.exit: Optional[ExecEvent] = None

    def take(self, obj: Dict[str, Any]) -> ExecEvent:
        """Fold one line in and return its event. An ``error`` line raises its typed error;
        bad base64 (with ``encoding="base64"``) raises ProtocolError."""
        ev = ExecEvent.from_dict(obj)
        if ev.type in ("stdout", "stderr"):
            if self._b64:
                try:
                    ev.data_bytes = base64.b64decode(ev.data)
                except ValueError as e:
                    raise ProtocolError("protocol", 0, f"bad base64 in exec stream: {e}") from e
                ev.data = ev.data_bytes.decode("utf-8", "replace")
            (self._out if ev.type == "stdout" else self._err).append(ev.data)
        elif ev.type == "start":
            self.pid = ev.pid
        elif ev.type == "error":
            raise error_for(ev.code, 0, ev.error)
        elif ev.type == "exit":
            self.exit = ev
        return ev

    def result(self) -> ExecResult:
        """The :class:`ExecResult` of the output folded in and the exit line."""
        ev = self.exit
        if ev is None:
            raise ProtocolError("protocol", 0, "exec stream ended without an exit line")
        return ExecResult(stdout="".join(self._out), stderr="".join(self._err),
                          exit_code=ev.exit_code if ev.exit_code is not None else -1,
                          duration_ms=ev.duration_ms, pid=self.pid or ev.pid, timed_out=ev.timed_out,
                          undo=ev.undo, raw=ev.raw)


class ExecStream(ExecFold):
    """A running command whose output streams as it comes.

    Iterate it for :class:`ExecEvent` values (``start``, ``stdout``,
    ``stderr``, then the final ``exit``); an ``error`` line raises its typed
    error. ``wait()`` drains it and returns the :class:`ExecResult`.
    Closing it early (or leaving a ``with`` block) kills the process.
    """

    def __init__(self, resp: "http.client.HTTPResponse", b64: bool) -> None:
        super().__init__(b64)
        self._resp = resp
        self._lines = iter_lines(resp)
        self._done = False

    def __iter__(self) -> Iterator[ExecEvent]:
        return self

    def __next__(self) -> ExecEvent:
        if self._done:
            raise StopIteration
        try:
            ev = self.take(next(self._lines))
        except StopIteration:
            self._finish()
            raise ProtocolError("protocol", 0, "exec stream ended without an exit line") from None
        except BaseException:
            self._finish()
            raise
        if ev.type == "exit":
            self._finish()
        return ev

    def _finish(self) -> None:
        self._done = True
        self._resp.close()

    def wait(self) -> ExecResult:
        """Read to the end; return the output gathered (of what was not yet iterated too) and the exit."""
        for _ in self:
            pass
        return self.result()

    def close(self) -> None:
        """End the stream (kills the process if it still runs)."""
        self._finish()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SandboxOps:
    """The operations of a sandbox handle, written once for :class:`Sandbox` and ``sbx.aio.AsyncSandbox``.

    Not used directly: each method returns its value on a :class:`Sandbox`
    and a coroutine of it on an ``AsyncSandbox``.
    """

    def __init__(self, client: Any, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        #: The sandbox's egress rules: ``get()``, ``set(...)``, ``off()``, ``on()``, ``log()``.
        self.network = Network(self)

    def _drive(self, gen: Any) -> Any:
        return self.client._drive(gen)

    # --- object -----------------------------------------------------------

    @property
    def id(self) -> str:
        """The sandbox's immutable id (``sbx_`` + 16 hex digits)."""
        return self.info.id

    @property
    def name(self) -> str:
        """The sandbox's name as last read."""
        return self.info.name

    @property
    def state(self) -> str:
        """The sandbox's state as last read (``running``, ``stopped``, ...)."""
        return self.info.state

    @property
    def labels(self) -> Dict[str, str]:
        """The sandbox's labels as last read."""
        return self.info.labels

    @property
    def ref(self) -> str:
        """What request paths name the sandbox by: its id (its name if the id is unknown)."""
        return self.info.id or self.info.name

    def _p(self, *rest: str) -> str:
        p = "/v1/sandboxes/" + seg(self.ref)
        for r in rest:
            p += "/" + r
        return p

    def __repr__(self) -> str:
        return f"Sandbox(name={self.name!r}, id={self.id!r}, state={self.state!r})"

    @op
    def refresh(self) -> "Sandbox":
        """Reread the sandbox's object; returns self."""
        self.info = SandboxInfo.from_dict((yield J("GET", self._p())))
        return self

    @op
    def delete(self) -> None:
        """Delete the sandbox."""
        (yield J("DELETE", self._p()))

    @op
    def stop(self) -> "Sandbox":
        """Stop its processes; the disk stays and the next exec boots it again."""
        self.info = SandboxInfo.from_dict((yield J("POST", self._p("stop"))))
        return self

    @op
    def update(self, *, name: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
               timeout_ms: Optional[int] = None, keep_alive_while_running: Optional[bool] = None,
               recovery_interval_ms: Optional[int] = None) -> "Sandbox":
        """``PUT /v1/sandboxes/{id}``: rename (``name``), relabel (``labels`` replaces them),
        idle timeout, keep-alive, recovery interval. Fields left ``None`` stay; returns self.
        """
        body: Dict[str, Any] = {}
        _put(body, "name", name)
        if labels is not None:
            body["labels"] = dict(labels)
        _put(body, "timeout_ms", timeout_ms)
        _put(body, "keep_alive_while_running", keep_alive_while_running)
        _put(body, "recovery_interval_ms", recovery_interval_ms)
        self.info = SandboxInfo.from_dict((yield J("PUT", self._p(), body=body)))
        return self

    @op
    def rename(self, new_name: str) -> "Sandbox":
        """Rename the sandbox (``{"name": new_name}``); returns self. Raises NameTaken."""
        return (yield from self.update.gen(name=new_name))

    # --- processes --------------------------------------------------------

    def _exec_body(self, cmd: Command, cwd: Optional[str], env: Optional[Mapping[str, str]],
                   timeout_ms: Optional[int], stdin: Union[str, bytes, None], encoding: Optional[str],
                   undo: Optional[str], rollback_on_failure: Optional[bool]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"cmd": _argv(cmd)}
        _put(body, "cwd", cwd)
        if env is not None:
            body["env"] = dict(env)
        _put(body, "timeout_ms", timeout_ms)
        if isinstance(stdin, (bytes, bytearray)):
            try:
                body["stdin"] = bytes(stdin).decode("utf-8")
            except UnicodeDecodeError:
                body["stdin_base64"] = base64.b64encode(bytes(stdin)).decode()
        else:
            _put(body, "stdin", stdin)
        _put(body, "encoding", encoding)
        _put(body, "undo", undo)
        if rollback_on_failure is not None:
            body["rollback_on_failure"] = rollback_on_failure
        return body

    @op
    def exec(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             timeout_ms: Optional[int] = None, stdin: Union[str, bytes, None] = None,
             encoding: Optional[str] = None, undo: Optional[str] = None,
             rollback_on_failure: Optional[bool] = None) -> ExecResult:
        """Run a command and wait for it (buffered output, 16 MiB per stream at most).

        ``cmd`` is a shell command line (run as ``["sh", "-c", cmd]``) or an
        argv list. ``cwd`` defaults to ``/workspace`` on the server. A
        non-zero exit is not an error: read ``exit_code``.

        ``undo`` (``"none"``, ``"auto"``, ``"checkpoint"``, ``"snapshot"``)
        takes a server-side undo before the command, and
        ``rollback_on_failure=True`` puts it back when the command exits
        non-zero; the result's ``undo`` says what happened (docs/undo.md).

        Raises InvalidArgument (missing executable or cwd), SandboxNotFound,
        Conflict, CheckpointFailed/SnapshotFailed (the undo could not be
        taken: the command did not run).
        """
        body = self._exec_body(cmd, cwd, env, timeout_ms, stdin, encoding, undo, rollback_on_failure)
        return ExecResult.from_dict((yield J("POST", self._p("exec"), body=body)),
                                    base64_encoded=encoding == "base64")

    @op
    def start(self, cmd: Command, *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
              timeout_ms: Optional[int] = None, stdin: Union[str, bytes, None] = None) -> int:
        """Start a command detached (a server, a long job); returns its pid."""
        body = self._exec_body(cmd, cwd, env, timeout_ms, stdin, None, None, None)
        body["detach"] = True
        out = (yield J("POST", self._p("exec"), body=body)) or {}
        return int(out.get("pid") or 0)

    @op
    def processes(self) -> List[Process]:
        """The processes started by exec in the sandbox."""
        return [Process.from_dict(o) for o in (yield J("GET", self._p("processes"))) or []]

    @op
    def signal(self, pid: int, signal: int = 15) -> None:
        """Send a signal to the process group of a running process started by exec."""
        (yield J("POST", self._p("processes", str(pid), "signal"), body={"signal": signal}))

    # --- files ------------------------------------------------------------

    @op
    def read_file(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        """A regular file's bytes. Raises FileNotFound, InvalidArgument (a directory, a FIFO or
        device, a bad path), TooLarge (over ``max_bytes``; the server's default is 1 GiB)."""
        q: List[Tuple[str, str]] = [("path", path)]
        if max_bytes is not None:
            q.append(("max_bytes", str(max_bytes)))
        reply = yield R("GET", self._p("files"), q)
        return reply.body

    @op
    def read_text(self, path: str, encoding: str = "utf-8", max_bytes: Optional[int] = None) -> str:
        """A file's contents as text."""
        return (yield from self.read_file.gen(path, max_bytes)).decode(encoding)

    @op
    def write_file(self, path: str, data: Union[bytes, bytearray, str], mode: Optional[int] = None) -> Dict[str, Any]:
        """Write a file (str is encoded as UTF-8), creating parents; ``mode`` e.g. ``0o755``.

        Returns ``{"path", "size", "mode"}``.
        """
        q: List[Tuple[str, str]] = [("path", path)]
        if mode is not None:
            q.append(("mode", format(mode, "o")))
        raw = data.encode() if isinstance(data, str) else bytes(data)
        reply = yield R("PUT", self._p("files"), q, raw_body=raw, content_type="application/octet-stream")
        return _object(reply)

    @op
    def list_files(self, path: str) -> List[FileInfo]:
        """List a directory, by name."""
        out = (yield J("GET", self._p("files"), [("path", path), ("list", "1")]))
        return [FileInfo.from_dict(o) for o in out or []]

    @op
    def delete_file(self, path: str, recursive: bool = False) -> None:
        """Delete a file, or a directory (``recursive`` when not empty)."""
        q: List[Tuple[str, str]] = [("path", path)]
        if recursive:
            q.append(("recursive", "1"))
        (yield J("DELETE", self._p("files"), q))

    @op
    def download(self, path: str, max_bytes: Optional[int] = None) -> bytes:
        """A tar archive (PAX) of a directory's contents, or of one file.

        Sparse files come as GNU PAX 1.0 sparse entries, which ``tarfile`` extracts as sparse
        files. Raises TooLarge when the archive is estimated over ``max_bytes`` (file data
        without holes plus 1536 bytes an entry; the server's default is 1 GiB)."""
        q: List[Tuple[str, str]] = [("path", path)]
        if max_bytes is not None:
            q.append(("max_bytes", str(max_bytes)))
        reply = yield R("GET", self._p("archive"), q)
        return reply.body

    @op
    def upload(self, path: str, tar: bytes) -> Dict[str, Any]:
        """Extract a tar archive into the directory ``path``; returns ``{"files", "bytes"}``."""
        reply = yield R("PUT", self._p("archive"), [("path", path)], raw_body=tar,
                        content_type="application/x-tar")
        return _object(reply)

    # --- checkpoints ------------------------------------------------------

    @op
    def checkpoint(self, comment: Optional[str] = None, progress: Optional[Progress] = None) -> Checkpoint:
        """Take a disk checkpoint (running or stopped sandbox); ``progress`` gets each progress line.

        Raises InvalidArgument (comment over 1024 bytes), Conflict,
        CheckpointFailed (nothing recorded).
        """
        body: Dict[str, Any] = {}
        _put(body, "comment", comment)
        return Checkpoint.from_dict((yield L("POST", self._p("checkpoint"), body=body,
                                                               progress=progress)))

    @op
    def list_checkpoints(self) -> List[Checkpoint]:
        """The sandbox's checkpoints, newest first, ``v0`` last."""
        return [Checkpoint.from_dict(o) for o in (yield J("GET", self._p("checkpoints"))) or []]

    @op
    def get_checkpoint(self, checkpoint_id: str, verify: bool = False) -> Checkpoint:
        """One checkpoint; ``verify`` rereads every chunk first (``health`` says ``damaged`` if bad).

        Raises CheckpointNotFound.
        """
        q = [("verify", "1")] if verify else None
        return Checkpoint.from_dict((yield J("GET", self._p("checkpoints", seg(checkpoint_id)), q)))

    @op
    def restore(self, checkpoint_id: str, progress: Optional[Progress] = None) -> "Sandbox":
        """Put the disk back as in checkpoint ``checkpoint_id``; the sandbox stops (next request boots it).

        Returns self. Raises CheckpointNotFound, Conflict, RestoreFailed (the disk is as it was).
        """
        out = (yield L("POST", self._p("checkpoints", seg(checkpoint_id), "restore"),
                                         progress=progress))
        if isinstance(out, dict):
            self.info = SandboxInfo.from_dict(out)
        return self

    @op
    def diff(self, from_: Optional[str] = None, to: str = "live", limit: Optional[int] = None) -> Diff:
        """Paths added, modified and deleted from checkpoint ``from_`` to ``to`` (``live``: the disk now).

        ``from_`` defaults to the checkpoint before ``to`` (the newest, for ``live``).
        """
        q: List[Tuple[str, str]] = []
        if from_:
            q.append(("from", from_))
        if limit:
            q.append(("limit", str(limit)))
        return Diff.from_dict((yield J("GET", self._p("checkpoints", seg(to or "live"), "diff"), q)))

    # --- snapshots and forks ---------------------------------------------

    @op
    def snapshot(self, name: Optional[str] = None, retention_days: Optional[float] = None,
                 metadata: Optional[Mapping[str, Any]] = None, progress: Optional[Progress] = None) -> Snapshot:
        """Take a memory snapshot of the running sandbox (disk, memory, processes).

        Raises Conflict (not running), SandboxHasVolume, SnapshotFailed.
        """
        body: Dict[str, Any] = {}
        _put(body, "name", name)
        _put(body, "retention_days", retention_days)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        return Snapshot.from_dict((yield L("POST", self._p("snapshot"), body=body,
                                                             progress=progress)))

    @op
    def list_snapshots(self) -> List[Snapshot]:
        """This sandbox's snapshots, newest first."""
        return (yield from self.client.list_snapshots.gen(self.name or self.id))

    @op
    def fork_many(self, count: int, name: Optional[str] = None, *, labels: Optional[Mapping[str, str]] = None,
                  network: Optional[Rules] = None, progress: Optional[Progress] = None) -> ForkResult:
        """Make ``count`` live copies of the running sandbox; the original runs on.

        The copies take the original's labels unless ``labels`` is given,
        and ``network`` rules when given; ``name`` names them (sbxd adds a
        suffix to each when ``count`` > 1). Answers a :class:`ForkResult`:
        ``sandboxes[i]`` the copy or ``None``, ``errors[i]`` why it failed.
        Raises (for the whole fork) InvalidArgument, NameTaken, Conflict
        (not running), SandboxHasVolume, ForkFailed.
        """
        body: Dict[str, Any] = {}
        _put(body, "name", name)
        if labels is not None:
            body["labels"] = dict(labels)
        if network is not None:
            body["network"] = rules_to_dict(network)
        if count != 1:
            body["count"] = count
        out = (yield L("POST", self._p("fork"), body=body, progress=progress)) or {}
        copies: List[Any] = []
        errors: List[Optional[SbxError]] = []
        for cp in out.get("copies") or []:
            if isinstance(cp, dict) and isinstance(cp.get("sandbox"), dict):
                copies.append(self.client._wrap(cp["sandbox"]))
                errors.append(None)
            else:
                e = (cp or {}).get("error") if isinstance(cp, dict) else None
                e = e if isinstance(e, dict) else {}
                copies.append(None)
                errors.append(error_for(str(e.get("code") or "fork_failed"), 0, str(e.get("message") or "")))
        return ForkResult(str(out.get("snapshot") or ""), copies, errors, int(out.get("paused_ms") or 0))

    @op
    def fork(self, name: Optional[str] = None, *, labels: Optional[Mapping[str, str]] = None,
             network: Optional[Rules] = None, progress: Optional[Progress] = None) -> Any:
        """Make one live copy of the running sandbox and answer it, a sandbox handle; the original runs on.

        Arguments as :meth:`fork_many`. Raises InvalidArgument, NameTaken,
        Conflict (not running), SandboxHasVolume, ForkFailed (also the
        copy's own error when it failed).
        """
        res = yield from self.fork_many.gen(1, name, labels=labels, network=network, progress=progress)
        if not res.sandboxes:
            raise ProtocolError("protocol", 0, "fork answered no copy")
        if res.sandboxes[0] is None:
            err = res.errors[0]
            assert err is not None
            raise err
        return res.sandboxes[0]

    #: The former name of :meth:`fork` (one copy, answered).
    fork_one = fork

    # --- deliveries -------------------------------------------------------

    @op
    def deliver(self, paths: Sequence[str], name: Optional[str] = None,
                metadata: Optional[Mapping[str, Any]] = None, teardown: bool = False,
                progress: Optional[Progress] = None) -> Delivery:
        """Pack ``paths`` (absolute; a directory whole, a symlink as a link) into a signed delivery.

        The archive goes to the blob store and its record is appended to the
        node's chain; a stopped sandbox boots, a suspended one wakes;
        ``progress`` gets each progress line. With ``teardown`` the sandbox is
        deleted afterwards and the record's ``teardown`` says what that freed.
        Raises InvalidArgument (a path missing, escaping, or over the size
        limit: nothing is stored), Conflict (busy).
        """
        if isinstance(paths, str):
            paths = [paths]
        body: Dict[str, Any] = {"paths": list(paths)}
        _put(body, "name", name)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if teardown:
            body["teardown"] = True
        return Delivery.from_dict((yield L("POST", self._p("deliveries"), body=body,
                                                             progress=progress)))

    @op
    def list_deliveries(self) -> List[Delivery]:
        """This sandbox's deliveries, oldest first."""
        return (yield from self.client.list_deliveries.gen(self.id))

    # --- network ----------------------------------------------------------

    @op
    def get_network(self) -> NetworkRules:
        """The sandbox's network rules (``GET .../network``)."""
        return NetworkRules.from_dict((yield J("GET", self._p("network"))))

    @op
    def set_network(self, rules: Rules) -> NetworkRules:
        """Replace the sandbox's network rules; returns them as stored (canonical form)."""
        out = NetworkRules.from_dict((yield J("PUT", self._p("network"),
                                                                body=rules_to_dict(rules))))
        self.info.network = out
        return out

    @op
    def network_log(self) -> NetworkLog:
        """What the host refused for the sandbox, and counts of its decisions."""
        return NetworkLog.from_dict((yield J("GET", self._p("network", "log"))))

    # --- secrets ----------------------------------------------------------

    @op
    def secrets(self) -> List[SecretInfo]:
        """The sandbox's secrets by name: placeholders and rules, never values."""
        out = (yield J("GET", self._p("secrets")))
        return [SecretInfo.from_dict(x) for x in (out or {}).get("secrets") or []]

    @op
    def set_secrets(self, secrets: Sequence[Union[Secret, Mapping[str, Any]]]) -> List[SecretInfo]:
        """Replace all the secrets (``[]`` removes them); a secret that keeps its name keeps its placeholder.

        Raises InvalidArgument naming the field (``secrets[0].rules[1].host``).
        """
        out = (yield J("PUT", self._p("secrets"),
                                         body={"secrets": [secret_to_dict(s) for s in secrets]}))
        return [SecretInfo.from_dict(x) for x in (out or {}).get("secrets") or []]

    @op
    def put_secret(self, name: str, rules: Sequence[Union[SecretRule, Mapping[str, Any]]],
                   value: Optional[str] = None) -> SecretInfo:
        """Add a secret or replace its value and rules; without ``value`` an existing secret keeps its value."""
        body: Dict[str, Any] = {"rules": [r.to_dict() if isinstance(r, SecretRule) else dict(r) for r in rules]}
        _put(body, "value", value)
        return SecretInfo.from_dict((yield J("PUT", self._p("secrets", seg(name)), body=body)))

    @op
    def delete_secret(self, name: str) -> None:
        """Remove a secret. Raises NotFound when the sandbox has none of that name."""
        (yield J("DELETE", self._p("secrets", seg(name))))

    # --- suspend, resume, events -----------------------------------------

    @op
    def suspend(self, wake_on: Optional[str] = None, progress: Optional[Progress] = None) -> "Sandbox":
        """Suspend: memory and disk go to the blob store; ``wake_on`` an event key that resumes it."""
        body: Dict[str, Any] = {}
        _put(body, "wake_on", wake_on)
        out = (yield L("POST", self._p("suspend"), body=body, progress=progress))
        if isinstance(out, dict):
            self.info = SandboxInfo.from_dict(out)
        return self

    @op
    def resume(self, progress: Optional[Progress] = None) -> "Sandbox":
        """Resume a suspended sandbox, running, with its processes; returns self."""
        out = (yield L("POST", self._p("resume"), progress=progress))
        if isinstance(out, dict):
            self.info = SandboxInfo.from_dict(out)
        return self

    @op
    def events(self) -> List[Event]:
        """Events delivered to the sandbox (why it woke), oldest first: every page.

        sbxd answers at most 100 events or 4 MiB a page, with the next
        page's cursor in ``X-Next-Cursor``.
        """
        out: List[Event] = []
        cursor = ""
        while True:
            reply = yield R("GET", self._p("events"), [("cursor", cursor)] if cursor else None,
                            accept="application/json")
            nxt = reply.headers.get("x-next-cursor") or ""
            page = reply.json("GET events") or []
            out.extend(Event.from_dict(o) for o in page or [])
            if not nxt:
                return out
            cursor = nxt

    # --- ports ------------------------------------------------------------

    @op
    def ports(self) -> List[Port]:
        """TCP ports programs listen on in the sandbox (it must be running)."""
        return [Port.from_dict(o) for o in (yield J("GET", self._p("ports"))) or []]

    def port_url(self, port: int) -> str:
        """The path-based preview URL of ``port`` (``""`` for a client on the Unix socket)."""
        t = self.client.transport
        if not t.url:
            return ""
        return t.url.rstrip("/") + "/v1/sandboxes/" + seg(self.name or self.id) + f"/ports/{port}/"

    # --- undo helpers (docs/undo.md) -------------------------------------

    def try_in_copy(self, step: str, verify: Optional[str] = None, offline: bool = True,
                    cwd: Optional[str] = None) -> "TryResult":
        """:func:`sbx.try_in_copy` on this sandbox."""
        from .undo import try_in_copy

        return try_in_copy(self, step, verify, offline=offline, cwd=cwd)

    def guarded(self, command: str, cwd: Optional[str] = None) -> "GuardResult":
        """:func:`sbx.guarded` on this sandbox."""
        from .undo import guarded

        return guarded(self, command, cwd=cwd)

    def remember(self, step: str, retention_days: float = 1) -> Snapshot:
        """:func:`sbx.remember` on this sandbox."""
        from .undo import remember

        return remember(self, step, retention_days=retention_days)

    def go_back_to(self, step: str) -> "Sandbox":
        """:func:`sbx.go_back_to` on this sandbox."""
        from .undo import go_back_to

        return go_back_to(self, step)

    def chain(self) -> List[Snapshot]:
        """:func:`sbx.chain` on this sandbox."""
        from .undo import chain

        return chain(self)


class Sandbox(SandboxOps):
    """A handle on one sandbox (sync): its object as last read (``info``) plus methods.

    ``Sandbox.create(**opts)`` makes one through the default client
    (:class:`Runtime` from the environment), ``Sandbox.connect(name_or_id)``
    gets one. Requests address the sandbox by its id, so a handle keeps
    working when the sandbox is renamed. As a context manager it deletes
    the sandbox on exit (``with Sandbox.create() as sb:``).
    """

    @classmethod
    def create(cls, name: Optional[str] = None, *, runtime: Optional[Runtime] = None, **opts: Any) -> "Sandbox":
        """A new sandbox, running, through ``runtime`` (default: ``Runtime()`` from the environment).

        Keyword arguments are those of :meth:`Runtime.create` (``image``,
        ``cpus``, ``memory_mb``, ``env``, ``labels``, ``network``,
        ``snapshot``, ``timeout_ms``, ``progress``, ...). Raises
        InvalidArgument, NameTaken, ImageNotFound, SnapshotNotFound,
        ConnectionFailed (no sbxd).
        """
        return (runtime or Runtime()).create(name, **opts)

    @classmethod
    def connect(cls, name_or_id: str, *, runtime: Optional[Runtime] = None) -> "Sandbox":
        """An existing sandbox by name or id (default client from the environment). Raises SandboxNotFound."""
        return (runtime or Runtime()).get(name_or_id)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.delete()
        except SandboxNotFound:
            pass

    def exec_stream(self, cmd: Command, *, cwd: Optional[str] = None,
                    env: Optional[Mapping[str, str]] = None, timeout_ms: Optional[int] = None,
                    stdin: Union[str, bytes, None] = None, encoding: Optional[str] = None,
                    undo: Optional[str] = None, rollback_on_failure: Optional[bool] = None) -> ExecStream:
        """Start a command and stream its output: iterate the :class:`ExecStream` for events.

        Arguments as :meth:`exec`. The final ``exit`` event carries
        ``exit_code``, ``duration_ms`` and ``undo``.
        """
        body = self._exec_body(cmd, cwd, env, timeout_ms, stdin, encoding, undo, rollback_on_failure)
        resp = self.client.transport.request("POST", self._p("exec"), body=body, accept=NDJSON)
        return ExecStream(resp, encoding == "base64")

    def pty(self, cmd: Optional[Sequence[str]] = None, *, cwd: Optional[str] = None,
            env: Optional[Mapping[str, str]] = None, rows: int = 0, cols: int = 0,
            timeout_ms: Optional[int] = None, keep: bool = False) -> Pty:
        """Start ``cmd`` (default a login shell) on a pseudo-terminal, as ``docker exec -it``.

        ``rows`` x ``cols`` cells (default 24 x 80). With ``keep`` the command
        outlives :meth:`Pty.close`: attach again with :meth:`attach_pty` and
        its pid. Raises :class:`InvalidArgument` (bad size), :class:`SandboxNotFound`.
        """
        q: List[Tuple[str, str]] = [("tty", "1")]
        q += [("cmd", a) for a in cmd or []]
        if cwd:
            q.append(("cwd", cwd))
        q += [("env", f"{k}={v}") for k, v in (env or {}).items()]
        if rows:
            q.append(("rows", str(rows)))
        if cols:
            q.append(("cols", str(cols)))
        if timeout_ms:
            q.append(("timeout_ms", str(timeout_ms)))
        if keep:
            q.append(("keep", "1"))
        return Pty(self.client.transport.websocket(self._p("exec"), q))

    def attach_pty(self, pid: int, *, rows: int = 0, cols: int = 0) -> Pty:
        """Attach again to the terminal of process ``pid``.

        One started with ``keep`` whose client went, or one in a copy made
        by a snapshot or fork (same pid). Its latest 64 KiB of output are
        read first; ``rows`` and ``cols`` resize it. Closing it only
        detaches. Raises :class:`Conflict` while another client is attached
        (one at a time), :class:`InvalidArgument` for a process that is not
        a terminal, :class:`ProcessNotFound`.
        """
        q: List[Tuple[str, str]] = []
        if rows or cols:
            q += [("rows", str(rows)), ("cols", str(cols))]
        return Pty(self.client.transport.websocket(self._p("processes", str(pid), "tty"), q))

    def attach(self, pid: int, offset: int = 0, encoding: Optional[str] = None) -> ExecStream:
        """Stream the output of a process started by exec, from byte ``offset``, until it exits.

        Closing the stream only detaches. Raises ProcessNotFound.
        """
        q: List[Tuple[str, str]] = [("offset", str(offset))]
        if encoding:
            q.append(("encoding", encoding))
        resp = self.client.transport.request("GET", self._p("processes", str(pid), "output"), q,
                                             accept=NDJSON)
        return ExecStream(resp, encoding == "base64")



def _rfc3339(t: Any) -> str:
    """An RFC 3339 UTC string of a datetime (naive: UTC), or a string as is."""
    if isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
