"""sbx.types: one full JSON object of each type (docs/api.md, api/types.go) and garbage tolerance."""

from __future__ import annotations

import dataclasses
import unittest
from datetime import datetime, timedelta, timezone
from typing import Any, Dict

from sbx import types as T

UTC = timezone.utc


def t(*a: int, us: int = 0, tz: Any = UTC) -> datetime:
    return datetime(*a, us, tzinfo=tz)  # type: ignore[misc]


GIT = {"repo": "/workspace/r", "head": "a" * 40, "ref": "refs/heads/main", "index_tree": "b" * 40,
       "work_tree": "c" * 40}
GIT_OBJ = T.GitUndo(repo="/workspace/r", head="a" * 40, ref="refs/heads/main", index_tree="b" * 40,
                    work_tree="c" * 40)
UNDO = {"kind": "checkpoint", "class": "checkpoint", "checkpoint": "v4", "snapshot": "snap_1", "git": GIT,
        "rolled_back": True, "rollback_error": "disk busy", "extra": 1}
UNDO_OBJ = T.UndoInfo(kind="checkpoint", undo_class="checkpoint", checkpoint="v4", snapshot="snap_1", git=GIT_OBJ,
                      rolled_back=True, rollback_error="disk busy")
CHANGE = {"path": "/workspace/a", "type": "file", "old_type": "symlink", "link_target": "b",
          "size": 12, "old_size": 3}
CHANGE_OBJ = T.Change(path="/workspace/a", type="file", old_type="symlink", link_target="b", size=12,
                      old_size=3)

