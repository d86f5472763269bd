"""Unit tests of the minimal RFC 6455 client (sbx._websocket) and of Pty's
message handling, against a server side written here on a socketpair."""

import json
import socket
import struct
import threading
import unittest

from sbx import _websocket as wsm
from sbx._transport import decode_error
from sbx.errors import Conflict, InvalidArgument, ProtocolError
from sbx.pty import Pty


def server_frame(opcode, payload, fin=True):
    """A server's frame: unmasked (RFC 6455 5.1)."""
    head = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        head.append(n)
    elif n < 1 << 16:
        head.append(126)
        head += struct.pack("!H", n)
    else:
        head.append(127)
        head += struct.pack("!Q", n)
    return bytes(head) + payload


def read_client_frame(sock, buf):
    """Read one client frame from sock; returns (masked, opcode, payload)."""
    def need(n):
        while len(buf) < n:
            c = sock.recv(65536)
            if not c:
                raise EOFError
            buf.extend(c)
        out = bytes(buf[:n])
        del buf[:n]
        return out
    b0, b1 = need(2)
    n = b1 & 0x7F
    if n == 126:
        n = struct.unpack("!H", need(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", need(8))[0]
    masked = bool(b1 & 0x80)
    mask = need(4) if masked else b""
    data = need(n)
    if masked:
        data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
    return masked, b0 & 0x0F, data


class FramingTest(unittest.TestCase):
    def setUp(self):
        self.c, self.s = socket.socketpair()
        self.ws = wsm.WebSocket(self.c)
        self.buf = bytearray()

    def tearDown(self):
        self.c.close()
        self.s.close()

    def test_client_frames_are_masked_at_every_length(self):
        for n in (0, 1, 125, 126, 65535, 65536, 200000):
            payload = bytes(range(256)) * (n // 256) + bytes(range(n % 256))
            t = threading.Thread(target=self.ws.send, args=(wsm.OP_BINARY, payload))
            t.start()
            masked, op, data = read_client_frame(self.s, self.buf)
            t.join()
            self.assertTrue(masked, f"a client frame of {n} bytes is not masked")
            self.assertEqual(op, wsm.OP_BINARY)
            self.assertEqual(data, payload, f"{n} bytes")

    def test_fragments_are_reassembled_and_pings_answered(self):
        self.s.sendall(server_frame(wsm.OP_TEXT, b'{"a":', fin=False)
                       + server_frame(wsm.OP_PING, b"p1")
                       + server_frame(wsm.OP_CONT, b"1", fin=False)
                       + server_frame(wsm.OP_CONT, b"}", fin=True)
                       + server_frame(wsm.OP_BINARY, b"x" * 70000))
        self.assertEqual(self.ws.recv(), (wsm.OP_TEXT, b'{"a":1}'))
        masked, op, data = read_client_frame(self.s, self.buf)
        self.assertEqual((masked, op, data), (True, wsm.OP_PONG, b"p1"))
        self.assertEqual(self.ws.recv(), (wsm.OP_BINARY, b"x" * 70000))

    def test_close_is_answered(self):
        self.s.sendall(server_frame(wsm.OP_CLOSE, struct.pack("!H", 1000) + b"bye"))
        self.assertIsNone(self.ws.recv())
        masked, op, data = read_client_frame(self.s, self.buf)
        self.assertEqual((masked, op, data), (True, wsm.OP_CLOSE, struct.pack("!H", 1000)))
        self.assertTrue(self.ws.closed)

    def test_bad_frames_are_protocol_errors(self):
        for raw in (bytes([0x80 | 0x40 | wsm.OP_TEXT, 0]),  # RSV1 without an extension
                    server_frame(wsm.OP_CONT, b"x"),  # continuation without a message
                    server_frame(0x3, b"")):  # reserved opcode
            c, s = socket.socketpair()
            try:
                s.sendall(raw)
                with self.assertRaises(ProtocolError):
                    wsm.WebSocket(c).recv()
            finally:
                c.close()
                s.close()


class HandshakeTest(unittest.TestCase):
    def serve(self, answer):
        """Run the handshake against a server that answers answer(key)."""
        c, s = socket.socketpair()
        self.addCleanup(c.close)
        self.addCleanup(s.close)
        got = {}

        def server():
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            req = buf.decode()
            got["req"] = req
            key = [ln.split(":", 1)[1].strip() for ln in req.split("\r\n") if ln.lower().startswith("sec-websocket-key:")][0]
            s.sendall(answer(key))
        t = threading.Thread(target=server)
        t.start()
        try:
            return wsm.handshake(c, "sbxd", "/v1/x?tty=1", {"Authorization": "Bearer k"}, decode_error), got, s
        finally:
            t.join()

    def test_accept_checked(self):
        ws, got, s = self.serve(lambda key: (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {wsm.accept_key(key)}\r\n\r\n").encode() + server_frame(wsm.OP_TEXT, b"early"))
        self.assertIn("GET /v1/x?tty=1 HTTP/1.1\r\n", got["req"])
        self.assertIn("Authorization: Bearer k\r\n", got["req"])
        self.assertEqual(ws.recv(), (wsm.OP_TEXT, b"early"), "bytes after the handshake answer are the first frame")
        s.close()
        with self.assertRaises(ProtocolError):
            self.serve(lambda key: b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: wrong\r\n\r\n")

    def test_refusal_is_typed(self):
        body = json.dumps({"error": {"code": "conflict", "message": "process 5 already has a terminal attached"}}).encode()
        with self.assertRaises(Conflict) as cm:
            self.serve(lambda key: b"HTTP/1.1 409 Conflict\r\nContent-Type: application/json\r\nContent-Length: "
                       + str(len(body)).encode() + b"\r\n\r\n" + body)
        self.assertIn("already has a terminal attached", str(cm.exception))


class PtyMessagesTest(unittest.TestCase):
    def test_start_output_exit(self):
        c, s = socket.socketpair()
        s.sendall(server_frame(wsm.OP_TEXT, b'{"type":"start","pid":42}') + server_frame(wsm.OP_BINARY, b"hi\r\n")
                  + server_frame(wsm.OP_TEXT, b'{"type":"exit","exit_code":7,"duration_ms":3}')
                  + server_frame(wsm.OP_CLOSE, struct.pack("!H", 1000)))
        p = Pty(wsm.WebSocket(c))
        self.assertEqual(p.pid, 42)
        self.assertEqual(p.wait(), 7)
        self.assertEqual(p.read(), b"hi\r\n", "output not read before wait is kept")
        self.assertEqual(p.read(), b"")
        s.close()

    def test_error_is_typed(self):
        c, s = socket.socketpair()
        s.sendall(server_frame(wsm.OP_TEXT, b'{"type":"start","pid":42}')
                  + server_frame(wsm.OP_TEXT, b'{"type":"error","code":"conflict","error":"sandbox \\"a\\" was restored to checkpoint v1"}'))
        p = Pty(wsm.WebSocket(c))
        with self.assertRaises(Conflict) as cm:
            p.wait()
        self.assertIn("restored to checkpoint v1", str(cm.exception))
        s.close()

    def test_error_before_start(self):
        c, s = socket.socketpair()
        s.sendall(server_frame(wsm.OP_TEXT, b'{"type":"error","code":"invalid_argument","error":"tty: 0x0"}'))
        with self.assertRaises(InvalidArgument):
            Pty(wsm.WebSocket(c))
        s.close()


if __name__ == "__main__":
    unittest.main()
