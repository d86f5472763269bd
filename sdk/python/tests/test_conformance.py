"""The shared conformance script (sdk/testdata/conformance.json, docs/undo.md "Conformance").

Each case's canned response is served from a local HTTP server; the call
is made through the SDK over TCP with API key ``test-key``; the request it
sent is checked (method, escaped path, query multimap, Accept NDJSON or
not, JSON body with nulls as absent, text body, Authorization).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import unittest
from typing import Any, Callable, Dict, Optional

import sbx.aio

import sbx
try:
    from .fakeserver import FakeServer, Recorded, canned
except ImportError:  # run with the tests directory as the top level
    from fakeserver import FakeServer, Recorded, canned  # type: ignore[no-redef]

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "testdata", "conformance.json")


def strip_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: strip_nulls(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [strip_nulls(x) for x in v]
    return v


async def v(x: Any) -> Any:
    """``x``, awaited when the async client answered a coroutine."""
    return await x if inspect.isawaitable(x) else x


class Driver:
    """Makes each scripted call through the SDK (sync or async: the same calls, awaited when async)."""

    def __init__(self, client: Any) -> None:
        self.c = client
        self.cur: Optional[sbx.Sandbox] = None
        self.read_back: Optional[bytes] = None

    async def call(self, name: str, a: Dict[str, Any]) -> Any:
        c, sb = self.c, self.cur
        if name == "health":
            return await v(c.health())
        if name == "create":
            self.cur = await v(c.create(**a["request"]))
            return self.cur
        if name == "get":
            self.cur = await v(c.get(a["name"]))
            return self.cur
        if name == "list":
            return await v(c.list(a.get("labels")))
        assert sb is not None, "no current sandbox"
        if name == "exec":
            return await v(sb.exec(a["command"]))
        if name in ("run", "stream"):
            req = dict(a["request"])
            cmd = req.pop("cmd")
            if name == "run":
                return await v(sb.exec(cmd, **req))
            st = await v(sb.exec_stream(cmd, **req))
            if isinstance(st, sbx.ExecStream):
                with st:
                    events = list(st)
            else:
                async with st:
                    events = [ev async for ev in st]
            assert events and events[-1].type == "exit", events
            return events
        if name == "write_file":
            return await v(sb.write_file(a["path"], a["content"], a.get("mode")))
        if name == "read_file":
            self.read_back = await v(sb.read_file(a["path"], a.get("max_bytes")))
            return self.read_back
        if name == "list_files":
            return await v(sb.list_files(a["path"]))
        if name == "delete_file":
            return await v(sb.delete_file(a["path"]))
        if name == "checkpoint":
            return await v(sb.checkpoint(a.get("comment")))
        if name == "list_checkpoints":
            return await v(sb.list_checkpoints())
        if name == "get_checkpoint":
            return await v(sb.get_checkpoint(a["id"]))
        if name == "restore":
            return await v(sb.restore(a["id"]))
        if name == "diff":
            return await v(sb.diff(a.get("from"), a.get("to") or "live"))
        if name == "snapshot":
            return await v(sb.snapshot(**a["request"]))
        if name == "list_snapshots":
            return await v(c.list_snapshots(a.get("sandbox")))
        if name == "get_snapshot":
            return await v(c.get_snapshot(a["id"]))
        if name == "delete_snapshot":
            return await v(c.delete_snapshot(a["id"]))
        if name == "fork":
            return await v(sb.fork(**a["request"]))
        if name == "get_network":
            return await v(sb.get_network())
        if name == "set_network":
            return await v(sb.set_network(a["rules"]))
        if name == "list_secrets":
            return await v(sb.secrets())
        if name == "set_secrets":
            return await v(sb.set_secrets(a["secrets"]))
        if name == "put_secret":
            return await v(sb.put_secret(a["name"], a["secret_rules"], value=a.get("value")))
        if name == "delete_secret":
            return await v(sb.delete_secret(a["name"]))
        if name == "update":
            return await v(sb.update(**a["request"]))
        if name == "suspend":
            return await v(sb.suspend(a.get("wake_on")))
        if name == "resume":
            return await v(sb.resume())
        if name == "events":
            return await v(sb.events())
        if name == "post_event":
            return await v(c.post_event(a["key"], a.get("data")))
        if name == "deliver":
            return await v(sb.deliver(**a["request"]))
        if name == "list_deliveries":
            return await v(c.list_deliveries(a.get("sandbox")))
        if name == "get_delivery":
            d = await v(c.get_delivery(a["id"]))
            assert d.id == a["id"] and d.files == 1 and d.envelope.get("payloadType"), d
            return d
        if name == "delivery_archive":
            self.read_back = await v(c.delivery_archive(a["id"]))
            return self.read_back
        if name == "delivery_key":
            self.read_back = await v(c.delivery_public_key())
            return self.read_back
        if name == "create_key":
            k = await v(c.create_key(**a["request"]))
            assert k.secret.startswith("sbxk_") and k.daily_limit_usd in (None, 2.5), k
            return k
        if name == "list_keys":
            return await v(c.list_keys(a.get("revoked", False)))
        if name == "get_key":
            return await v(c.get_key(a["id"]))
        if name == "revoke_key":
            return await v(c.revoke_key(a["id"]))
        if name == "usage":
            u = await v(c.usage(a.get("since"), a.get("until"), a.get("group_by")))
            assert abs(u.total.cost - sum(e.cost for e in u.usage)) < 1e-12 and u.prices.cpu_hour > 0, u
            return u
        if name == "set_key_limit":
            k = await v(c.set_key_limit(a["id"], a.get("daily_limit_usd"), bool(a.get("resume_suspended"))))
            assert k["id"] == "key_0123456789abcdef", k
            return k
        if name == "delete":
            return await v(sb.delete())
        if name == "classify":
            got = await v(c.classify(a["command"]))
            assert got == "git" and got.reason, (got, got.reason)
            return got
        raise AssertionError(f"unknown call {name!r}")


class Conformance(unittest.TestCase):
    def test_script(self) -> None:
        self.replay(lambda url: sbx.Runtime(url=url, api_key="test-key", timeout=30))

    def test_script_async(self) -> None:
        self.replay(lambda url: sbx.aio.AsyncRuntime(url=url, api_key="test-key", timeout=30))

    def replay(self, make_client: Callable[[str], Any]) -> None:
        with open(SCRIPT) as f:
            script = json.load(f)
        cases = script["cases"]
        current: Dict[str, Any] = {}

        def responder(req: Recorded) -> "tuple[int, str, bytes]":
            return canned(current["case"]["response"])

        srv = FakeServer(responder)
        self.addCleanup(srv.close)
        drv = Driver(make_client(srv.url))
        seen = set()
        for i, case in enumerate(cases):
            name = case["call"]
            seen.add(name)
            with self.subTest(i=i, call=name, args=case["args"]):
                current["case"] = case
                before = len(srv.requests)
                code = case.get("error_code")
                if code:
                    with self.assertRaises(sbx.SbxError) as cm:
                        asyncio.run(drv.call(name, case["args"]))
                    self.assertEqual(cm.exception.code, code)
                    self.assertIs(type(cm.exception), type(sbx.error_for(code)))
                else:
                    result = asyncio.run(drv.call(name, case["args"]))
                    if name in ("read_file", "delivery_archive", "delivery_key"):
                        self.assertEqual(result, case["response"]["body_text"].encode())
                reqs = srv.requests[before:]
                self.assertEqual(len(reqs), 1, reqs)
                self.check_request(case["request"], reqs[0])
        # Every kind of call of the script was made.
        self.assertGreaterEqual(len(seen), 20)

    def check_request(self, want: Dict[str, Any], got: Recorded) -> None:
        self.assertEqual(got.method, want["method"])
        self.assertEqual(got.path, want["path"])
        wq = {k: list(v) for k, v in (want.get("query") or {}).items()}
        self.assertEqual({k: sorted(v) for k, v in got.query.items()},
                         {k: sorted(v) for k, v in wq.items()})
        accept = got.headers.get("Accept", "")
        self.assertEqual("application/x-ndjson" in accept, bool(want.get("ndjson")), accept)
        self.assertEqual(got.headers.get("Authorization"), "Bearer test-key")
        if "body" in want:
            self.assertEqual(strip_nulls(got.json()), strip_nulls(want["body"]))
        elif "body_text" in want:
            self.assertEqual(got.body.decode(), want["body_text"])
        else:
            self.assertIn(got.body, (b"", b"{}"), "unexpected body")


if __name__ == "__main__":
    unittest.main()
