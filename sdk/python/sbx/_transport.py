"""HTTP over a Unix socket or TCP, with typed errors and NDJSON reading."""

from __future__ import annotations

import functools
import http.client
import json
import socket
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from ._websocket import WebSocket, connect_socket, handshake
from .errors import ConnectionFailed, ProtocolError, SbxError, error_for

NDJSON = "application/x-ndjson"
JSON = "application/json"

Query = Optional[Sequence[Tuple[str, str]]]
#: A progress callback of a long operation: gets each ``info`` line's text.
Progress = Callable[[str], None]


# --- operations as data ---------------------------------------------------
#
# Every method of the SDK that talks to sbxd is written once, as a
# generator that yields the requests it needs (a :class:`Call`, or a
# :class:`Sleep` between retries) and gets their answers back: the sync
# client (:class:`Transport`) and the async one (``sbx.aio``) each drive
# the same generator with their own I/O. A failed request is thrown into
# the generator as its typed error.


class Call:
    """One request an operation needs.

    ``kind`` says what the operation wants back: ``"json"`` the decoded JSON
    answer (``None`` for an empty body), ``"long"`` the ``data`` of the
    ``complete`` line of an NDJSON stream (``info`` lines go to
    ``progress``; an ``error`` line raises its typed error), ``"raw"`` a
    :class:`Reply` with the status, headers and whole body. ``body`` (not
    ``None``) is sent as JSON, else ``raw_body`` with ``content_type``.
    """

    __slots__ = ("kind", "method", "path", "query", "body", "raw_body", "content_type", "accept", "progress")

    def __init__(self, kind: str, method: str, path: str, query: "Query" = None, body: Any = None,
                 raw_body: Optional[bytes] = None, content_type: str = "", accept: str = "",
                 progress: "Optional[Progress]" = None) -> None:
        self.kind = kind
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.raw_body = raw_body
        self.content_type = content_type
        self.accept = accept or (NDJSON if kind == "long" else JSON if kind == "json" else "")
        self.progress = progress

    def __repr__(self) -> str:
        return f"Call({self.kind} {self.method} {self.path})"


class Sleep:
    """A pause of ``seconds`` an operation asks for (between retries of a delete)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Reply:
    """A whole answer of a ``"raw"`` :class:`Call`: ``status``, ``headers`` (lower-case names), ``body`` bytes."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self, what: str) -> Any:
        """The body decoded as JSON (``None`` when empty); ProtocolError names ``what`` when it is not JSON."""
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise ProtocolError("protocol", self.status, f"{what}: bad JSON answer: {e}") from e


def J(method: str, path: str, query: "Query" = None, body: Any = None) -> Call:
    """A JSON call: ``body`` (not ``None``) sent as JSON; the answer decoded."""
    return Call("json", method, path, query, body)


def L(method: str, path: str, query: "Query" = None, body: Any = None, progress: "Optional[Progress]" = None,
      raw_body: Optional[bytes] = None, content_type: str = "") -> Call:
    """A long operation (NDJSON): the ``complete`` line's data is the answer."""
    return Call("long", method, path, query, body, raw_body, content_type, progress=progress)


def R(method: str, path: str, query: "Query" = None, raw_body: Optional[bytes] = None, content_type: str = "",
      accept: str = "") -> Call:
    """A raw call: the answer is a :class:`Reply` (the whole body read)."""
    return Call("raw", method, path, query, None, raw_body, content_type, accept)


class LongReader:
    """Folds the lines of a long operation's NDJSON stream into its answer (sync and async alike)."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.done = False
        self.value: Any = None

    def feed(self, line: Dict[str, Any]) -> bool:
        """Take one line; True once the ``complete`` line came. An ``error`` line raises its typed error."""
        t = line.get("type")
        if t == "info":
            if self.call.progress is not None:
                d = line.get("data")
                self.call.progress(d if isinstance(d, str) else json.dumps(d))
        elif t == "complete":
            self.done, self.value = True, line.get("data")
        elif t == "error":
            raise error_for(line.get("code"), 0, str(line.get("error") or ""))
        return self.done

    def end(self) -> Any:
        """The answer at the end of the stream; ProtocolError when no ``complete`` line came."""
        if not self.done:
            raise ProtocolError("protocol", 0, f"{self.call.method} {self.call.path}: stream ended without a "
                                               "complete or error line")
        return self.value


def parse_line(raw: bytes) -> Optional[Dict[str, Any]]:
    """One NDJSON line decoded: an object, or ``None`` for a blank line or a non-object value.

    Raises ProtocolError for a line that is not JSON."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise ProtocolError("protocol", 0, f"bad NDJSON line {raw[:200]!r}: {e}") from e
    return obj if isinstance(obj, dict) else None


