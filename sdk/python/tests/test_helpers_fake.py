"""The undo helpers against a fake sbxd: the requests they send and their failure paths."""

from __future__ import annotations

import json
import re
import unittest
from typing import Any, Callable, Dict, List, Optional, Tuple

import sbx
try:
    from .fakeserver import FakeServer, Recorded
except ImportError:  # run with the tests directory as the top level
    from fakeserver import FakeServer, Recorded  # type: ignore[no-redef]

Answer = Tuple[int, str, bytes]


def js(status: int, body: Any) -> Answer:
    return status, "application/json", json.dumps(body).encode()


def err(status: int, code: str, msg: str = "x") -> Answer:
    return js(status, {"error": {"code": code, "message": msg}})


def nd(*lines: Any) -> Answer:
    return 200, "application/x-ndjson", b"".join(json.dumps(l).encode() + b"\n" for l in lines)


class FakeSbxd:
    """A tiny model of sbxd: sandboxes, renames, forks, exec by a callback, snapshots."""

    def __init__(self) -> None:
        self.boxes: Dict[str, Dict[str, Any]] = {}
        self.n = 0
        self.exec_fn: Callable[[Dict[str, Any], Dict[str, Any]], Dict[str, Any]] = \
            lambda box, body: {"stdout": "", "stderr": "", "exit_code": 0, "duration_ms": 1}
        self.fail: Dict[str, Any] = {}     # hooks: name -> callable(req) -> Optional[Answer]
        self.snapshots: List[Dict[str, Any]] = []
        self.srv = FakeServer(self.handle)
        self.client = sbx.Client(url=self.srv.url, api_key="test-key-0123456789", timeout=30)

    def close(self) -> None:
        self.srv.close()

    def add(self, name: str, labels: Optional[Dict[str, str]] = None,
            network: Optional[Dict[str, Any]] = None) -> sbx.Sandbox:
        self.n += 1
        box = {"id": "sbx_%016x" % self.n, "name": name, "state": "running", "labels": labels or {},
               "network": network or {"internet": True, "allow": [], "deny": [], "connect": []}}
        self.boxes[box["id"]] = box
        return self.client.get(box["id"])

    def find(self, ref: str) -> Optional[Dict[str, Any]]:
        if ref in self.boxes:
            return self.boxes[ref]
        for b in self.boxes.values():
            if b["name"] == ref:
                return b
        return None

    def writes(self) -> List[str]:
        return [f"{r.method} {r.path}" for r in self.srv.requests if r.method != "GET"]

    def handle(self, req: Recorded) -> Answer:
        hook = self.fail.get(f"{req.method} {req.path}")
        if hook is not None:
            ans = hook(req)
            if ans is not None:
                return ans
        m = re.match(r"^/v1/sandboxes/([^/]+)(/.*)?$", req.path)
        if req.method == "POST" and req.path == "/v1/sandboxes":
            body = req.json()
            self.n += 1
            box = {"id": "sbx_%016x" % self.n, "name": body["name"], "state": "running",
                   "labels": body.get("labels") or {}, "network": body.get("network") or {"internet": True}}
            self.boxes[box["id"]] = box
            return js(201, box)
        if req.method == "GET" and req.path == "/v1/sandboxes":
            return js(200, list(self.boxes.values()))
        if req.method == "GET" and req.path == "/v1/snapshots":
            return js(200, list(reversed(self.snapshots)))
        if not m:
            return err(404, "not_found")
        box = self.find(m.group(1))
        rest = m.group(2) or ""
        if box is None:
            return err(404, "sandbox_not_found")
        if rest == "" and req.method == "GET":
            return js(200, box)
        if rest == "" and req.method == "PUT":
            new = req.json().get("name")
            if any(b["name"] == new for b in self.boxes.values() if b is not box):
                return err(409, "name_taken")
            box["name"] = new
            return js(200, box)
        if rest == "" and req.method == "DELETE":
            del self.boxes[box["id"]]
            return 204, "", b""
        if rest == "/network" and req.method == "GET":
            return js(200, box["network"])
        if rest == "/network" and req.method == "PUT":
            box["network"] = req.json()
            return js(200, box["network"])
        if rest == "/fork":
            body = req.json()
            self.n += 1
            copy = {"id": "sbx_%016x" % self.n, "name": body.get("name") or "%s-%d" % (box["name"], self.n),
                    "state": "running",
                    "labels": body.get("labels") or {}, "network": body.get("network") or box["network"]}
            self.boxes[copy["id"]] = copy
            return nd({"type": "info", "data": "forking"},
                      {"type": "complete", "data": {"snapshot": "snap_x", "copies": [{"sandbox": copy}]}})
        if rest == "/exec":
            return js(200, self.exec_fn(box, req.json()))
        if rest == "/snapshot":
            body = req.json()
            snap = {"id": "snap_%d" % (len(self.snapshots) + 1), "name": body.get("name"),
                    "sandbox": box["name"], "create_time": "2026-11-29T10:00:%02dZ" % len(self.snapshots),
                    "metadata": body.get("metadata")}
            self.snapshots.append(snap)
            return nd({"type": "complete", "data": snap})
        return err(404, "not_found")


