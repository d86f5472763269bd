"""sbx for asyncio: :class:`AsyncRuntime` and :class:`AsyncSandbox`, the same SDK with ``await``.

::

    from sbx.aio import AsyncSandbox

    async with AsyncSandbox.create(network={"internet": False}) as sb:   # deleted on exit
        r = await sb.exec("python3 --version")
        print(r.exit_code, r.stdout)

Every operation is the one of the sync SDK (:mod:`sbx.client`), written
once as a generator of requests; here it is driven by an HTTP/1.1 client on
asyncio streams (the standard library only): the Unix socket, TCP, or TLS
for ``https`` URLs; one connection a request (``Connection: close``),
fixed-length or chunked bodies, NDJSON read line by line. The types, the
typed errors (:mod:`sbx.errors`) and the undo helpers are shared: each
helper answers a coroutine when given an :class:`AsyncSandbox`.

Not here: pseudo-terminals (``pty``/``attach_pty``) and the streaming copy
of a delivery archive into a file (``write_delivery_archive``); use the
sync :class:`sbx.Sandbox`/:class:`sbx.Runtime` for those.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any, AsyncIterator, Awaitable, Dict, List, Mapping, Optional, Tuple, Union
from urllib.parse import urlencode, urlsplit

from . import undo as _undo
from ._transport import (NDJSON, Call, LongReader, Reply, Sleep, check_length, decode_error, encode_body,
                         parse_line)
from .client import (Classification, Command, ExecFold, RuntimeOps, SandboxOps, resolve_endpoint)
from .errors import ConnectionFailed, ProtocolError, SandboxNotFound
from .types import ExecEvent, ExecResult

__all__ = ["AsyncRuntime", "AsyncClient", "AsyncSandbox", "AsyncExecStream", "AsyncTransport",
           "try_in_copy", "checkpoint_for", "guarded", "remember", "go_back_to", "chain"]

#: Longest status line or header line accepted, in bytes.
MAX_LINE = 64 << 10
#: Most bytes of an error answer read.
MAX_ERROR = 1 << 20


class AsyncResponse:
    """An HTTP/1.1 response being read: ``status``, ``headers`` (lower-case names), and the body.

    The body is read with :meth:`read` (whole) or :meth:`readline`; a
    ``Transfer-Encoding: chunked`` body is decoded, a ``Content-Length`` one
    is read to its length, any other to the end of the connection.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int,
                 headers: Dict[str, str], timeout: Optional[float], what: str) -> None:
        self.status = status
        self.headers = headers
        self._r = reader
        self._w = writer
        self._timeout = timeout
        self._what = what
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        cl = headers.get("content-length")
        self._left: Optional[int] = int(cl) if cl is not None and cl.isdigit() and not self._chunked else None
        self._chunk_left = 0
        self._eof = status in (204, 304)   # no body, whatever the headers say (RFC 9112 6.3)
        self._buf = b""

    async def _io(self, aw: Awaitable[Any]) -> Any:
        try:
            return await asyncio.wait_for(aw, self._timeout)
        except asyncio.TimeoutError as e:
            raise ConnectionFailed("connection_failed", 0, f"{self._what}: no answer within {self._timeout} s") from e
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            raise ConnectionFailed("connection_failed", 0, f"{self._what}: stream cut: {e}") from e

    async def _chunk(self) -> bytes:
        """The next piece of the body (``b""`` at its end)."""
        if self._eof:
            return b""
        if self._chunked:
            if self._chunk_left == 0:
                size_line = await self._io(self._r.readuntil(b"\r\n"))
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError as e:
                    raise ProtocolError("protocol", 0, f"{self._what}: bad chunk size {size_line[:40]!r}") from e
                if size == 0:
                    while (await self._io(self._r.readuntil(b"\r\n"))) != b"\r\n":
                        pass  # trailers
                    self._eof = True
                    return b""
                self._chunk_left = size
            data = await self._io(self._r.read(min(self._chunk_left, 1 << 16)))
            if not data:
                raise ConnectionFailed("connection_failed", 0, f"{self._what}: stream cut inside a chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await self._io(self._r.readexactly(2))
            return data
        if self._left is not None:
            if self._left == 0:
                self._eof = True
                return b""
            data = await self._io(self._r.read(min(self._left, 1 << 16)))
            if not data:
                self._eof = True   # short: check_length tells
                return b""
            self._left -= len(data)
            return data
        data = await self._io(self._r.read(1 << 16))
        if not data:
            self._eof = True
        return data

    async def read(self, limit: Optional[int] = None) -> bytes:
        """The rest of the body (at most ``limit`` bytes when given)."""
        parts = [self._buf]
        n = len(self._buf)
        self._buf = b""
        while limit is None or n < limit:
            b = await self._chunk()
            if not b:
                break
            parts.append(b)
            n += len(b)
        data = b"".join(parts)
        if limit is not None and len(data) > limit:
            self._buf, data = data[limit:], data[:limit]
        return data

    async def readline(self) -> bytes:
        """The next line of the body with its ``\\n`` (the last may lack it); ``b""`` at the end."""
        if b"\n" not in self._buf:
            parts = [self._buf]        # joined once: a long line costs its length, not its square
            while True:
                b = await self._chunk()
                if not b:
                    self._buf = b""
                    return b"".join(parts)
                parts.append(b)
                if b"\n" in b:
                    break
            self._buf = b"".join(parts)
        i = self._buf.index(b"\n") + 1
        line, self._buf = self._buf[:i], self._buf[i:]
        return line

    async def lines(self) -> AsyncIterator[Dict[str, Any]]:
        """The JSON objects of an NDJSON body, one a line."""
        while True:
            raw = await self.readline()
            if not raw:
                return
            obj = parse_line(raw)
            if obj is not None:
                yield obj

    def close(self) -> None:
        """Close the connection (a streamed exec's process is then killed by sbxd)."""
        self._eof = True
        self._w.close()


class AsyncTransport:
    """Sends requests to sbxd with asyncio: one connection a request (streams may stay open).

    ``timeout`` (seconds) bounds connecting and each read; ``None`` waits
    as long as sbxd takes.
    """

    def __init__(self, socket_path: Optional[str], url: Optional[str], api_key: Optional[str],
                 timeout: Optional[float]) -> None:
        self.socket_path = socket_path
        self.url = url
        self.api_key = api_key or ""
        self.timeout = timeout
        self._scheme, self._host, self._port, self._prefix = "http", "", 80, ""
        if url:
            u = urlsplit(url)
            if u.scheme not in ("http", "https") or not u.hostname:
                raise ValueError(f"sbx URL {url!r}: want http://host:port")
            self._scheme, self._host = u.scheme, u.hostname
            self._port = u.port or (443 if u.scheme == "https" else 80)
            self._prefix = u.path.rstrip("/")

    def where(self) -> str:
        """Where sbxd is: its URL or ``unix:<socket>``."""
        return self.url or f"unix:{self.socket_path}"

    async def _connect(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.url:
            ctx = ssl.create_default_context() if self._scheme == "https" else None
            conn = asyncio.open_connection(self._host, self._port, ssl=ctx, limit=MAX_LINE)
        else:
            assert self.socket_path
            conn = asyncio.open_unix_connection(self.socket_path, limit=MAX_LINE)
        return await asyncio.wait_for(conn, self.timeout)

    async def open(self, call: Call) -> AsyncResponse:
        """Send ``call`` and read the answer's head; a status >= 300 raises the typed error."""
        target = self._prefix + call.path
        if call.query:
            target += "?" + urlencode(list(call.query))
        data, headers = encode_body(call)
        what = f"{call.method} {call.path}"
        host = "sbxd" if not self.url else (self._host if self._port in (80, 443) else f"{self._host}:{self._port}")
        head = [f"{call.method} {target} HTTP/1.1", f"Host: {host}", "Connection: close",
                "User-Agent: sbx-python-aio"]
        if self.api_key:
            head.append("Authorization: Bearer " + self.api_key)
        for k, v in headers.items():
            head.append(f"{k}: {v}")
        if data is not None or call.method in ("POST", "PUT", "PATCH"):
            head.append(f"Content-Length: {len(data or b'')}")
        for line in head:
            if "\r" in line or "\n" in line:   # as http.client: no header smuggled in a value
                raise ValueError(f"{what}: CR or LF in request line or header {line.split(':', 1)[0]!r}")
        try:
            reader, writer = await self._connect()
        except asyncio.TimeoutError as e:
            raise ConnectionFailed("connection_failed", 0, f"sbxd at {self.where()}: connect timed out") from e
        except OSError as e:
            raise ConnectionFailed("connection_failed", 0, f"sbxd at {self.where()}: {e}") from e
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (data or b""))
            await asyncio.wait_for(writer.drain(), self.timeout)
            while True:
                status, hdrs = await self._head(reader, what)
                if status >= 200 or status == 101:
                    break   # 1xx informational heads are skipped
        except asyncio.TimeoutError as e:
            writer.close()
            raise ConnectionFailed("connection_failed", 0, f"{what}: no answer within {self.timeout} s") from e
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            writer.close()
            raise ConnectionFailed("connection_failed", 0, f"sbxd at {self.where()}: {what}: {e}") from e
        except BaseException:
            writer.close()
            raise
        resp = AsyncResponse(reader, writer, status, hdrs, self.timeout, what)
        if status >= 300:
            try:
                payload = await resp.read(MAX_ERROR)
            except ConnectionFailed:
                payload = b""
            finally:
                resp.close()
            raise decode_error(status, payload)
        return resp

    async def _head(self, reader: asyncio.StreamReader, what: str) -> Tuple[int, Dict[str, str]]:
        line = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.timeout)
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError("protocol", 0, f"{what}: bad status line {line[:80]!r}")
        hdrs: Dict[str, str] = {}
        while True:
            h = await asyncio.wait_for(reader.readuntil(b"\r\n"), self.timeout)
            if h == b"\r\n":
                break
            k, sep, v = h.decode("latin-1").partition(":")
            if not sep:
                raise ProtocolError("protocol", 0, f"{what}: bad header line {h[:80]!r}")
            k = k.strip().lower()
            hdrs[k] = (hdrs[k] + ", " + v.strip()) if k in hdrs else v.strip()
        return int(parts[1]), hdrs

    async def perform(self, call: Call) -> Any:
        """Send one :class:`~sbx._transport.Call` and return what its ``kind`` asks for."""
        resp = await self.open(call)
        try:
            if call.kind == "long":
                reader = LongReader(call)
                async for line in resp.lines():
                    if reader.feed(line):
                        break
                return reader.end()
            payload = await resp.read()
        finally:
            resp.close()
        check_length(call, resp.headers, payload)
        reply = Reply(resp.status, resp.headers, payload)
        return reply if call.kind == "raw" else reply.json(f"{call.method} {call.path}")