def encode_body(call: Call) -> Tuple[Optional[bytes], Dict[str, str]]:
    """The bytes and content headers of a call's body (``None``: no body)."""
    headers: Dict[str, str] = {}
    data: Optional[bytes] = None
    if call.body is not None:
        data = json.dumps(call.body, separators=(",", ":")).encode()
        headers["Content-Type"] = JSON
    elif call.raw_body is not None:
        data = call.raw_body
        if call.content_type:
            headers["Content-Type"] = call.content_type
    if call.accept:
        headers["Accept"] = call.accept
    return data, headers


def check_length(call: Call, headers: Dict[str, str], body: bytes) -> None:
    """Raise ConnectionFailed when a body is shorter or longer than its ``Content-Length``."""
    want = headers.get("content-length")
    if want is not None and want.isdigit() and int(want) != len(body):
        raise ConnectionFailed("connection_failed", 0,
                               f"{call.method} {call.path}: {len(body)} of {want} bytes (answer cut)")


class UnixHTTPConnection(http.client.HTTPConnection):
    """An :class:`http.client.HTTPConnection` over an AF_UNIX stream socket."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if self.timeout is not None:
            s.settimeout(self.timeout)
        try:
            s.connect(self.socket_path)
        except OSError:
            s.close()
            raise
        self.sock = s


def seg(value: str) -> str:
    """Escape one path segment."""
    return quote(value, safe="")


class Transport:
    """Sends requests to sbxd; one connection per request (streams may stay open)."""

    def __init__(self, socket_path: Optional[str], url: Optional[str], api_key: Optional[str],
                 timeout: Optional[float]) -> None:
        self.socket_path = socket_path
        self.api_key = api_key or ""
        self.timeout = timeout
        self.url = url
        self._scheme = "http"
        self._host = ""
        self._port: Optional[int] = None
        self._prefix = ""
        if url:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"sbx URL {url!r}: want http://host:port")
            self._scheme = u.scheme
            self._host = u.hostname
            self._port = u.port
            self._prefix = u.path.rstrip("/")

    def _conn(self) -> http.client.HTTPConnection:
        if self.url:
            if self._scheme == "https":
                return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout)
            return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        assert self.socket_path
        return UnixHTTPConnection(self.socket_path, timeout=self.timeout)

    def where(self) -> str:
        return self.url or f"unix:{self.socket_path}"

    def target(self, path: str, query: Query = None) -> str:
        """The request target of ``path`` and ``query`` (with the URL's path prefix)."""
        target = self._prefix + path
        if query:
            target += "?" + urlencode(list(query))
        return target

    def request(self, method: str, path: str, query: Query = None, body: Any = None,
                content_type: str = "", accept: str = "", raw_body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None, data: Optional[bytes] = None,
                ) -> http.client.HTTPResponse:
        """Send a request; a status >= 300 raises the typed error. Returns the open response.

        ``body`` (not ``None``) is sent as JSON; ``raw_body`` as is with
        ``content_type``; or ``data`` with ``headers`` already encoded
        (:func:`encode_body`).
        """
        target = self.target(path, query)
        if headers is None:
            data, headers = encode_body(Call("raw", method, path, query, body, raw_body, content_type, accept))
        headers = dict(headers)
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        conn = self._conn()
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise ConnectionFailed("connection_failed", 0, f"sbxd at {self.where()}: {e}") from e
        # The response reads through its own reference to the socket (as
        # urllib does): drop the connection's, so that closing the response
        # closes the socket.
        if conn.sock is not None:
            conn.sock.close()
            conn.sock = None
        if resp.status >= 300:
            try:
                payload = resp.read(1 << 20)
            except (OSError, http.client.HTTPException):
                payload = b""
            finally:
                resp.close()
            raise decode_error(resp.status, payload)
        return resp

    def websocket(self, path: str, query: Query = None) -> "WebSocket":
        """Open a WebSocket at ``path`` (sbxd's terminal routes); a refusal raises its typed error."""
        target = self._prefix + path
        if query:
            target += "?" + urlencode(list(query))
        headers: Dict[str, str] = {}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        sock = connect_socket(None if self.url else self.socket_path, self._scheme, self._host, self._port, self.timeout)
        host = "sbxd" if not self.url else (self._host if self._port is None else f"{self._host}:{self._port}")
        ws = handshake(sock, host, target, headers, decode_error)
        sock.settimeout(None)  # a terminal may be silent for as long as it likes
        return ws

    def perform(self, call: Call) -> Any:
        """Send one :class:`Call` and return what its ``kind`` asks for (see :class:`Call`)."""
        data, headers = encode_body(call)
        resp = self.request(call.method, call.path, call.query, headers=headers, data=data)
        try:
            if call.kind == "long":
                reader = LongReader(call)
                for line in iter_lines(resp):
                    if reader.feed(line):
                        break
                return reader.end()
            try:
                payload = resp.read()
            except (OSError, http.client.HTTPException) as e:
                raise ConnectionFailed("connection_failed", 0, f"reading {call.method} {call.path}: {e}") from e
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            check_length(call, hdrs, payload)
            reply = Reply(resp.status, hdrs, payload)
            return reply if call.kind == "raw" else reply.json(f"{call.method} {call.path}")
        finally:
            resp.close()

    def run(self, op: Any) -> Any:
        """Drive an operation (a generator of :class:`Call` and :class:`Sleep`) to its return value."""
        return drive_sync(self, op)


def drive_sync(t: "Transport", op: Any) -> Any:
    """Run the generator ``op`` with blocking I/O on ``t``; errors of a request are thrown into it."""
    try:
        eff = next(op)
        while True:
            try:
                if isinstance(eff, Sleep):
                    time.sleep(eff.seconds)
                    res: Any = None
                else:
                    res = t.perform(eff)
            except Exception as e:  # noqa: BLE001 - handed to the operation, which may catch it
                eff = op.throw(e)
            else:
                eff = op.send(res)
    except StopIteration as stop:
        return stop.value
    finally:
        op.close()


def iter_lines(resp: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    """Yield the JSON objects of an NDJSON answer, one a line."""
    while True:
        try:
            raw = resp.readline()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("connection_failed", 0, f"stream cut: {e}") from e
        if not raw:
            return
        obj = parse_line(raw)
        if obj is not None:
            yield obj


def decode_error(status: int, payload: bytes) -> SbxError:
    """Turn an error answer into its typed error."""
    try:
        obj = json.loads(payload)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and err.get("code"):
            return error_for(str(err.get("code")), status, str(err.get("message") or ""),
                             str(err.get("request_id") or ""))
    except ValueError:
        pass
    return error_for(None, status, payload.decode("utf-8", "replace").strip())


def labels_query(labels: Optional[Dict[str, str]]) -> List[Tuple[str, str]]:
    """``label=k=v`` query pairs for a label selector."""
    return [("label", f"{k}={v}") for k, v in (labels or {}).items()]


BodyLike = Union[bytes, bytearray, str]


class op:
    """Marks a method written as an operation (a generator of :class:`Call`).

    Called on an object, it runs through the object's ``_drive``: the sync
    classes answer the value, the async ones a coroutine of it. ``.gen`` of
    the bound method is the bare generator, for operations built of others
    (``yield from self.update.gen(name=n)``).
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, cls: Any = None) -> Any:
        if obj is None:
            return self
        fn = self.fn

        @functools.wraps(fn)
        def bound(*args: Any, **kwargs: Any) -> Any:
            return obj._drive(fn(obj, *args, **kwargs))

        bound.gen = functools.partial(fn, obj)  # type: ignore[attr-defined]
        return bound