def exit_by_cmd(codes: Dict[str, int]) -> Callable[[Dict[str, Any], Dict[str, Any]], Dict[str, Any]]:
    def fn(box: Dict[str, Any], body: Dict[str, Any]) -> Dict[str, Any]:
        line = body["cmd"][-1] if body["cmd"][:2] == ["sh", "-c"] else " ".join(body["cmd"])
        return {"stdout": "", "stderr": "", "exit_code": codes.get(line, 0), "duration_ms": 1}
    return fn


class TryInCopyFake(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)
        self.sb = self.f.add("dev", labels={"team": "a"},
                             network={"internet": True, "allow": ["x.example"], "deny": [], "connect": []})
        self.f.srv.requests.clear()

    def test_pass_sequence(self) -> None:
        orig_id = self.sb.id
        res = sbx.try_in_copy(self.sb, "make", "make test")
        self.assertTrue(res.kept)
        self.assertEqual(res.sandbox.name, "dev")
        self.assertIs(res.sandbox, self.sb)          # the handle follows the promoted copy
        self.assertNotEqual(self.sb.id, orig_id)
        self.assertEqual(res.leftover, "")
        reqs = self.f.srv.requests
        seq = [f"{r.method} {r.path}" for r in reqs]
        copy_id = res.sandbox.id
        self.assertEqual(seq, [
            f"GET /v1/sandboxes/{orig_id}/network",
            f"POST /v1/sandboxes/{orig_id}/fork",
            f"POST /v1/sandboxes/{copy_id}/exec",
            f"POST /v1/sandboxes/{copy_id}/exec",
            f"PUT /v1/sandboxes/{copy_id}/network",
            f"PUT /v1/sandboxes/{orig_id}",
            f"PUT /v1/sandboxes/{copy_id}",
            f"DELETE /v1/sandboxes/{orig_id}",
        ])
        fork = reqs[1].json()
        self.assertRegex(fork["name"], r"^dev-try-[a-z0-9]{6}$")
        self.assertEqual(fork["labels"], {"team": "a"})
        self.assertEqual(fork["network"], {"internet": False})
        self.assertEqual(reqs[2].json(), {"cmd": ["sh", "-c", "make"]})
        self.assertEqual(reqs[3].json(), {"cmd": ["sh", "-c", "make test"]})
        self.assertEqual(reqs[4].json()["allow"], ["x.example"])
        self.assertRegex(reqs[5].json()["name"], r"^dev-old-[a-z0-9]{6}$")
        self.assertEqual(reqs[6].json(), {"name": "dev"})
        self.assertEqual(self.f.find("dev")["id"], copy_id)
        self.assertIsNone(self.f.find(orig_id))

    def test_verify_fails(self) -> None:
        self.f.exec_fn = exit_by_cmd({"check": 1})
        res = sbx.try_in_copy(self.sb, "step", "check", cwd="/workspace/app")
        self.assertFalse(res.kept)
        self.assertIs(res.sandbox, self.sb)
        assert res.verify is not None
        self.assertEqual(res.verify.exit_code, 1)
        writes = self.f.writes()
        self.assertEqual(writes[-1][:7], "DELETE ")
        self.assertNotIn("PUT", " ".join(writes))
        self.assertEqual(self.f.srv.requests[2].json()["cwd"], "/workspace/app")
        self.assertEqual([b["name"] for b in self.f.boxes.values()], ["dev"])

    def test_step_fails_verify_not_run(self) -> None:
        self.f.exec_fn = exit_by_cmd({"step": 2})
        res = sbx.try_in_copy(self.sb, "step", "check")
        self.assertFalse(res.kept)
        self.assertIsNone(res.verify)
        self.assertEqual(sum(1 for r in self.f.srv.requests if r.path.endswith("/exec")), 1)
        self.assertEqual(len(self.f.boxes), 1)

    def test_online_fork_keeps_rules(self) -> None:
        sbx.try_in_copy(self.sb, "step", offline=False)
        fork = [r for r in self.f.srv.requests if r.path.endswith("/fork")][0].json()
        self.assertNotIn("network", fork)

    def test_promotion_failure_is_undone(self) -> None:
        orig_id = self.sb.id
        state = {"n": 0}

        # The copy's rename to the original's name fails: the original gets its name back.
        def hook_for_copy(req: Recorded) -> Optional[Answer]:
            state["n"] += 1
            return err(409, "conflict", "busy")

        self.f.exec_fn = exit_by_cmd({})
        # install the hook once the copy exists: wrap the fork answer
        orig_handle = self.f.handle

        def handle(req: Recorded) -> Answer:
            ans = orig_handle(req)
            if req.path.endswith("/fork"):
                copy_id = [b for b in self.f.boxes][-1]
                self.f.fail[f"PUT /v1/sandboxes/{copy_id}"] = hook_for_copy
            return ans

        self.f.srv.responder = handle
        with self.assertRaises(sbx.Conflict):
            sbx.try_in_copy(self.sb, "step")
        self.assertEqual(state["n"], 1)
        self.assertEqual(self.f.find("dev")["id"], orig_id)
        self.assertEqual(len(self.f.boxes), 1, "the copy is deleted")

    def test_old_original_not_deletable(self) -> None:
        orig_id = self.sb.id
        self.f.fail[f"DELETE /v1/sandboxes/{orig_id}"] = lambda req: err(409, "conflict", "busy")
        res = sbx.try_in_copy(self.sb, "step")
        self.assertTrue(res.kept)
        self.assertRegex(res.leftover, r"^dev-old-[a-z0-9]{6}$")
        self.assertEqual(sum(1 for r in self.f.srv.requests if r.method == "DELETE"), 3)
        self.assertEqual(self.f.find("dev")["id"], res.sandbox.id)

    def test_fork_error_changes_nothing(self) -> None:
        self.f.fail[f"POST /v1/sandboxes/{self.sb.id}/fork"] = lambda req: err(409, "sandbox_has_volume")
        with self.assertRaises(sbx.SandboxHasVolume):
            sbx.try_in_copy(self.sb, "step")
        self.assertEqual(self.f.writes(), [f"POST /v1/sandboxes/{self.sb.id}/fork"])

    def test_fork_copy_error_is_raised(self) -> None:
        self.f.fail[f"POST /v1/sandboxes/{self.sb.id}/fork"] = lambda req: nd(
            {"type": "complete", "data": {"snapshot": "s", "copies": [{"error": {"code": "fork_failed", "message": "no"}}]}})
        with self.assertRaises(sbx.ForkFailed):
            sbx.try_in_copy(self.sb, "step")

    def test_stream_error_line_is_typed(self) -> None:
        self.f.fail[f"POST /v1/sandboxes/{self.sb.id}/fork"] = lambda req: nd(
            {"type": "info", "data": "x"}, {"type": "error", "error": "boom", "code": "fork_failed"})
        with self.assertRaises(sbx.ForkFailed) as cm:
            sbx.try_in_copy(self.sb, "step")
        self.assertEqual((cm.exception.status, cm.exception.message), (0, "boom"))


