"""Terminals: a command on a pseudo-terminal in a sandbox, over sbxd's
terminal WebSocket (``GET .../exec?tty=1``; ``GET .../processes/{pid}/tty``
attaches again). See :mod:`sbx._websocket` for the WebSocket client."""

from __future__ import annotations

import json
import threading
from typing import Optional

from ._websocket import OP_BINARY, OP_TEXT, WebSocket
from .errors import ConnectionFailed, ProtocolError, SbxError, error_for


class Pty:
    """A command on a pseudo-terminal: :meth:`write` types on it (Ctrl-C is
    ``b"\\x03"``), :meth:`read` returns what it shows (one stream, with the
    echo), :meth:`wait` its exit code. :meth:`close` kills the command,
    unless it was kept or attached: then it only detaches.

    :meth:`write`, :meth:`resize` and :meth:`signal` may be called from
    another thread than :meth:`read` and :meth:`wait`. A context manager
    closes it.
    """

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws
        self._lock = threading.Lock()
        self._exit: Optional[int] = None
        self._err: Optional[SbxError] = None
        self._ended = False
        first = self._next()
        if first is None or first.get("type") != "start":
            ws.close()
            if self._err is not None:
                raise self._err
            raise ProtocolError("protocol", 0, f"terminal: first message {first!r}, want start")
        #: The command's process id in the sandbox (attach again by it).
        self.pid = int(first.get("pid") or 0)
        self._pending: list = []

    def _next(self):
        """The next control message (dict), bytes, or None at the end."""
        while True:
            if self._ended:
                return None
            try:
                m = self._ws.recv()
            except SbxError as e:
                self._end(e)
                return None
            if m is None:
                self._end(ConnectionFailed("connection_failed", 0, "terminal: the connection ended without an exit"))
                return None
            op, data = m
            if op == OP_BINARY:
                return data
            if op != OP_TEXT:
                continue
            try:
                msg = json.loads(data)
            except ValueError:
                continue
            t = msg.get("type")
            if t == "exit":
                self._exit = int(msg.get("exit_code", -1))
                self._ended = True
                self._ws.close()
                return None
            if t == "error":
                self._end(error_for(msg.get("code") or "internal", 0, str(msg.get("error") or "")))
                return None
            if t == "start":
                return msg

    def _end(self, err: SbxError) -> None:
        if self._exit is None and self._err is None:
            self._err = err
        self._ended = True
        if not self._ws.closed:
            self._ws.close()

    def read(self) -> bytes:
        """The next bytes the terminal shows; ``b""`` once it ended."""
        if self._pending:
            return self._pending.pop(0)
        while True:
            m = self._next()
            if m is None:
                return b""
            if isinstance(m, bytes):
                return m

    def write(self, data) -> None:
        """Type ``data`` (bytes, or str sent as UTF-8) on the terminal."""
        self._ws.send(OP_BINARY, data.encode() if isinstance(data, str) else bytes(data))

    def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size in cells (1..1000 each)."""
        self._ws.send(OP_TEXT, json.dumps({"type": "resize", "rows": rows, "cols": cols}).encode())

    def signal(self, signal: int) -> None:
        """Send a signal (1-64) to the command's process group."""
        self._ws.send(OP_TEXT, json.dumps({"type": "signal", "signal": signal}).encode())

    def wait(self) -> int:
        """The command's exit code (124 after its timeout, 128+N when signal N killed it).

        Output not read yet is kept for :meth:`read`. Raises the typed error
        sbxd sent (a restore ends the command: :class:`Conflict` naming it),
        or :class:`ConnectionFailed` when the connection ended without an exit.
        """
        while True:
            m = self._next()
            if m is None:
                break
            if isinstance(m, bytes):
                self._pending.append(m)
        if self._exit is not None:
            return self._exit
        assert self._err is not None
        raise self._err

    def close(self) -> None:
        """Close the WebSocket: the command is killed unless kept or attached (then it only detaches)."""
        if not self._ws.closed:
            self._ws.close()
        self._ended = True
        if self._exit is None and self._err is None:
            self._err = ConnectionFailed("connection_failed", 0, "terminal: closed by the client")

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
