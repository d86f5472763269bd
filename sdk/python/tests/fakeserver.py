"""A local HTTP server that answers canned responses and records requests (for tests)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional
from urllib.parse import parse_qs, urlsplit


class Recorded:
    def __init__(self, method: str, target: str, headers: Dict[str, str], body: bytes) -> None:
        self.method = method
        u = urlsplit(target)
        self.path = u.path
        self.query = parse_qs(u.query, keep_blank_values=True)
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    def __repr__(self) -> str:
        return f"{self.method} {self.path} {self.query} {self.body[:200]!r}"


# A responder gets the request and returns (status, content_type, body bytes).
Responder = Callable[[Recorded], "tuple[int, str, bytes]"]


def canned(resp: Dict[str, Any]) -> "tuple[int, str, bytes]":
    """Turn a conformance response object into (status, content type, body)."""
    status = int(resp.get("status", 200))
    if "ndjson" in resp:
        return status, "application/x-ndjson", b"".join(json.dumps(l).encode() + b"\n" for l in resp["ndjson"])
    if "body_text" in resp:
        return status, "application/octet-stream", resp["body_text"].encode()
    if "body" in resp:
        return status, "application/json", json.dumps(resp["body"]).encode()
    return status, "", b""


class FakeServer:
    """Serve ``responder`` answers on 127.0.0.1; every request is appended to ``requests``."""

    def __init__(self, responder: Optional[Responder] = None) -> None:
        self.requests: List[Recorded] = []
        self.responder = responder
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                rec = Recorded(self.command, self.path, {k: v for k, v in self.headers.items()}, body)
                outer.requests.append(rec)
                if outer.responder is None:
                    status, ctype, data = 500, "application/json", b'{"error":{"code":"internal","message":"no responder"}}'
                else:
                    status, ctype, data = outer.responder(rec)
                self.send_response(status)
                if ctype:
                    self.send_header("Content-Type", ctype)
                if status != 204:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if status != 204:
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _any

        ThreadingHTTPServer.request_queue_size = 64
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