class GuardedFake(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)
        self.sb = self.f.add("dev")
        self.f.srv.requests.clear()

    def execs(self) -> List[Dict[str, Any]]:
        return [r.json() for r in self.f.srv.requests if r.path.endswith("/exec")]

    def test_one_guarded_exec_reports_the_class(self) -> None:
        # guarded is one exec with undo auto and rollback; the class and the
        # rollback come from the answer's undo object.
        self.f.exec_fn = lambda box, body: {"exit_code": 1, "undo": {
            "kind": "none", "class": "git", "rolled_back": True,
            "git": {"repo": "/workspace/r", "head": "abc", "ref": "refs/heads/main",
                    "index_tree": "t1", "work_tree": "t2"}}}
        g = sbx.guarded(self.sb, "rm x", cwd="/work space/r/sub")
        self.assertEqual((g.undo, g.rolled_back, g.result.exit_code, g.rollback_error), ("git", True, 1, ""))
        self.assertIs(g.sandbox, self.sb)
        self.assertEqual(self.execs(), [{"cmd": ["sh", "-c", "rm x"], "cwd": "/work space/r/sub",
                                         "undo": "auto", "rollback_on_failure": True}])
        self.assertEqual(self.f.writes(), [f"POST /v1/sandboxes/{self.sb.id}/exec"])

    def test_rollback_error_and_argv(self) -> None:
        self.f.exec_fn = lambda box, body: {"exit_code": 2, "undo": {
            "kind": "checkpoint", "class": "checkpoint", "checkpoint": "v4", "rolled_back": False,
            "rollback_error": "restore: busy"}}
        g = sbx.guarded(self.sb, ["rm", "-rf", "/workspace/x"])
        self.assertEqual((g.undo, g.rolled_back, g.rollback_error), ("checkpoint", False, "restore: busy"))
        self.assertEqual(g.result.undo.checkpoint, "v4")
        self.assertEqual(self.execs()[0]["cmd"], ["rm", "-rf", "/workspace/x"])

    def test_no_undo_object_is_none(self) -> None:
        g = sbx.guarded(self.sb, "ls")
        self.assertEqual((g.undo, g.rolled_back), ("none", False))

    def test_refused_undo_raises_typed(self) -> None:
        # Not in a git work tree with undo git: sbxd answers 409 and nothing runs.
        self.f.fail[f"POST /v1/sandboxes/{self.sb.id}/exec"] = lambda req: err(409, "conflict", "not a git work tree")
        with self.assertRaises(sbx.Conflict):
            sbx.guarded(self.sb, "git reset --hard")