# name -> (JSON object, the object it must give)
CASES: Dict[str, Any] = {
    "NetworkRules": (
        {"internet": False, "allow": ["pypi.org", "*.pythonhosted.org", "10.0.0.0/8"],
         "deny": ["evil.pypi.org"], "connect": ["db"]},
        T.NetworkRules(internet=False, allow=["pypi.org", "*.pythonhosted.org", "10.0.0.0/8"],
                       deny=["evil.pypi.org"], connect=["db"])),
    "Volume": ({"name": "cache", "path": "/cache"}, T.Volume(name="cache", path="/cache")),
    "Source": ({"sandbox": "dev", "snapshot": "snap_2"}, T.Source(sandbox="dev", snapshot="snap_2")),
    "SandboxInfo": (
        {"id": "sbx_4f2c0a9d1e7b3c55", "name": "dev", "state": "suspended", "image": "default",
         "cpus": 1.5, "memory_mb": 1024, "disk_mb": 10240, "env": {"CI": "1"}, "labels": {"team": "a"},
         "network": {"internet": False, "allow": ["pypi.org"], "deny": [], "connect": ["db"]},
         "volumes": [{"name": "cache", "path": "/cache"}], "timeout_ms": 600000,
         "keep_alive_while_running": True, "recovery_interval_ms": 30000,
         "recovery_time": "2026-11-29T10:04:00Z", "state_reason": "oom_killed: over 1024 MB",
         "wake_on": "deploy", "suspend_time": "2026-11-29T10:05:00.5Z",
         "create_time": "2026-11-29T10:00:00Z", "source": {"sandbox": "base", "snapshot": "snap_1"},
         "node": "n2", "future_field": [1, 2]},
        T.SandboxInfo(id="sbx_4f2c0a9d1e7b3c55", name="dev", state="suspended", image="default", cpus=1.5,
                      memory_mb=1024, disk_mb=10240, env={"CI": "1"}, labels={"team": "a"},
                      network=T.NetworkRules(internet=False, allow=["pypi.org"], connect=["db"]),
                      volumes=[T.Volume("cache", "/cache")], timeout_ms=600000,
                      keep_alive_while_running=True, recovery_interval_ms=30000,
                      recovery_time=t(2026, 11, 29, 10, 4, 0), state_reason="oom_killed: over 1024 MB",
                      wake_on="deploy", suspend_time=t(2026, 11, 29, 10, 5, 0, us=500000),
                      create_time=t(2026, 11, 29, 10, 0, 0),
                      source=T.Source(sandbox="base", snapshot="snap_1"), node="n2")),
    "UndoInfo": (UNDO, UNDO_OBJ),
    "GitUndo": (GIT, GIT_OBJ),
    "ExecResult": (
        {"pid": 42, "stdout": "ok\n", "stderr": "warn\n", "exit_code": 124, "duration_ms": 600001,
         "timed_out": True, "truncated": True, "undo": UNDO},
        T.ExecResult(stdout="ok\n", stderr="warn\n", exit_code=124, duration_ms=600001, pid=42,
                     timed_out=True, truncated=True, undo=UNDO_OBJ)),
    "ExecEvent": (
        {"type": "exit", "pid": 42, "data": "tail", "exit_code": 3, "duration_ms": 17,
         "timed_out": True, "error": "boom", "code": "internal", "undo": UNDO},
        T.ExecEvent(type="exit", data="tail", pid=42, exit_code=3, duration_ms=17, timed_out=True,
                    error="boom", code="internal", undo=UNDO_OBJ)),
    "FileInfo": (
        {"name": "l", "path": "/workspace/l", "type": "symlink", "size": 7, "mode": 420,
         "mod_time": "2026-11-29T10:00:00.123456789+02:00", "link_target": "target"},
        T.FileInfo(name="l", path="/workspace/l", type="symlink", size=7, mode=420,
                   mod_time=t(2026, 11, 29, 10, 0, 0, us=123456, tz=timezone(timedelta(hours=2))),
                   link_target="target")),
    "Checkpoint": (
        {"id": "v3", "create_time": "2026-11-29T10:00:00Z", "comment": "deps installed",
         "source_id": "v1", "health": "ok", "size_bytes": 24558, "files": 26, "added_bytes": 11268,
         "store_time": "2026-11-29T10:00:01Z"},
        T.Checkpoint(id="v3", create_time=t(2026, 11, 29, 10, 0, 0), comment="deps installed",
                     source_id="v1", health="ok", size_bytes=24558, files=26, added_bytes=11268,
                     store_time=t(2026, 11, 29, 10, 0, 1))),
    "Change": (CHANGE, CHANGE_OBJ),
    "Diff": (
        {"from": "v1", "to": "live", "added": [CHANGE], "modified": [CHANGE, CHANGE],
         "deleted": [{"path": "/gone", "type": "dir"}], "truncated": True},
        T.Diff(from_="v1", to="live", added=[CHANGE_OBJ], modified=[CHANGE_OBJ, CHANGE_OBJ],
               deleted=[T.Change(path="/gone", type="dir")], truncated=True)),
    "Snapshot": (
        {"id": "snap_1", "name": "before-deploy", "sandbox": "dev", "create_time": "2026-11-29T10:00:00Z",
         "expire_time": "2026-11-30T10:00:00Z", "memory_bytes": 1 << 30, "disk_bytes": 4096,
         "stored_bytes": 2048, "metadata": {"step": 3, "tags": ["a"]}, "billable": True, "health": "damaged",
         "store_time": "2026-11-29T10:00:01Z"},
        T.Snapshot(id="snap_1", name="before-deploy", sandbox="dev", create_time=t(2026, 11, 29, 10, 0, 0),
                   expire_time=t(2026, 11, 30, 10, 0, 0), memory_bytes=1 << 30, disk_bytes=4096,
                   stored_bytes=2048, metadata={"step": 3, "tags": ["a"]}, billable=True, health="damaged",
                   store_time=t(2026, 11, 29, 10, 0, 1))),
    "Process": (
        {"pid": 12, "cmd": ["sleep", "60"], "start_time": "2026-11-29T10:00:00Z", "state": "exited",
         "exit_code": 0, "output_bytes": 99},
        T.Process(pid=12, cmd=["sleep", "60"], start_time=t(2026, 11, 29, 10, 0, 0), state="exited",
                  exit_code=0, output_bytes=99)),
    "Port": ({"port": 3000, "address": "0.0.0.0", "pid": 12, "command": "python3",
              "preview_token": "key_0123456789abcdef.00ff"},
             T.Port(port=3000, address="0.0.0.0", pid=12, command="python3",
                    preview_token="key_0123456789abcdef.00ff")),
    "NetworkCounts": (
        {"dns_answered": 12, "dns_refused": 3, "connections_allowed": 4, "connections_refused": 1,
         "packets_refused": 7},
        T.NetworkCounts(dns_answered=12, dns_refused=3, connections_allowed=4, connections_refused=1,
                        packets_refused=7)),
    "NetworkRefusal": (
        {"time": "2026-11-29T10:00:03.120Z", "kind": "http", "destination": "evil.test",
         "address": "10.1.2.3", "port": 80, "reason": "not in the allow list", "count": 1},
        T.NetworkRefusal(time=t(2026, 11, 29, 10, 0, 3, us=120000), kind="http", destination="evil.test",
                         address="10.1.2.3", port=80, reason="not in the allow list", count=1)),
    "NetworkLog": (
        {"counts": {"dns_answered": 12, "dns_refused": 3, "connections_allowed": 4,
                    "connections_refused": 1, "packets_refused": 7},
         "refused": [{"time": "2026-11-29T10:00:01Z", "kind": "dns", "destination": "files.pythonhosted.org",
                      "reason": "not in the allow list", "count": 2}],
         "secrets": [{"time": "2026-11-29T10:00:02Z", "secret": "API_TOKEN", "host": "api.test", "method": "POST",
                      "path": "/items", "allowed": False, "reason": "no rule allows POST"}]},
        T.NetworkLog(counts=T.NetworkCounts(12, 3, 4, 1, 7),
                     refused=[T.NetworkRefusal(time=t(2026, 11, 29, 10, 0, 1), kind="dns",
                                               destination="files.pythonhosted.org",
                                               reason="not in the allow list", count=2)],
                     secrets=[T.SecretUse(time=t(2026, 11, 29, 10, 0, 2), secret="API_TOKEN", host="api.test",
                                          method="POST", path="/items", allowed=False,
                                          reason="no rule allows POST")])),
    "SecretUse": (
        {"time": "2026-11-29T10:00:02Z", "secret": "API_TOKEN", "host": "api.test", "method": "GET",
         "path": "/items", "allowed": True, "reason": "r"},
        T.SecretUse(time=t(2026, 11, 29, 10, 0, 2), secret="API_TOKEN", host="api.test", method="GET",
                    path="/items", allowed=True, reason="r")),
    "SecretRule": (
        {"host": "api.test", "methods": ["GET", "HEAD"], "path_prefix": "/items"},
        T.SecretRule(host="api.test", methods=["GET", "HEAD"], path_prefix="/items")),
    "Secret": (
        {"name": "API_TOKEN", "value": "v", "rules": [{"host": "api.test", "methods": ["GET"], "path_prefix": "/x"}]},
        T.Secret(name="API_TOKEN", value="v", rules=[T.SecretRule(host="api.test", methods=["GET"], path_prefix="/x")])),
    "SecretInfo": (
        {"name": "API_TOKEN", "placeholder": "sbx-secret-00", "value_bytes": 5, "update_time": "2026-11-29T10:00:00Z",
         "rules": [{"host": "api.test", "methods": ["GET"], "path_prefix": "/x"}]},
        T.SecretInfo(name="API_TOKEN", placeholder="sbx-secret-00", value_bytes=5, update_time=t(2026, 11, 29, 10, 0, 0),
                     rules=[T.SecretRule(host="api.test", methods=["GET"], path_prefix="/x")])),
    "Event": (
        {"id": "evt_1", "key": "deploy", "data": {"ref": "main"}, "data_text": "hello",
         "data_base64": "aGk=", "create_time": "2026-11-29T10:00:00Z", "deliver_time": "2026-11-29T10:00:02Z",
         "expire_time": "2026-11-30T10:00:00Z"},
        T.Event(id="evt_1", key="deploy", data={"ref": "main"}, data_text="hello", data_base64="aGk=",
                create_time=t(2026, 11, 29, 10, 0, 0), deliver_time=t(2026, 11, 29, 10, 0, 2),
                expire_time=t(2026, 11, 30, 10, 0, 0))),
    "EventResult": (
        {"id": "evt_1", "woken": ["dev", "ci"], "pending": True, "expire_time": "2026-11-30T10:00:00Z"},
        T.EventResult(id="evt_1", woken=["dev", "ci"], pending=True, expire_time=t(2026, 11, 30, 10, 0, 0))),
    "Image": (
        {"name": "default", "digest": "sha256:abc", "source": "build:bookworm", "size_bytes": 123456,
         "create_time": "2026-11-29T10:00:00Z", "env": ["PATH=/usr/bin", "LANG=C.UTF-8"]},
        T.Image(name="default", digest="sha256:abc", source="build:bookworm", size_bytes=123456,
                create_time=t(2026, 11, 29, 10, 0, 0), env=["PATH=/usr/bin", "LANG=C.UTF-8"])),
    "Health": ({"status": "ok", "version": "0.9.1", "runtime": "runsc/systrap", "platform": "systrap",
                "platform_reason": "no /dev/kvm", "warm_sandboxes": 2, "pid": 4242, "layers": "btrfs",
                "disk_quota": True, "default_disk_mb": 10240, "layers_note": "n", "checkpoints": "btrfs-snapshot",
                "capacity": {"host_cpus": 2, "host_memory_mb": 8192, "max_sandbox_cpus": 2.0,
                             "max_sandbox_memory_mb": 4096, "cpu_overcommit": 4.0, "memory_overcommit": 1.5,
                             "max_sandboxes": 64, "max_snapshots": 256}},
               T.Health(status="ok", version="0.9.1", runtime="runsc/systrap", platform="systrap",
                        platform_reason="no /dev/kvm", warm_sandboxes=2, pid=4242, layers="btrfs", disk_quota=True,
                        default_disk_mb=10240, layers_note="n", checkpoints="btrfs-snapshot",
                        capacity=T.HostCapacity(2, 8192, 2.0, 4096, 4.0, 1.5, 64, 256))),
    "NodeCapacity": ({"cpus": 2, "memory_bytes": 8 << 30, "free_memory_bytes": 6 << 30, "sandboxes": 3,
                      "images": ["img1"], "snapshot_images": ["snap_1"]},
                     T.NodeCapacity(2, 8 << 30, 6 << 30, 3, ["img1"], ["snap_1"])),
    "Node": ({"name": "n2", "url": "http://10.0.0.2:7070", "state": "draining", "version": "0.9.1", "protocol": 1,
              "epoch": 4, "self": True, "join_time": "2026-11-29T10:00:00Z", "heartbeat_time": "2026-11-29T10:05:00Z",
              "lease_expire_time": "2026-11-29T10:05:15Z",
              "capacity": {"cpus": 2, "memory_bytes": 8 << 30, "free_memory_bytes": 6 << 30, "sandboxes": 3,
                           "images": ["img1"], "snapshot_images": ["snap_1"]}},
             T.Node(name="n2", url="http://10.0.0.2:7070", state="draining", version="0.9.1", protocol=1, epoch=4,
                    self=True, join_time=t(2026, 11, 29, 10, 0, 0), heartbeat_time=t(2026, 11, 29, 10, 5, 0),
                    lease_expire_time=t(2026, 11, 29, 10, 5, 15),
                    capacity=T.NodeCapacity(2, 8 << 30, 6 << 30, 3, ["img1"], ["snap_1"]))),
    "HostCapacity": ({"host_cpus": 2, "host_memory_mb": 8192, "max_sandbox_cpus": 0.5,
                      "max_sandbox_memory_mb": 4096, "cpu_overcommit": 4.0, "memory_overcommit": 1.5,
                      "max_sandboxes": 64, "max_snapshots": 256},
                     T.HostCapacity(2, 8192, 0.5, 4096, 4.0, 1.5, 64, 256)),
    "Teardown": (
        {"deleted": True, "error": "left: layer", "layer_bytes": 4096, "checkpoints": 2,
         "checkpoint_bytes": 8192, "processes": 1, "removed": ["container", "network"], "left": ["layer"]},
        T.Teardown(deleted=True, error="left: layer", layer_bytes=4096, checkpoints=2, checkpoint_bytes=8192,
                   processes=1, removed=["container", "network"], left=["layer"])),
    "Delivery": (
        {"id": "dlv_0123456789abcdef", "name": "release-1", "seq": 3, "sandbox": "dev",
         "sandbox_id": "sbx_4f2c0a9d1e7b3c55", "archive_digest": "sha256:aa", "archive_bytes": 1234,
         "files": 6, "digest": "sha256:bb", "previous": "sha256:cc",
         "envelope": {"payloadType": "application/vnd.in-toto+json", "payload": "e30=",
                      "signatures": [{"keyid": "k", "sig": "c2ln"}]},
         "metadata": {"ticket": "T-16"}, "create_time": "2026-11-29T10:00:00Z",
         "teardown": {"deleted": True, "removed": ["container"]}},
        T.Delivery(id="dlv_0123456789abcdef", name="release-1", seq=3, sandbox="dev",
                   sandbox_id="sbx_4f2c0a9d1e7b3c55", archive_digest="sha256:aa", archive_bytes=1234, files=6,
                   digest="sha256:bb", previous="sha256:cc",
                   envelope={"payloadType": "application/vnd.in-toto+json", "payload": "e30=",
                             "signatures": [{"keyid": "k", "sig": "c2ln"}]},
                   metadata={"ticket": "T-16"}, create_time=t(2026, 11, 29, 10, 0, 0),
                   teardown=T.Teardown(deleted=True, removed=["container"]))),
}