async def drive_async(t: AsyncTransport, op: Any) -> Any:
    """Run the generator ``op`` with asyncio I/O on ``t``; errors of a request are thrown into it."""
    try:
        eff = next(op)
        while True:
            try:
                if isinstance(eff, Sleep):
                    await asyncio.sleep(eff.seconds)
                    res: Any = None
                else:
                    res = await t.perform(eff)
            except Exception as e:  # noqa: BLE001 - handed to the operation, which may catch it
                eff = op.throw(e)
            else:
                eff = op.send(res)
    except StopIteration as stop:
        return stop.value
    finally:
        op.close()


class AsyncRuntime(RuntimeOps):
    """A client of one sbxd for asyncio: :class:`sbx.Runtime`'s methods, each a coroutine.

    ``AsyncRuntime()`` reads the environment as ``Runtime()`` does
    (``$SBX_URL`` + ``$SBX_API_KEY``, else ``$SBX_SOCKET`` or the default
    socket); ``url``/``api_key`` or ``socket`` choose. ``timeout``
    (seconds) bounds connecting and each read. ``runtime.sandboxes`` and
    ``runtime.snapshots`` group the calls as in the sync client. Usable
    with ``async with``; it keeps no connection between requests.
    """

    def __init__(self, socket: Optional[str] = None, url: Optional[str] = None,
                 api_key: Optional[str] = None, timeout: Optional[float] = None) -> None:
        self._t = AsyncTransport(*resolve_endpoint(socket, url, api_key), timeout)
        self.sandbox_class = AsyncSandbox
        self.closed = False
        self._init_namespaces()

    def _drive(self, gen: Any) -> Any:
        return drive_async(self._t, gen)

    def _creating(self, made: Any) -> "_Creating":
        return _Creating(made)

    async def aclose(self) -> None:
        """Mark the client closed (it keeps no connection open between requests)."""
        self.closed = True

    async def __aenter__(self) -> "AsyncRuntime":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


