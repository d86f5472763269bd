"""The sync shape of issue 17 against the fake sbxd: the default client, sb.network, fork, fork_many.

(test_aio.AsyncShape holds the async client to the same shape.)
"""

from __future__ import annotations

import os
import unittest
from unittest import mock

import sbx
from sbx import Runtime, Sandbox

try:
    from .test_helpers_fake import FakeSbxd, js, nd
except ImportError:  # run with the tests directory as the top level
    from test_helpers_fake import FakeSbxd, js, nd  # type: ignore[no-redef]


class DefaultClient(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)

    def test_url_and_key_from_the_environment(self) -> None:
        with mock.patch.dict(os.environ, {"SBX_URL": self.f.srv.url, "SBX_API_KEY": "env-key",
                                          "SBX_SOCKET": "/nonexistent.sock"}):
            with Sandbox.create("dev", labels={"a": "b"}) as sb:
                self.assertIsInstance(sb, Sandbox)
                self.assertEqual(Sandbox.connect("dev").id, sb.id)
        self.assertIsNone(self.f.find("dev"))             # deleted at the end of the block
        self.assertEqual({r.headers.get("Authorization") for r in self.f.srv.requests}, {"Bearer env-key"})
        self.assertEqual([f"{r.method} {r.path}" for r in self.f.srv.requests],
                         ["POST /v1/sandboxes", "GET /v1/sandboxes/dev", f"DELETE /v1/sandboxes/{sb.id}"])

    def test_socket_from_the_environment(self) -> None:
        with mock.patch.dict(os.environ, {"SBX_SOCKET": "/nonexistent/sbx.sock"}):
            os.environ.pop("SBX_URL", None)
            rt = Runtime()
            self.assertTrue(rt.is_socket)
            with self.assertRaises(sbx.ConnectionFailed) as cm:
                Sandbox.create()
            self.assertIn("/nonexistent/sbx.sock", str(cm.exception))

    def test_client_is_runtime(self) -> None:
        self.assertIs(sbx.Client, sbx.Runtime)


class Shape(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)
        self.rt = self.f.client
        self.sb = self.rt.sandboxes.create("dev", network={"internet": True, "allow": ["x.example"]})
        self.f.srv.requests.clear()

    def bodies(self, path_end: str) -> list:
        return [r.json() for r in self.f.srv.requests if r.path.endswith(path_end) and r.method != "GET"]

    def test_network_object(self) -> None:
        rules = self.sb.network.get()
        self.assertEqual((rules.internet, rules["allow"], dict(rules)["deny"]), (True, ["x.example"], []))
        self.assertIsNone(rules.get("bandwidth"))
        with self.assertRaises(KeyError):
            rules["bandwidth"]
        self.sb.network.off()
        self.sb.network.on()
        self.sb.network.set(internet=True, allow=["pypi.org"], connect=["db"])
        self.sb.network.set({"internet": False})
        self.sb.network.set(sbx.NetworkRules(internet=True, deny=["evil.example"]))
        self.assertEqual(self.bodies("/network"), [
            {"internet": False}, {"internet": True}, {"internet": True, "allow": ["pypi.org"], "connect": ["db"]},
            {"internet": False}, {"internet": True, "allow": [], "deny": ["evil.example"], "connect": []}])

    def test_network_set_refuses_bad_arguments_before_sending(self) -> None:
        with self.assertRaises(TypeError):
            self.sb.network.set(allow="pypi.org")          # a str would be a list of letters
        with self.assertRaises(TypeError):
            self.sb.network.set({"internet": False}, allow=["x"])
        self.assertEqual(self.f.srv.requests, [])

    def test_fork_answers_the_copy(self) -> None:
        copy = self.sb.fork(labels={"k": "v"}, network={"internet": False})
        self.assertIsInstance(copy, Sandbox)
        self.assertNotEqual(copy.id, self.sb.id)
        self.assertEqual(self.bodies("/fork"), [{"labels": {"k": "v"}, "network": {"internet": False}}])

    def test_fork_many_answers_copies_and_errors(self) -> None:
        self.f.fail[f"POST /v1/sandboxes/{self.sb.id}/fork"] = lambda req: nd(
            {"type": "complete", "data": {"snapshot": "snap_f", "paused_ms": 12, "copies": [
                {"sandbox": {"id": "sbx_00000000000000aa", "name": "dev-1", "state": "running"}},
                {"error": {"code": "capacity", "message": "host full"}}]}})
        res = self.sb.fork_many(2, "dev")
        self.assertEqual(self.bodies("/fork"), [{"name": "dev", "count": 2}])
        self.assertEqual((res.snapshot, res.paused_ms), ("snap_f", 12))
        self.assertEqual(res.sandboxes[0].name, "dev-1")
        self.assertIsNone(res.sandboxes[1])
        self.assertIsNone(res.errors[0])
        self.assertIsInstance(res.errors[1], sbx.Capacity)
        self.assertEqual(res.errors[1].message, "host full")
        # fork() of one copy that failed raises the copy's error.
        self.f.fail[f"POST /v1/sandboxes/{self.sb.id}/fork"] = lambda req: nd(
            {"type": "complete", "data": {"copies": [{"error": {"code": "fork_failed", "message": "x"}}]}})
        with self.assertRaises(sbx.ForkFailed):
            self.sb.fork()

    def test_snapshot_and_namespaces(self) -> None:
        snap = self.sb.snapshot(name="s1", retention_days=2, metadata={"m": 1})
        self.assertTrue(snap.id)
        self.assertEqual(self.bodies("/snapshot"), [{"name": "s1", "retention_days": 2, "metadata": {"m": 1}}])
        self.assertEqual([s.id for s in self.rt.snapshots.list(sandbox="dev")], [snap.id])
        self.assertEqual([s.id for s in self.rt.sandboxes.list()], [self.sb.id])
        self.assertEqual(self.rt.sandboxes.get("dev").id, self.sb.id)


if __name__ == "__main__":
    unittest.main()