# The fields that are not read from a JSON member of their own.
NOT_JSON = {"raw", "stdout_bytes", "stderr_bytes", "data_bytes"}
JSON_NAME = {("UndoInfo", "undo_class"): "class", ("Diff", "from_"): "from"}
# Fields whose value is kept as is (no type to check).
AS_IS = {("Snapshot", "metadata"), ("Event", "data"), ("Delivery", "metadata")}


def defaults(cls: Any) -> Any:
    """What a garbage input gives."""
    if cls in (T.Source, T.UndoInfo, T.Teardown, T.HostCapacity, T.GitUndo):
        return None
    if cls is T.Volume:
        return T.Volume("", "")
    if cls is T.ExecEvent:
        return T.ExecEvent(type="")
    return cls()


class TypesTest(unittest.TestCase):
    def test_every_type_is_covered(self) -> None:
        self.assertEqual(set(CASES), set(T.__all__) - {"parse_time", "wire_schema"})

    def test_full_objects(self) -> None:
        for name, (obj, want) in CASES.items():
            cls = getattr(T, name)
            with self.subTest(name):
                # the sample sets every field, to a value other than its default
                for f in dataclasses.fields(cls):
                    if f.name in NOT_JSON:
                        continue
                    self.assertIn(JSON_NAME.get((name, f.name), f.name), obj, f.name)
                    self.assertNotEqual(getattr(want, f.name), getattr(defaults(cls) or cls(), f.name), f.name)
                got = cls.from_dict(obj)
                self.assertIsInstance(got, cls)
                self.assertEqual(got, want)
                for f in dataclasses.fields(cls):
                    if f.name != "raw":
                        self.assertEqual(getattr(got, f.name), getattr(want, f.name), f.name)
                if any(f.name == "raw" for f in dataclasses.fields(cls)):
                    self.assertEqual(got.raw, obj)  # unknown fields included
                    self.assertIsNot(got.raw, obj)

    def test_times_are_aware(self) -> None:
        got = T.SandboxInfo.from_dict(CASES["SandboxInfo"][0])
        assert got.create_time is not None
        self.assertEqual(got.create_time.utcoffset(), timedelta(0))

    def test_exec_result_base64(self) -> None:
        got = T.ExecResult.from_dict({"stdout": "aGk=", "stderr": "/w==", "exit_code": 0},
                                     base64_encoded=True)
        self.assertEqual((got.stdout_bytes, got.stderr_bytes), (b"hi", b"\xff"))
        self.assertEqual((got.stdout, got.stderr), ("hi", "\ufffd"))
        self.assertEqual(got.raw["stdout"], "aGk=")
        self.assertTrue(got.ok)
        plain = T.ExecResult.from_dict({"stdout": "aGk="})
        self.assertEqual((plain.stdout, plain.stdout_bytes, plain.stderr_bytes), ("aGk=", None, None))
        empty = T.ExecResult.from_dict(None, base64_encoded=True)
        self.assertEqual((empty.stdout_bytes, empty.stdout), (b"", ""))

    def test_special_cases(self) -> None:
        self.assertTrue(T.NetworkRules.from_dict({}).internet)
        self.assertTrue(T.NetworkRules.from_dict({"internet": "no"}).internet)
        self.assertTrue(T.SandboxInfo.from_dict({"network": None}).network.internet)
        self.assertIsNone(T.Checkpoint.from_dict({"source_id": None}).source_id)
        self.assertIsNone(T.Checkpoint.from_dict({"source_id": 3}).source_id)
        self.assertIsNone(T.SandboxInfo.from_dict({"source": None}).source)
        self.assertIsNone(T.Delivery.from_dict({"id": "dlv_1"}).teardown)  # only with teardown
        self.assertIsNone(T.ExecResult.from_dict({"undo": "x"}).undo)
        for cls in (T.ExecEvent, T.Process):
            self.assertIsNone(cls.from_dict({}).exit_code)
            self.assertIsNone(cls.from_dict({"exit_code": "1"}).exit_code)
            self.assertIsNone(cls.from_dict({"exit_code": 1.0}).exit_code)
            self.assertIsNone(cls.from_dict({"exit_code": True}).exit_code)
            self.assertEqual(cls.from_dict({"exit_code": 0}).exit_code, 0)
        self.assertEqual(T.Snapshot.from_dict({"metadata": [1, "a"]}).metadata, [1, "a"])
        self.assertEqual(T.Snapshot.from_dict({"metadata": "s"}).metadata, "s")
        self.assertEqual(T.Event.from_dict({"data": 5}).data, 5)
        # ints accept floats and bools as before; strings do not
        self.assertEqual(T.Health.from_dict({"pid": 7.9, "warm_sandboxes": True}).pid, 7)
        self.assertEqual(T.Health.from_dict({"warm_sandboxes": True}).warm_sandboxes, 1)
        self.assertEqual(T.SandboxInfo.from_dict({"cpus": 2}).cpus, 2.0)
        self.assertEqual(T.SandboxInfo.from_dict({"cpus": True}).cpus, 0.0)
        self.assertEqual(T.SandboxInfo.from_dict({"env": {"N": 1}}).env, {"N": "1"})
        self.assertEqual(T.Image.from_dict({"env": ["A=1", 2, None]}).env, ["A=1"])
        self.assertEqual(T.Diff.from_dict({"added": [CHANGE, "x", 3, None]}).added, [CHANGE_OBJ])
        self.assertEqual(T.SandboxInfo.from_dict({"volumes": {"name": "v"}}).volumes, [])
        # to_dict round trip
        rules = CASES["NetworkRules"][1]
        self.assertEqual(T.NetworkRules.from_dict(rules.to_dict()), rules)
        self.assertEqual(T.Volume.from_dict(T.Volume("a", "/a").to_dict()), T.Volume("a", "/a"))

    def test_garbage_gives_defaults(self) -> None:
        for name in CASES:
            cls = getattr(T, name)
            with self.subTest(name):
                for junk in (None, 0, 1.5, True, "x", "", [], [{}], ["a"]):
                    got = cls.from_dict(junk)
                    self.assertEqual(got, defaults(cls), repr(junk))
                    if got is not None and hasattr(got, "raw"):
                        self.assertEqual(got.raw, {})

    def test_wrong_typed_members_give_defaults(self) -> None:
        for name, (obj, _) in CASES.items():
            cls = getattr(T, name)
            for wrong in ([[1]], [None], None):  # wrong for every field's type
                bad = {k: wrong for k in obj}
                bad["unknown"] = 1
                with self.subTest(name, wrong=wrong):
                    got = cls.from_dict(bad)
                    want = defaults(cls) or cls()
                    for f in dataclasses.fields(cls):
                        if f.name == "raw":
                            self.assertEqual(got.raw, bad)
                        elif (name, f.name) in AS_IS:
                            self.assertEqual(getattr(got, f.name), wrong)
                        else:
                            self.assertEqual(getattr(got, f.name), getattr(want, f.name), f.name)


if __name__ == "__main__":
    unittest.main()