#: Another name of :class:`AsyncRuntime`, as ``sbx.Client`` is of ``sbx.Runtime``.
AsyncClient = AsyncRuntime


class _Creating:
    """``AsyncSandbox.create(...)``: await it for the sandbox, or ``async with`` it to delete the sandbox at the end."""

    def __init__(self, coro: Awaitable["AsyncSandbox"]) -> None:
        self._coro = coro
        self._sb: Optional[AsyncSandbox] = None

    def __await__(self) -> Any:
        return self._coro.__await__()

    async def __aenter__(self) -> "AsyncSandbox":
        self._sb = await self._coro
        return self._sb

    async def __aexit__(self, *exc: Any) -> None:
        if self._sb is not None:
            await self._sb.__aexit__(*exc)


class AsyncExecStream(ExecFold):
    """A running command whose output streams as it comes (asyncio).

    ``async for ev in stream`` gives :class:`~sbx.types.ExecEvent` values
    (``start``, ``stdout``, ``stderr``, then ``exit``); an ``error`` line
    raises its typed error. ``await stream.wait()`` drains it and returns
    the :class:`~sbx.types.ExecResult`. Closing it early (or leaving an
    ``async with`` block) kills the process.
    """

    def __init__(self, resp: AsyncResponse, b64: bool) -> None:
        super().__init__(b64)
        self._resp = resp
        self._lines = resp.lines()
        self._done = False

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> ExecEvent:
        if self._done:
            raise StopAsyncIteration
        try:
            ev = self.take(await self._lines.__anext__())
        except StopAsyncIteration:
            self.close()
            raise ProtocolError("protocol", 0, "exec stream ended without an exit line") from None
        except BaseException:
            self.close()
            raise
        if ev.type == "exit":
            self.close()
        return ev

    async def wait(self) -> ExecResult:
        """Read to the end; return the output gathered (of what was not yet iterated too) and the exit."""
        async for _ in self:
            pass
        return self.result()

    def close(self) -> None:
        """End the stream (kills the process if it still runs)."""
        self._done = True
        self._resp.close()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


