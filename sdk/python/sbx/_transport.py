"""HTTP over a Unix socket or TCP, with typed errors and NDJSON reading."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from ._websocket import WebSocket, connect_socket, handshake
from .errors import ConnectionFailed, ProtocolError, SbxError, error_for

NDJSON = "application/x-ndjson"
JSON = "application/json"

Query = Optional[Sequence[Tuple[str, str]]]
#: A progress callback of a long operation: gets each ``info`` line's text.
Progress = Callable[[str], None]


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

    def request(self, method: str, path: str, query: Query = None, body: Any = None,
                content_type: str = "", accept: str = "", raw_body: Optional[bytes] = None,
                ) -> http.client.HTTPResponse:
        """Send a request; a status >= 300 raises the typed error. Returns the open response.

        ``body`` (not ``None``) is sent as JSON; ``raw_body`` as is with ``content_type``.
        """
        target = self._prefix + path
        if query:
            target += "?" + urlencode(list(query))
        headers: Dict[str, str] = {}
        data: Optional[bytes] = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = JSON
        elif raw_body is not None:
            data = raw_body
            if content_type:
                headers["Content-Type"] = content_type
        if accept:
            headers["Accept"] = accept
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

    def json(self, method: str, path: str, query: Query = None, body: Any = None) -> Any:
        """Send ``body`` as JSON; return the decoded JSON answer (``None`` for an empty one)."""
        resp = self.request(method, path, query, body, accept=JSON)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("connection_failed", 0, f"reading {method} {path}: {e}") from e
        finally:
            resp.close()
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise ProtocolError("protocol", resp.status, f"{method} {path}: bad JSON answer: {e}") from e

    def long(self, method: str, path: str, query: Query = None, body: Any = None,
             progress: Optional[Progress] = None, raw_body: Optional[bytes] = None,
             content_type: str = "") -> Any:
        """Run a long operation (NDJSON): info lines go to ``progress``; returns ``complete``'s data.

        An ``error`` line raises its typed error (status 0).
        """
        resp = self.request(method, path, query, body, accept=NDJSON, raw_body=raw_body,
                            content_type=content_type)
        try:
            for line in iter_lines(resp):
                t = line.get("type")
                if t == "info":
                    if progress is not None:
                        d = line.get("data")
                        progress(d if isinstance(d, str) else json.dumps(d))
                elif t == "complete":
                    return line.get("data")
                elif t == "error":
                    raise error_for(line.get("code"), 0, str(line.get("error") or ""))
            raise ProtocolError("protocol", 0, f"{method} {path}: stream ended without a complete or error line")
        finally:
            resp.close()


def iter_lines(resp: http.client.HTTPResponse) -> Iterator[Dict[str, Any]]:
    """Yield the JSON objects of an NDJSON answer, one a line."""
    while True:
        try:
            raw = resp.readline()
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionFailed("connection_failed", 0, f"stream cut: {e}") from e
        if not raw:
            return
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = json.loads(raw)
        except ValueError as e:
            raise ProtocolError("protocol", 0, f"bad NDJSON line {raw[:200]!r}: {e}") from e
        if isinstance(obj, dict):
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
