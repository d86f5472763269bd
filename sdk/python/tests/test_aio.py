"""sbx.aio against fake servers: the HTTP/1.1 client on asyncio streams, and the shape with await.

A raw server on a Unix socket answers canned bytes (chunked bodies split
anywhere, streams cut short, error answers) to both clients, so that the
sync and async transports are held to the same behaviour; the fake sbxd of
test_helpers_fake runs the undo helpers through AsyncSandbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import socketserver
import tempfile
import threading
import unittest
from typing import Any, Callable, Dict, List

import sbx
import sbx.aio
from sbx.aio import AsyncRuntime, AsyncSandbox

try:
    from .test_helpers_fake import FakeSbxd, exit_by_cmd, js
except ImportError:  # run with the tests directory as the top level
    from test_helpers_fake import FakeSbxd, exit_by_cmd, js  # type: ignore[no-redef]


def chunked(body: bytes, sizes: List[int]) -> bytes:
    """``body`` as a chunked transfer coding, cut into chunks of ``sizes`` (the rest in one)."""
    out, i = b"", 0
    for n in sizes + [len(body)]:
        part = body[i:i + n]
        if not part:
            continue
        out += b"%x\r\n" % len(part) + part + b"\r\n"
        i += len(part)
    return out + b"0\r\n\r\n"


def ndjson(*lines: Any) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


class RawServer:
    """Answers every request on a Unix socket with ``answer(request head + body)`` bytes, then closes."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "sbx.sock")
        self.requests: List[bytes] = []
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data = b""
                while b"\r\n\r\n" not in data:
                    b = self.request.recv(65536)
                    if not b:
                        return
                    data += b
                head, _, body = data.partition(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        n = int(line.split(b":")[1])
                while len(body) < n:
                    body += self.request.recv(65536)
                outer.requests.append(head + b"\r\n\r\n" + body)
                try:
                    self.request.sendall(answer(head + b"\r\n\r\n" + body))
                except OSError:
                    pass   # the client went first (the timeout case)

        self.srv = socketserver.ThreadingUnixStreamServer(self.path, Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()
        os.unlink(self.path)
        os.rmdir(self.dir)


def head(status: str, headers: Dict[str, str]) -> bytes:
    return (f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode()


SANDBOX = {"id": "sbx_0123456789abcdef", "name": "c1", "state": "running",
           "network": {"internet": True, "allow": [], "deny": [], "connect": []}}


class BothTransports(unittest.TestCase):
    """Each case runs through the sync and the async client over the Unix socket."""

    def serve(self, answer: Callable[[bytes], bytes]) -> RawServer:
        srv = RawServer(answer)
        self.addCleanup(srv.close)
        return srv

    def both(self, srv: RawServer, fn: Callable[[Any], Any]) -> List[Any]:
        """``fn(client)`` with a sync Runtime and an AsyncRuntime on ``srv`` (awaited); both results."""
        sync = fn(sbx.Runtime(socket=srv.path, timeout=10))

        async def run() -> Any:
            return await fn(AsyncRuntime(socket=srv.path, timeout=10))
        return [sync, asyncio.run(run())]

    def test_chunked_ndjson_progress_and_result(self) -> None:
        # Lines split across chunks anywhere, with a blank line and a chunk extension.
        body = ndjson({"type": "info", "data": "pulling"}, {"type": "info", "data": {"pct": 50}}) + b"\n" + \
            ndjson({"type": "complete", "data": {"id": "v3", "comment": "c"}})
        wire = chunked(body, [3, 1, 40, 7]).replace(b"3\r\n", b"3;ext=1\r\n", 1)
        srv = self.serve(lambda req: head("200 OK", {"Content-Type": "application/x-ndjson",
                                                     "Transfer-Encoding": "chunked"}) + wire)
        for kind in ("sync", "async"):
            seen: List[str] = []
            if kind == "sync":
                cp = sbx.Runtime(socket=srv.path).sandbox_class(sbx.Runtime(socket=srv.path),
                                                                sbx.types.SandboxInfo.from_dict(SANDBOX)) \
                    .checkpoint("c", progress=seen.append)
            else:
                async def run() -> Any:
                    rt = AsyncRuntime(socket=srv.path)
                    sb = AsyncSandbox(rt, sbx.types.SandboxInfo.from_dict(SANDBOX))
                    return await sb.checkpoint("c", progress=seen.append)
                cp = asyncio.run(run())
            self.assertEqual((cp.id, seen), ("v3", ["pulling", '{"pct": 50}']), kind)
        req = srv.requests[-1]
        self.assertTrue(req.startswith(b"POST /v1/sandboxes/sbx_0123456789abcdef/checkpoint HTTP/1.1\r\n"), req)
        self.assertIn(b"Accept: application/x-ndjson", req)
        self.assertTrue(req.endswith(b'{"comment":"c"}'), req)

    def test_error_answer_is_typed_with_request_id(self) -> None:
        body = json.dumps({"error": {"code": "sandbox_not_found", "message": "no sandbox x",
                                     "request_id": "r1"}}).encode()
        srv = self.serve(lambda req: head("404 Not Found", {"Content-Type": "application/json",
                                                            "Content-Length": str(len(body))}) + body)
        for c in (sbx.Runtime(socket=srv.path), AsyncRuntime(socket=srv.path)):
            with self.assertRaises(sbx.SandboxNotFound) as cm:
                r = c.get("x")
                if not isinstance(r, sbx.Sandbox):
                    asyncio.run(r)
            self.assertEqual((cm.exception.status, cm.exception.message, cm.exception.request_id),
                             (404, "no sandbox x", "r1"))

    def test_error_line_of_a_stream_is_typed(self) -> None:
        wire = chunked(ndjson({"type": "info", "data": "x"},
                              {"type": "error", "error": "disk full", "code": "snapshot_failed"}), [10])
        srv = self.serve(lambda req: head("200 OK", {"Transfer-Encoding": "chunked"}) + wire)
        for c in (sbx.Runtime(socket=srv.path), AsyncRuntime(socket=srv.path)):
            sb = c.sandbox_class(c, sbx.types.SandboxInfo.from_dict(SANDBOX))
            with self.assertRaises(sbx.SnapshotFailed) as cm:
                r = sb.snapshot("s")
                if not isinstance(r, sbx.Snapshot):
                    asyncio.run(r)
            self.assertEqual((cm.exception.status, cm.exception.message), (0, "disk full"))

    def test_stream_cut_inside_a_chunk(self) -> None:
        # The answer promises 100 bytes in a chunk and the connection ends.
        srv = self.serve(lambda req: head("200 OK", {"Transfer-Encoding": "chunked"}) +
                         b"64\r\n" + ndjson({"type": "info", "data": "x"}))
        for c in (sbx.Runtime(socket=srv.path), AsyncRuntime(socket=srv.path)):
            sb = c.sandbox_class(c, sbx.types.SandboxInfo.from_dict(SANDBOX))
            with self.assertRaises(sbx.ConnectionFailed):
                r = sb.checkpoint()
                if not isinstance(r, sbx.Checkpoint):
                    asyncio.run(r)

    def test_stream_without_complete_line(self) -> None:
        srv = self.serve(lambda req: head("200 OK", {"Transfer-Encoding": "chunked"}) +
                         chunked(ndjson({"type": "info", "data": "x"}), []))
        for c in (sbx.Runtime(socket=srv.path), AsyncRuntime(socket=srv.path)):
            sb = c.sandbox_class(c, sbx.types.SandboxInfo.from_dict(SANDBOX))
            with self.assertRaises(sbx.ProtocolError):
                r = sb.checkpoint()
                if not isinstance(r, sbx.Checkpoint):
                    asyncio.run(r)

    def test_short_body_is_a_cut(self) -> None:
        srv = self.serve(lambda req: head("200 OK", {"Content-Length": "10"}) + b"abc")
        for c in (sbx.Runtime(socket=srv.path), AsyncRuntime(socket=srv.path)):
            sb = c.sandbox_class(c, sbx.types.SandboxInfo.from_dict(SANDBOX))
            with self.assertRaises(sbx.ConnectionFailed):
                r = sb.read_file("/x")
                if not isinstance(r, bytes):
                    asyncio.run(r)

    def test_body_until_close_and_binary(self) -> None:
        data = bytes(range(256)) * 300
        srv = self.serve(lambda req: head("200 OK", {"Content-Type": "application/octet-stream"}) + data)
        got = self.both(srv, lambda c: c.sandbox_class(c, sbx.types.SandboxInfo.from_dict(SANDBOX))
                        .read_file("/bin/x"))
        self.assertEqual(got, [data, data])
        self.assertIn(b"GET /v1/sandboxes/sbx_0123456789abcdef/files?path=%2Fbin%2Fx HTTP/1.1", srv.requests[-1])

    def test_exec_stream_async(self) -> None:
        lines = ndjson({"type": "start", "pid": 7}, {"type": "stdout", "data": "a\n"},
                       {"type": "stderr", "data": "e"}, {"type": "stdout", "data": "b\n"},
                       {"type": "exit", "exit_code": 3, "duration_ms": 5})
        srv = self.serve(lambda req: head("200 OK", {"Transfer-Encoding": "chunked"}) + chunked(lines, [5, 5, 30]))

        async def run() -> Any:
            sb = AsyncSandbox(AsyncRuntime(socket=srv.path), sbx.types.SandboxInfo.from_dict(SANDBOX))
            st = await sb.exec_stream("x", cwd="/w")
            types = []
            async with st:
                async for ev in st:
                    types.append(ev.type)
            st2 = await sb.exec_stream(["true"])
            return types, st.pid, await st2.wait()
        types, pid, res = asyncio.run(run())
        self.assertEqual((types, pid), (["start", "stdout", "stderr", "stdout", "exit"], 7))
        self.assertEqual((res.stdout, res.stderr, res.exit_code, res.pid), ("a\nb\n", "e", 3, 7))
        self.assertIn(b'"cmd":["sh","-c","x"],"cwd":"/w"', srv.requests[0])

    def test_no_answer_is_bounded_by_timeout(self) -> None:
        # A server that accepts and never answers: the client's timeout ends the call.
        gate = threading.Event()
        self.addCleanup(gate.set)

        def answer(req: bytes) -> bytes:
            gate.wait(30)
            return b""
        srv = self.serve(answer)
        with self.assertRaises(sbx.ConnectionFailed):
            asyncio.run(AsyncRuntime(socket=srv.path, timeout=0.3).health())

    def test_no_content_ends_without_close(self) -> None:
        # A 204 has no body: the client must not wait for the connection to close.
        gate = threading.Event()
        self.addCleanup(gate.set)

        def answer(req: bytes) -> bytes:
            return head("204 No Content", {})
        srv = RawServer(answer)
        self.addCleanup(srv.close)
        orig = srv.srv.RequestHandlerClass.handle

        def handle_and_hold(h: Any) -> None:
            orig(h)
            gate.wait(30)               # keep the connection open after the answer
        srv.srv.RequestHandlerClass.handle = handle_and_hold  # type: ignore[method-assign]
        asyncio.run(AsyncRuntime(socket=srv.path, timeout=5).delete("x"))
        sbx.Runtime(socket=srv.path, timeout=5).delete("x")

    def test_crlf_in_a_header_is_refused_before_sending(self) -> None:
        srv = self.serve(lambda req: head("200 OK", {"Content-Length": "2"}) + b"{}")
        for c in (sbx.Runtime(socket=srv.path), AsyncRuntime(socket=srv.path)):
            with self.assertRaises(ValueError):
                r = c.post_event("k", b"x", content_type="text/plain\r\nX-Evil: 1")
                if not isinstance(r, sbx.EventResult):
                    asyncio.run(r)
        self.assertEqual(srv.requests, [])

    def test_no_sbxd(self) -> None:
        with self.assertRaises(sbx.ConnectionFailed):
            asyncio.run(AsyncRuntime(socket="/nonexistent/sbx.sock").health())


class AsyncShape(unittest.TestCase):
    """The shape of the issue with await, against the fake sbxd of test_helpers_fake."""

    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)
        self.rt = AsyncRuntime(url=self.f.srv.url, api_key="test-key-0123456789", timeout=30)

    def test_create_exec_network_fork_and_delete(self) -> None:
        self.f.exec_fn = lambda box, body: {"stdout": "hi\n", "stderr": "", "exit_code": 0, "duration_ms": 2}

        async def run() -> Any:
            async with AsyncSandbox.create("dev", runtime=self.rt, labels={"a": "b"}) as sb:
                r = await sb.exec("echo hi", timeout_ms=1000)
                await sb.network.off()
                rules = await sb.network.get()
                copy = await sb.fork(labels={"c": "d"}, network={"internet": False})
                many = await sb.fork_many(2, "dev-x")
                listed = await self.rt.sandboxes.list()
                return sb.id, r, rules, copy, many, listed
        sid, r, rules, copy, many, listed = asyncio.run(run())
        self.assertEqual((r.exit_code, r.stdout, r.duration_ms), (0, "hi\n", 2))
        self.assertEqual((rules.internet, rules["internet"], rules["allow"]), (False, False, []))
        self.assertIsInstance(copy, AsyncSandbox)
        self.assertEqual(copy.labels, {"c": "d"})
        self.assertEqual(len(many.sandboxes), 1)          # the fake makes one copy whatever the count
        self.assertIsInstance(many.sandboxes[0], AsyncSandbox)
        self.assertIsNone(self.f.find(sid))               # deleted at the end of async with
        self.assertIn(sid, [s.id for s in listed])
        fork_bodies = [r.json() for r in self.f.srv.requests if r.path.endswith("/fork")]
        self.assertEqual(fork_bodies[1], {"name": "dev-x", "count": 2})

    def test_try_in_copy_pass_and_fail(self) -> None:
        sb = asyncio.run(self.rt.get(self.f.add("dev").id))
        self.f.exec_fn = exit_by_cmd({"bad": 1})

        async def run() -> Any:
            failed = await sbx.aio.try_in_copy(sb, "bad")
            kept = await sbx.aio.try_in_copy(sb, "good", verify="check")
            return failed, kept
        orig = sb.id
        failed, kept = asyncio.run(run())
        self.assertFalse(failed.kept)
        self.assertTrue(kept.kept)
        self.assertIs(kept.sandbox, sb)
        self.assertNotEqual(sb.id, orig)                  # the handle follows the promoted copy
        self.assertEqual(self.f.find("dev")["id"], sb.id)
        self.assertEqual(len(self.f.boxes), 1)

    def test_guarded_and_chain(self) -> None:
        sb = asyncio.run(self.rt.get(self.f.add("dev").id))
        self.f.exec_fn = lambda box, body: {"exit_code": 1, "undo": {"kind": "snapshot", "class": "fork",
                                                                      "snapshot": "snap_9", "rolled_back": True}}

        async def run() -> Any:
            g = await sbx.aio.guarded(sb, "kill 1")
            await sbx.aio.remember(sb, "one")
            await sbx.aio.remember(sb, "two")
            steps = [s.name for s in await sbx.aio.chain(sb)]
            back = await sbx.aio.go_back_to(sb, "one")
            return g, steps, back
        g, steps, back = asyncio.run(run())
        self.assertEqual((g.undo, g.rolled_back, g.result.undo.snapshot), ("fork", True, "snap_9"))
        self.assertEqual(steps, ["one", "two"])
        self.assertIs(back, sb)
        self.assertEqual(self.f.find("dev")["id"], sb.id)

    def test_checkpoint_for(self) -> None:
        self.f.fail["POST /v1/classify"] = lambda req: js(200, {"undo": "checkpoint", "reason": "rm"})
        c = asyncio.run(sbx.aio.checkpoint_for("rm -rf x", self.rt))
        self.assertEqual((c, c.reason), ("checkpoint", "rm"))


if __name__ == "__main__":
    unittest.main()