class AsyncSandbox(SandboxOps):
    """A handle on one sandbox for asyncio: :class:`sbx.Sandbox`'s methods, each a coroutine.

    ``await AsyncSandbox.create(**opts)`` makes one through the default
    client (``AsyncRuntime()`` from the environment); ``async with
    AsyncSandbox.create() as sb:`` deletes it at the end.
    ``await AsyncSandbox.connect(name_or_id)`` gets one. ``sb.network``'s
    methods are coroutines too. No ``pty`` here (use :class:`sbx.Sandbox`).
    """

    client: AsyncRuntime

    @classmethod
    def create(cls, name: Optional[str] = None, *, runtime: Optional[AsyncRuntime] = None,
               **opts: Any) -> _Creating:
        """A new sandbox, running, through ``runtime`` (default: ``AsyncRuntime()`` from the environment).

        Await it, or ``async with`` it (the sandbox is deleted at the end).
        Keyword arguments are those of :meth:`sbx.Runtime.create`. Raises
        InvalidArgument, NameTaken, ImageNotFound, SnapshotNotFound,
        ConnectionFailed (no sbxd).
        """
        return _Creating((runtime or AsyncRuntime()).create(name, **opts))

    @classmethod
    async def connect(cls, name_or_id: str, *, runtime: Optional[AsyncRuntime] = None) -> "AsyncSandbox":
        """An existing sandbox by name or id (default client from the environment). Raises SandboxNotFound."""
        return await (runtime or AsyncRuntime()).get(name_or_id)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.delete()
        except SandboxNotFound:
            pass

    async def exec_stream(self, cmd: Command, *, cwd: Optional[str] = None,
                          env: Optional[Mapping[str, str]] = None, timeout_ms: Optional[int] = None,
                          stdin: Union[str, bytes, None] = None, encoding: Optional[str] = None,
                          undo: Optional[str] = None, rollback_on_failure: Optional[bool] = None) -> AsyncExecStream:
        """Start a command and stream its output: ``async for`` the :class:`AsyncExecStream` for events.

        Arguments as :meth:`sbx.Sandbox.exec`. Raises what exec raises.
        """
        body = self._exec_body(cmd, cwd, env, timeout_ms, stdin, encoding, undo, rollback_on_failure)
        resp = await self.client._t.open(Call("raw", "POST", self._p("exec"), None, body, accept=NDJSON))
        return AsyncExecStream(resp, encoding == "base64")

    async def attach(self, pid: int, offset: int = 0, encoding: Optional[str] = None) -> AsyncExecStream:
        """Stream the output of a process started by exec, from byte ``offset``, until it exits.

        Closing the stream only detaches. Raises ProcessNotFound.
        """
        q: List[Tuple[str, str]] = [("offset", str(offset))]
        if encoding:
            q.append(("encoding", encoding))
        resp = await self.client._t.open(Call("raw", "GET", self._p("processes", str(pid), "output"), q,
                                              accept=NDJSON))
        return AsyncExecStream(resp, encoding == "base64")


# The undo helpers take an AsyncSandbox as well as a Sandbox (they answer a
# coroutine for it); they are re-exported here so that an async program
# imports everything from sbx.aio.
try_in_copy = _undo.try_in_copy
guarded = _undo.guarded
remember = _undo.remember
go_back_to = _undo.go_back_to
chain = _undo.chain


def checkpoint_for(command: Command, client: Optional[AsyncRuntime] = None) -> Awaitable[Classification]:
    """The lightest undo that covers ``command``, as sbxd classifies it (``POST /v1/classify``); a coroutine.

    ``client`` defaults to ``AsyncRuntime()`` from the environment. Raises InvalidArgument.
    """
    return (client or AsyncRuntime()).classify(command)