class ClassifyFake(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)

    def test_checkpoint_for_asks_the_server(self) -> None:
        self.f.fail["POST /v1/classify"] = lambda req: js(200, {"undo": "git", "reason": "a git command"})
        c = sbx.checkpoint_for("git checkout -- .", self.f.client)
        self.assertEqual((c, c.undo, c.reason), ("git", "git", "a git command"))
        self.assertIsInstance(c, str)
        c = sbx.checkpoint_for(["rm", "-rf", "x"], self.f.client)
        self.assertEqual([r.json() for r in self.f.srv.requests],
                         [{"cmd": "git checkout -- ."}, {"cmd": ["rm", "-rf", "x"]}])

    def test_bad_command_is_typed(self) -> None:
        self.f.fail["POST /v1/classify"] = lambda req: err(400, "invalid_argument", "cmd: missing")
        with self.assertRaises(sbx.InvalidArgument):
            self.f.client.classify("")


class ChainFake(unittest.TestCase):
    def setUp(self) -> None:
        self.f = FakeSbxd()
        self.addCleanup(self.f.close)
        self.sb = self.f.add("dev", labels={"a": "b"})
        self.f.srv.requests.clear()

    def test_remember_chain_go_back(self) -> None:
        sbx.remember(self.sb, "one")
        req = self.f.srv.requests[-1]
        self.assertEqual(req.json(), {"name": "one", "retention_days": 1,
                                      "metadata": {"sbx_chain": {"sandbox": "dev", "step": "one"}}})
        self.assertIn("application/x-ndjson", req.headers.get("Accept", ""))
        sbx.remember(self.sb, "two")
        self.f.snapshots.append({"id": "snap_other", "name": "one", "sandbox": "dev", "metadata": {}})
        self.assertEqual([s.id for s in sbx.chain(self.sb)], ["snap_1", "snap_2"])
        self.assertEqual(self.f.srv.requests[-1].query, {"sandbox": ["dev"]})

        self.f.srv.requests.clear()
        with self.assertRaises(sbx.SnapshotNotFound):
            sbx.go_back_to(self.sb, "nine")
        self.assertEqual(self.f.writes(), [])

        old_id = self.sb.id
        new = sbx.go_back_to(self.sb, "one")
        create = [r for r in self.f.srv.requests if r.method == "POST" and r.path == "/v1/sandboxes"][0].json()
        self.assertEqual(create["snapshot"], "snap_1")
        self.assertRegex(create["name"], r"^dev-back-[a-z0-9]{6}$")
        self.assertEqual(create["labels"], {"a": "b"})
        self.assertEqual(create["network"]["internet"], True)
        self.assertEqual(new.name, "dev")
        self.assertIs(new, self.sb)                  # the handle follows the new sandbox
        self.assertNotEqual(self.sb.id, old_id)
        self.assertEqual(self.f.find("dev")["id"], self.sb.id)
        self.assertIsNone(self.f.find(old_id))

    def test_step_length(self) -> None:
        with self.assertRaises(sbx.InvalidArgument):
            sbx.remember(self.sb, "")
        with self.assertRaises(sbx.InvalidArgument):
            sbx.remember(self.sb, "é" * 32)     # 64 bytes
        self.assertEqual(self.f.srv.requests, [])


class NamesFake(unittest.TestCase):
    def test_long_names_fit(self) -> None:
        from sbx.undo import _derived
        # As Go's suffixed (client/undo.go): base cut to 63 - len(tag) - 8 bytes.
        n = _derived("a" * 63, "try")
        self.assertRegex(n, r"^a{52}-try-[a-z0-9]{6}$")
        self.assertRegex(_derived("a" * 63, "back"), r"^a{51}-back-[a-z0-9]{6}$")
        self.assertRegex(_derived("a" * 51 + "-", "back"), r"^a{51}-back-[a-z0-9]{6}$")
        self.assertRegex(_derived("a" * 51 + "-", "old"), r"^a{51}--old-[a-z0-9]{6}$")
        self.assertRegex(_derived("b" * 40, "longertag"), r"^b{40}-longertag-[a-z0-9]{6}$")
        self.assertEqual(len(_derived("c" * 63, "longertag")), 63)
        self.assertRegex(_derived("dev", "old"), r"^dev-old-[a-z0-9]{6}$")


if __name__ == "__main__":
    unittest.main()
