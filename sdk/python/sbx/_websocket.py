"""A minimal RFC 6455 WebSocket client, for sbxd's terminal routes.

Why our own: the SDK has no third-party dependency, PyPI is not a given
where it runs, and Debian 12's python3-websockets (10.4) has no synchronous
client. A terminal needs little of RFC 6455: the opening handshake over a
socket the transport opens (Unix or TCP, TLS for https), masked client
frames, fragmented messages reassembled, ping answered by pong, and the
closing handshake. Extensions and subprotocols are not offered.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from typing import Dict, Optional, Tuple

from .errors import ConnectionFailed, ProtocolError, SbxError

#: The GUID of RFC 6455 section 1.3, for Sec-WebSocket-Accept.
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

#: Largest message accepted, in bytes (sbxd sends at most 32 KiB a message).
MAX_MESSAGE = 4 << 20


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept a server answers for ``key`` (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def encode_frame(opcode: int, payload: bytes, mask: Optional[bytes] = None, fin: bool = True) -> bytes:
    """One frame; a client's are masked (RFC 6455 5.3) with ``mask`` (4 random bytes by default)."""
    if mask is None:
        mask = os.urandom(4)
    head = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack("!H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack("!Q", n)
    head += mask
    return bytes(head) + _mask(payload, mask)


def _mask(data: bytes, mask: bytes) -> bytes:
    if not data:
        return b""
    # XOR with the key repeated, as one big integer: fast enough for terminals.
    k = (mask * (len(data) // 4 + 1))[: len(data)]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(len(data), "big")


class WebSocket:
    """A client WebSocket on a connected socket whose handshake is done.

    :meth:`send` may be called from another thread than :meth:`recv`.
    """

    def __init__(self, sock: socket.socket, buffered: bytes = b"") -> None:
        self.sock = sock
        self._buf = bytearray(buffered)
        self._send_lock = threading.Lock()
        self._close_sent = False
        self.closed = False

    def _read(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise ConnectionFailed("connection_failed", 0, "the WebSocket connection ended mid-frame")
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _frame(self) -> Tuple[bool, int, bytes]:
        b0, b1 = self._read(2)
        if b0 & 0x70:
            raise ProtocolError("protocol", 0, "WebSocket frame with reserved bits (no extension was agreed)")
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._read(8))[0]
        if n > MAX_MESSAGE:
            raise ProtocolError("protocol", 0, f"WebSocket frame of {n} bytes, over {MAX_MESSAGE}")
        mask = self._read(4) if b1 & 0x80 else None
        data = self._read(n)
        if mask:
            data = _mask(data, mask)
        return bool(b0 & 0x80), b0 & 0x0F, data

    def send(self, opcode: int, payload: bytes) -> None:
        """Send one message (unfragmented, masked)."""
        frame = encode_frame(opcode, payload)
        with self._send_lock:
            if self._close_sent:
                raise ConnectionFailed("connection_failed", 0, "the WebSocket is closed")
            if opcode == OP_CLOSE:
                self._close_sent = True
            try:
                self.sock.sendall(frame)
            except OSError as e:
                raise ConnectionFailed("connection_failed", 0, f"WebSocket send: {e}") from e

    def recv(self) -> Optional[Tuple[int, bytes]]:
        """The next text or binary message as (opcode, payload); None once closed.

        Pings are answered, fragments reassembled, a close is answered and ends it.
        """
        msg_op: Optional[int] = None
        parts = bytearray()
        while True:
            try:
                fin, op, data = self._frame()
            except OSError as e:
                self.closed = True
                raise ConnectionFailed("connection_failed", 0, f"WebSocket read: {e}") from e
            if op == OP_PING:
                try:
                    self.send(OP_PONG, data)
                except ConnectionFailed:
                    pass
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                self.closed = True
                try:
                    self.send(OP_CLOSE, data[:2])
                except ConnectionFailed:
                    pass
                self._shutdown()
                return None
            if op == OP_CONT:
                if msg_op is None:
                    raise ProtocolError("protocol", 0, "WebSocket continuation frame without a message")
            elif op in (OP_TEXT, OP_BINARY):
                if msg_op is not None:
                    raise ProtocolError("protocol", 0, "WebSocket message began inside another")
                msg_op = op
            else:
                raise ProtocolError("protocol", 0, f"WebSocket opcode {op:#x}")
            parts += data
            if len(parts) > MAX_MESSAGE:
                raise ProtocolError("protocol", 0, f"WebSocket message over {MAX_MESSAGE} bytes")
            if fin:
                return msg_op, bytes(parts)

    def close(self, code: int = 1000) -> None:
        """Start the closing handshake (normal closure) and close the socket."""
        try:
            self.send(OP_CLOSE, struct.pack("!H", code))
        except ConnectionFailed:
            pass
        self._shutdown()

    def _shutdown(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def handshake(sock: socket.socket, host: str, target: str, headers: Dict[str, str],
              decode_error) -> WebSocket:
    """Send the opening handshake for ``target`` and check the answer.

    A refusal (not 101) raises ``decode_error(status, body)``; a 101 whose
    Sec-WebSocket-Accept is wrong raises ProtocolError.
    """
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionFailed("connection_failed", 0, "sbxd closed the connection during the WebSocket handshake")
            buf += chunk
            if len(buf) > 1 << 16:
                raise ProtocolError("protocol", 0, "WebSocket handshake answer too long")
    except OSError as e:
        raise ConnectionFailed("connection_failed", 0, f"WebSocket handshake: {e}") from e
    head, rest = buf.split(b"\r\n\r\n", 1)
    status_line, *hdr_lines = head.decode("latin-1").split("\r\n")
    parts = status_line.split(" ", 2)
    status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    hdrs = {}
    for ln in hdr_lines:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    if status != 101:
        n = int(hdrs.get("content-length", "0") or 0)
        body = rest
        try:
            while len(body) < n:
                chunk = sock.recv(n - len(body))
                if not chunk:
                    break
                body += chunk
        except OSError:
            pass
        sock.close()
        err: SbxError = decode_error(status, body)
        raise err
    if hdrs.get("sec-websocket-accept") != accept_key(key):
        sock.close()
        raise ProtocolError("protocol", status, "WebSocket handshake: wrong Sec-WebSocket-Accept")
    return WebSocket(sock, rest)


def connect_socket(socket_path: Optional[str], scheme: str, host: str, port: Optional[int],
                   timeout: Optional[float]) -> socket.socket:
    """A connected stream socket to sbxd: its Unix socket, or TCP (TLS for https)."""
    try:
        if socket_path:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            s.connect(socket_path)
            return s
        s = socket.create_connection((host, port or (443 if scheme == "https" else 80)), timeout=timeout)
        if scheme == "https":
            s = ssl.create_default_context().wrap_socket(s, server_hostname=host)
        return s
    except OSError as e:
        raise ConnectionFailed("connection_failed", 0, f"sbxd: {e}") from e
