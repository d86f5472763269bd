"""The shared conformance script (sdk/testdata/conformance.json, docs/undo.md "Conformance").

Each case's canned response is served from a local HTTP server; the call
is made through the SDK over TCP with API key ``test-key``; the request it
sent is checked (method, escaped path, query multimap, Accept NDJSON or
not, JSON body with nulls as absent, text body, Authorization).
"""

from __future__ import annotations

import json
import os
import unittest
from typing import Any, Dict, Optional

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


class Driver:
    """Makes each scripted call through the SDK."""

    def __init__(self, client: sbx.Client) -> None:
        self.c = client
        self.cur: Optional[sbx.Sandbox] = None
        self.read_back: Optional[bytes] = None

    def call(self, name: str, a: Dict[str, Any]) -> Any:
        c, sb = self.c, self.cur
        if name == "health":
            return c.health()
        if name == "create":
            self.cur = c.create(**a["request"])
            return self.cur
        if name == "get":
            self.cur = c.get(a["name"])
            return self.cur
        if name == "list":
            return c.list(a.get("labels"))
        assert sb is not None, "no current sandbox"
        if name == "exec":
            return sb.exec(a["command"])
        if name in ("run", "stream"):
            req = dict(a["request"])
            cmd = req.pop("cmd")
            if name == "run":
                return sb.exec(cmd, **req)
            with sb.exec_stream(cmd, **req) as st:
                events = list(st)
            assert events and events[-1].type == "exit", events
            return events
        if name == "write_file":
            return sb.write_file(a["path"], a["content"], a.get("mode"))
        if name == "read_file":
            self.read_back = sb.read_file(a["path"], a.get("max_bytes"))
            return self.read_back
        if name == "list_files":
            return sb.list_files(a["path"])
        if name == "delete_file":
            return sb.delete_file(a["path"])
        if name == "checkpoint":
            return sb.checkpoint(a.get("comment"))
        if name == "list_checkpoints":
            return sb.list_checkpoints()
        if name == "get_checkpoint":
            return sb.get_checkpoint(a["id"])
        if name == "restore":
            return sb.restore(a["id"])
        if name == "diff":
            return sb.diff(a.get("from"), a.get("to") or "live")
        if name == "snapshot":
            return sb.snapshot(**a["request"])
        if name == "list_snapshots":
            return c.list_snapshots(a.get("sandbox"))
        if name == "get_snapshot":
            return c.get_snapshot(a["id"])
        if name == "delete_snapshot":
            return c.delete_snapshot(a["id"])
        if name == "fork":
            return sb.fork(**a["request"])
        if name == "get_network":
            return sb.get_network()
        if name == "set_network":
            return sb.set_network(a["rules"])
        if name == "list_secrets":
            return sb.secrets()
        if name == "set_secrets":
            return sb.set_secrets(a["secrets"])
        if name == "put_secret":
            return sb.put_secret(a["name"], a["secret_rules"], value=a.get("value"))
        if name == "delete_secret":
            return sb.delete_secret(a["name"])
        if name == "update":
            return sb.update(**a["request"])
        if name == "suspend":
            return sb.suspend(a.get("wake_on"))
        if name == "resume":
            return sb.resume()
        if name == "events":
            return sb.events()
        if name == "post_event":
            return c.post_event(a["key"], a.get("data"))
        if name == "deliver":
            return sb.deliver(**a["request"])
        if name == "list_deliveries":
            return c.list_deliveries(a.get("sandbox"))
        if name == "get_delivery":
            d = c.get_delivery(a["id"])
            assert d.id == a["id"] and d.files == 1 and d.envelope.get("payloadType"), d
            return d
        if name == "delivery_archive":
            self.read_back = c.delivery_archive(a["id"])
            return self.read_back
        if name == "delivery_key":
            self.read_back = c.delivery_public_key()
            return self.read_back
        if name == "create_key":
            k = c.create_key(**a["request"])
            assert k.secret.startswith("sbxk_") and k.daily_limit_usd in (None, 2.5), k
            return k
        if name == "list_keys":
            return c.list_keys(a.get("revoked", False))
        if name == "get_key":
            return c.get_key(a["id"])
        if name == "revoke_key":
            return c.revoke_key(a["id"])
        if name == "usage":
            u = c.usage(a.get("since"), a.get("until"), a.get("group_by"))
            assert abs(u.total.cost - sum(e.cost for e in u.usage)) < 1e-12 and u.prices.cpu_hour > 0, u
            return u
        if name == "set_key_limit":
            k = c.set_key_limit(a["id"], a.get("daily_limit_usd"), bool(a.get("resume_suspended")))
            assert k["id"] == "key_0123456789abcdef", k
            return k
        if name == "delete":
            return sb.delete()
        raise AssertionError(f"unknown call {name!r}")


class Conformance(unittest.TestCase):
    def test_script(self) -> None:
        with open(SCRIPT) as f:
            script = json.load(f)
        cases = script["cases"]
        current: Dict[str, Any] = {}

        def responder(req: Recorded) -> "tuple[int, str, bytes]":
            return canned(current["case"]["response"])

        srv = FakeServer(responder)
        self.addCleanup(srv.close)
        drv = Driver(sbx.Client(url=srv.url, api_key="test-key", timeout=30))
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
                        drv.call(name, case["args"])
                    self.assertEqual(cm.exception.code, code)
                    self.assertIs(type(cm.exception), type(sbx.error_for(code)))
                else:
                    result = drv.call(name, case["args"])
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
