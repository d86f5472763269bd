"""Integration tests against a real sbxd.

They read SBX_SOCKET, SBX_URL and SBX_API_KEY. With none set they are
skipped, unless CI=true: then they fail (a CI run must not pass by
skipping). Sandboxes are small (1 CPU, 512 MiB), offline, named with a
random suffix, and deleted at the end.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import subprocess
import sys
import time
import unittest
from typing import List, Optional

import sbx

SOCKET = os.environ.get("SBX_SOCKET") or ""
URL = os.environ.get("SBX_URL") or ""
KEY = os.environ.get("SBX_API_KEY") or ""
CI = os.environ.get("CI", "").lower() == "true"
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
OFFLINE = {"internet": False}


def rand_name(prefix: str) -> str:
    return f"py-{prefix}-{secrets.token_hex(3)}"


class Base(unittest.TestCase):
    client: sbx.Runtime

    @classmethod
    def setUpClass(cls) -> None:
        if not SOCKET and not URL:
            if CI:
                raise AssertionError("CI=true but none of SBX_SOCKET, SBX_URL, SBX_API_KEY is set")
            raise unittest.SkipTest("no sbxd: set SBX_SOCKET or SBX_URL (+ SBX_API_KEY)")
        cls.client = sbx.Runtime(url=URL, api_key=KEY) if URL else sbx.Runtime(socket=SOCKET)

    def new_sandbox(self, prefix: str, client: Optional[sbx.Runtime] = None, **kw) -> sbx.Sandbox:
        c = client or self.client
        kw.setdefault("network", OFFLINE)
        sb = c.create(rand_name(prefix), cpus=1, memory_mb=512, **kw)
        self.track(sb)
        return sb

    def track(self, sb: sbx.Sandbox) -> None:
        def cleanup() -> None:
            try:
                self.client.delete(sb.id)
            except sbx.SandboxNotFound:
                pass
        self.addCleanup(cleanup)

    def names(self) -> List[str]:
        return [s.name for s in self.client.list()]


class Transports(Base):
    def basics(self, c: sbx.Client) -> None:
        sb = self.new_sandbox("basic", client=c, labels={"suite": "py"})
        self.assertEqual(sb.state, "running")
        self.assertEqual(c.get(sb.name).id, sb.id)
        self.assertIn(sb.id, [x.id for x in c.list({"suite": "py"})])
        r = sb.exec("echo out; echo err >&2; exit 3")
        self.assertEqual((r.stdout, r.stderr, r.exit_code), ("out\n", "err\n", 3))
        r = sb.exec(["cat"], stdin="piped", cwd="/tmp", env={"X": "1"})
        self.assertEqual(r.stdout, "piped")
        out = sb.write_file("/workspace/d/a.txt", "hello\n", mode=0o600)
        self.assertEqual(out.get("size"), 6)
        self.assertEqual(sb.read_file("/workspace/d/a.txt"), b"hello\n")
        self.assertEqual([f.name for f in sb.list_files("/workspace/d")], ["a.txt"])
        self.assertEqual(sb.list_files("/workspace/d")[0].mode, 0o600)
        sb.delete_file("/workspace/d/a.txt")
        with self.assertRaises(sbx.FileNotFound):
            sb.read_file("/workspace/d/a.txt")
        sb.delete()
        with self.assertRaises(sbx.SandboxNotFound):
            c.get(sb.id)

    def test_socket(self) -> None:
        if not SOCKET:
            self.skipTest("SBX_SOCKET not set")
        self.basics(sbx.Client(socket=SOCKET))

    def test_tcp_with_key(self) -> None:
        if not URL:
            self.skipTest("SBX_URL not set")
        self.basics(sbx.Client(url=URL, api_key=KEY))
        with self.assertRaises(sbx.Unauthorized) as cm:
            sbx.Client(url=URL, api_key="wrong-key-0123456789").list()
        self.assertEqual(cm.exception.status, 401)

    def test_missing_sandbox_is_typed(self) -> None:
        with self.assertRaises(sbx.SandboxNotFound) as cm:
            self.client.get(rand_name("missing"))
        e = cm.exception
        self.assertIsInstance(e, sbx.NotFound)
        self.assertEqual((e.code, e.status), ("sandbox_not_found", 404))
        with self.assertRaises(sbx.SandboxNotFound):
            self.client.delete(rand_name("missing"))


class Sandboxes(Base):
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.sb = cls.client.create(rand_name("shared"), cpus=1, memory_mb=512, network=OFFLINE)

    @classmethod
    def tearDownClass(cls) -> None:
        try:
            cls.sb.delete()
        except sbx.SbxError:
            pass

    def test_stream(self) -> None:
        with self.sb.exec_stream("for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2; exit 5") as st:
            events = list(st)
        types = [e.type for e in events]
        self.assertEqual(types[0], "start")
        self.assertEqual(types[-1], "exit")
        self.assertEqual("".join(e.data for e in events if e.type == "stdout"), "1\n2\n3\n")
        self.assertEqual(events[-1].exit_code, 5)
        res = self.sb.exec_stream("echo a; echo b >&2").wait()
        self.assertEqual((res.stdout, res.stderr, res.exit_code), ("a\n", "b\n", 0))

    def test_invalid_argument(self) -> None:
        with self.assertRaises(sbx.InvalidArgument) as cm:
            self.sb.exec(["no-such-program-xyz"])
        self.assertTrue(cm.exception.message.startswith("cmd"), cm.exception.message)

    def test_name_taken(self) -> None:
        with self.assertRaises(sbx.NameTaken):
            self.client.create(self.sb.name, cpus=1, memory_mb=512, network=OFFLINE)

    def test_network_rules(self) -> None:
        rules = self.sb.network.set(internet=True, allow=["Never-Contacted.example."])
        self.assertEqual(rules.allow, ["never-contacted.example"])
        self.assertEqual(self.sb.network.get(), rules)
        self.assertEqual(self.sb.network.get()["allow"], ["never-contacted.example"])
        self.assertEqual(self.sb.get_network(), rules)
        log = self.sb.network.log()
        self.assertIsInstance(log.counts.dns_refused, int)
        self.assertFalse(self.sb.network.off().internet)
        self.assertTrue(self.sb.network.on().internet)
        self.sb.network.set(sbx.NetworkRules(internet=False))
        self.assertFalse(self.sb.network.get().internet)
        with self.assertRaises(sbx.InvalidArgument):
            self.sb.network.set({"internet": True, "alow": []})


def screen_until(p: "sbx.Pty", seen: List[bytes], want: bytes) -> None:
    """Read the terminal until its output (from the start) contains want."""
    while want not in b"".join(seen):
        b = p.read()
        if not b:
            raise AssertionError(f"the terminal ended without showing {want!r}: {b''.join(seen)!r}")
        seen.append(b)


class Terminals(Base):
    def test_pty_keep_attach(self) -> None:
        sb = self.new_sandbox("pty")
        p = sb.pty(["sh"], rows=30, cols=100, keep=True, env={"PS1": "$ "})
        self.assertGreater(p.pid, 0)
        s1: List[bytes] = []
        p.write("X=alive-$((40+2)); stty size\r")
        screen_until(p, s1, b"30 100")
        p.resize(40, 120)
        p.write("stty size\r")
        screen_until(p, s1, b"40 120")
        # Ctrl-C (typed) interrupts the foreground job, not the shell.
        # (The child prints once it runs in the foreground group.)
        p.write("sh -c 'echo rdy-$((2+3)); exec sleep 100' && echo not-interrupted\r")
        screen_until(p, s1, b"rdy-5")
        p.write(b"\x03")
        p.write("echo after-$((1+1))\r")
        screen_until(p, s1, b"after-2")
        self.assertNotIn(b"not-interrupted", b"".join(s1).split(b"rdy-5", 1)[1])  # (the typed line echoes it before)
        with self.assertRaises(sbx.Conflict):
            sb.attach_pty(p.pid)
        p.close()
        a = None
        for _ in range(100):
            try:
                a = sb.attach_pty(p.pid, rows=33, cols=101)
                break
            except sbx.Conflict:  # the first client's claim ends as sbxd sees it go
                time.sleep(0.1)
        self.assertIsNotNone(a)
        s2: List[bytes] = []
        screen_until(a, s2, b"after-2")  # replayed
        a.write("echo $X; stty size; exit 7\r")
        screen_until(a, s2, b"alive-42")
        screen_until(a, s2, b"33 101")
        self.assertEqual(a.wait(), 7)
        plain = sb.start(["sleep", "60"])
        with self.assertRaises(sbx.InvalidArgument):
            sb.attach_pty(plain)
        # A signal goes to the command's process group: its exit says so.
        sl = sb.pty(["sleep", "100"])
        sl.signal(15)
        self.assertEqual(sl.wait(), 143)


class Checkpoints(Base):
    def test_checkpoint_restore_diff(self) -> None:
        sb = self.new_sandbox("ckpt")
        sb.write_file("/workspace/f.txt", "one")
        lines: List[str] = []
        cp = sb.checkpoint("first", progress=lines.append)
        self.assertEqual(cp.id, "v1")
        self.assertEqual(cp.comment, "first")
        self.assertTrue(lines, "progress lines")
        sb.write_file("/workspace/f.txt", "two")
        sb.write_file("/workspace/g.txt", "new")
        d = sb.diff("v1")
        self.assertIn("/workspace/g.txt", [c.path for c in d.added])
        self.assertIn("/workspace/f.txt", [c.path for c in d.modified])
        self.assertEqual([c.id for c in sb.list_checkpoints()], ["v1", "v0"])
        self.assertEqual(sb.get_checkpoint("v1").health, "ok")
        with self.assertRaises(sbx.CheckpointNotFound):
            sb.get_checkpoint("v9")
        sb.restore("v1")
        self.assertEqual(sb.state, "stopped")
        self.assertEqual(sb.read_text("/workspace/f.txt"), "one")
        with self.assertRaises(sbx.FileNotFound):
            sb.read_file("/workspace/g.txt")

    def test_server_guarded_exec(self) -> None:
        sb = self.new_sandbox("sguard")
        r = sb.exec("echo x > /workspace/x.txt; exit 2", undo="checkpoint", rollback_on_failure=True)
        self.assertEqual(r.exit_code, 2)
        self.assertIsNotNone(r.undo)
        assert r.undo is not None
        self.assertEqual(r.undo.kind, "checkpoint")
        self.assertTrue(r.undo.rolled_back)
        with self.assertRaises(sbx.FileNotFound):
            sb.read_file("/workspace/x.txt")
        # streamed: the exit line carries the undo
        with sb.exec_stream("ls /", undo="auto") as st:
            ev = [e for e in st][-1]
        self.assertEqual(ev.type, "exit")
        self.assertIsNotNone(ev.undo)
        assert ev.undo is not None
        self.assertEqual(ev.undo.undo_class, "none")


class Deliveries(Base):
    def test_deliver_list_get_archive(self) -> None:
        sb = self.new_sandbox("dlv")
        sb.write_file("/workspace/out/result.txt", "delivered by py\n")
        lines: List[str] = []
        d = sb.deliver(["/workspace/out"], name="py-release", metadata={"ticket": "T-16"},
                       progress=lines.append)
        self.assertTrue(d.id.startswith("dlv_"), d.id)
        self.assertEqual((d.name, d.sandbox, d.sandbox_id, d.files), ("py-release", sb.name, sb.id, 1))
        self.assertEqual(d.metadata, {"ticket": "T-16"})
        self.assertRegex(d.archive_digest, r"^sha256:[0-9a-f]{64}$")
        self.assertEqual(d.envelope.get("payloadType"), "application/vnd.in-toto+json")
        self.assertIsNone(d.teardown)
        self.assertIsNotNone(d.create_time)
        self.assertIn(d.id, [x.id for x in self.client.list_deliveries(sb.name)])
        self.assertIn(d.id, [x.id for x in self.client.list_deliveries()])
        self.assertEqual([x.id for x in sb.list_deliveries()], [d.id])
        self.assertEqual(self.client.get_delivery(d.id).digest, d.digest)
        archive = self.client.delivery_archive(d.id)
        self.assertEqual(len(archive), d.archive_bytes)
        self.assertEqual(archive[:4], b"\x28\xb5\x2f\xfd")  # zstd frame magic
        self.assertEqual("sha256:" + hashlib.sha256(archive).hexdigest(), d.archive_digest)
        out = subprocess.run(["sh", "-c", "zstd -dc | tar -xOf - workspace/out/result.txt"],
                             input=archive, capture_output=True, check=True)
        self.assertEqual(out.stdout, b"delivered by py\n")
        buf = io.BytesIO()
        self.assertEqual(self.client.write_delivery_archive(d.id, buf), d.archive_bytes)
        self.assertEqual(buf.getvalue(), archive)
        self.assertTrue(self.client.delivery_public_key().startswith(b"-----BEGIN PUBLIC KEY-----"))
        with self.assertRaises(sbx.InvalidArgument) as cm:
            sb.deliver(["/workspace/no-such-file"])
        self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_argument", 400))
        self.assertIn("/workspace/no-such-file", cm.exception.message)
        with self.assertRaises(sbx.NotFound):
            self.client.get_delivery("dlv_missing" + secrets.token_hex(3))

    def test_deliver_teardown(self) -> None:
        sb = self.new_sandbox("dlvtd")
        sb.write_file("/workspace/r.txt", "x")
        d = sb.deliver(["/workspace/r.txt"], teardown=True)
        self.assertIsNotNone(d.teardown)
        assert d.teardown is not None
        self.assertTrue(d.teardown.deleted, d.teardown)
        self.assertIn("container", d.teardown.removed)
        self.assertEqual(d.teardown.left, [])
        with self.assertRaises(sbx.SandboxNotFound):
            self.client.get(sb.id)


class TryInCopy(Base):
    def copies_of(self, name: str) -> List[str]:
        return [n for n in self.names() if n.startswith(name + "-try-") or n.startswith(name[:52] + "-try-")]

    def test_verify_fails(self) -> None:
        sb = self.new_sandbox("tryv")
        res = sbx.try_in_copy(sb, "echo changed > /workspace/f", "false")
        self.assertFalse(res.kept)
        self.assertIs(res.sandbox, sb)
        self.assertEqual(res.step.exit_code, 0)
        self.assertIsNotNone(res.verify)
        assert res.verify is not None
        self.assertEqual(res.verify.exit_code, 1)
        self.assertEqual(res.leftover, "")
        with self.assertRaises(sbx.FileNotFound):
            sb.read_file("/workspace/f")          # the original is untouched
        self.assertEqual(self.client.get(sb.name).id, sb.id)
        self.assertEqual(self.copies_of(sb.name), [])   # the copy is deleted

    def test_step_fails(self) -> None:
        sb = self.new_sandbox("trys")
        res = sbx.try_in_copy(sb, "exit 7", "touch /workspace/verified")
        self.assertFalse(res.kept)
        self.assertEqual(res.step.exit_code, 7)
        self.assertIsNone(res.verify)             # verify did not run
        self.assertEqual(self.copies_of(sb.name), [])
        self.assertEqual(sb.exec("test -e /workspace/verified").exit_code, 1)

    def test_pass_promotes(self) -> None:
        sb = self.new_sandbox("tryp", labels={"who": "py"})
        name, old_id = sb.name, sb.id
        rules = sb.set_network({"internet": True, "allow": ["never-contacted.example"]})
        res = sbx.try_in_copy(sb, "echo v2 > /workspace/f", "grep -q v2 /workspace/f")
        self.assertTrue(res.kept)
        self.track(res.sandbox)
        self.assertEqual(res.leftover, "")
        new = self.client.get(name)
        self.assertEqual(new.id, res.sandbox.id)
        self.assertNotEqual(new.id, old_id)
        self.assertEqual(new.name, name)
        self.assertEqual(res.sandbox.name, name)
        self.assertEqual(new.get_network(), rules)
        self.assertEqual(new.labels, {"who": "py"})
        self.assertEqual(new.read_text("/workspace/f"), "v2\n")
        with self.assertRaises(sbx.SandboxNotFound):
            self.client.get(old_id)
        self.assertEqual(self.copies_of(name), [])
        self.assertEqual([n for n in self.names() if n.startswith(name + "-old-")], [])


class Guarded(Base):
    def test_git_rollback(self) -> None:
        sb = self.new_sandbox("gg")
        setup = ("set -e; mkdir -p /workspace/r && cd /workspace/r && git init -q -b main && "
                 "git config user.email t@example.invalid && git config user.name t && "
                 "echo one > a.txt && git add a.txt && git commit -qm init && echo staged > s.txt && git add s.txt")
        self.assertEqual(sb.exec(setup).exit_code, 0, "git setup")
        cmd = "echo broken > a.txt && rm s.txt && echo junk > new.txt && git add -A && git commit -qm bad && false"
        self.assertEqual(sbx.checkpoint_for(cmd), "git")
        g = sbx.guarded(sb, cmd, cwd="/workspace/r")
        self.assertEqual(g.undo, "git")
        self.assertEqual(g.result.exit_code, 1)
        self.assertTrue(g.rolled_back, g.rollback_error)
        r = sb.exec("cat a.txt; git status --porcelain; git log --oneline | wc -l", cwd="/workspace/r")
        self.assertEqual(r.stdout, "one\nA  s.txt\n1\n")
        ok = sbx.guarded(sb, "echo two > a.txt", cwd="/workspace/r")
        self.assertEqual((ok.undo, ok.rolled_back), ("git", False))
        self.assertEqual(sb.read_text("/workspace/r/a.txt"), "two\n")

    def test_git_falls_back_to_checkpoint(self) -> None:
        sb = self.new_sandbox("gf")
        g = sbx.guarded(sb, "echo x > f.txt && false", cwd="/workspace")
        assert g.result.undo is not None
        self.assertEqual(g.result.undo.kind, "checkpoint")   # not in a work tree: a disk checkpoint
        self.assertTrue(g.rolled_back, g.rollback_error)
        with self.assertRaises(sbx.FileNotFound):
            sb.read_file("/workspace/f.txt")

    def test_checkpoint_class(self) -> None:
        sb = self.new_sandbox("gc")
        cmd = "touch /etc/sbx-marker && exit 3"
        self.assertEqual(sbx.checkpoint_for(cmd), "checkpoint")
        g = sbx.guarded(sb, cmd)
        self.assertEqual((g.undo, g.rolled_back, g.result.exit_code), ("checkpoint", True, 3))
        self.assertEqual(sb.exec("test -e /etc/sbx-marker").exit_code, 1)
        ok = sbx.guarded(sb, "touch /etc/sbx-marker")
        self.assertEqual((ok.undo, ok.rolled_back), ("checkpoint", False))
        self.assertEqual(sb.exec("test -e /etc/sbx-marker").exit_code, 0)

    def test_none(self) -> None:
        sb = self.new_sandbox("gn")
        g = sbx.guarded(sb, "ls /workspace")
        self.assertEqual((g.undo, g.rolled_back, g.result.exit_code), ("none", False, 0))


class Chain(Base):
    def test_remember_go_back(self) -> None:
        sb = self.new_sandbox("ch", labels={"k": "v"})
        name, old_id = sb.name, sb.id

        def drop_snapshots() -> None:
            for s in self.client.list_snapshots():
                if (s.metadata or {}).get("sbx_chain", {}).get("sandbox") == name:
                    try:
                        self.client.delete_snapshot(s.id)
                    except sbx.SnapshotNotFound:
                        pass
        self.addCleanup(drop_snapshots)
        sb.write_file("/workspace/state", "1")
        s1 = sbx.remember(sb, "one")
        self.assertEqual(s1.metadata, {"sbx_chain": {"sandbox": name, "step": "one"}})
        sb.write_file("/workspace/state", "2")
        sbx.remember(sb, "two")
        self.assertEqual([s.name for s in sbx.chain(sb)], ["one", "two"])
        with self.assertRaises(sbx.SnapshotNotFound):
            sbx.go_back_to(sb, "three")
        self.assertEqual(self.client.get(name).id, old_id)     # nothing changed
        back = sbx.go_back_to(sb, "one")
        self.assertIs(back, sb)
        self.track(back)
        self.assertEqual(back.name, name)
        self.assertEqual(self.client.get(name).id, back.id)
        self.assertNotEqual(back.id, old_id)
        self.assertEqual(back.labels, {"k": "v"})
        self.assertEqual(back.read_text("/workspace/state"), "1")
        with self.assertRaises(sbx.SandboxNotFound):
            self.client.get(old_id)
        self.assertEqual([s.name for s in sbx.chain(back)], ["one", "two"])
        with self.assertRaises(sbx.InvalidArgument):
            sbx.remember(back, "x" * 64)


class Examples(Base):
    def run_example(self, name: str) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.join(ROOT, "sdk", "python")
        p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "python", name)],
                           env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, f"{name}:\n{p.stdout}\n{p.stderr}")

    def test_try_in_copy_example(self) -> None:
        self.run_example("try_in_copy.py")

    def test_guarded_edit_example(self) -> None:
        self.run_example("guarded_edit.py")

    def test_chain_example(self) -> None:
        self.run_example("chain.py")


if __name__ == "__main__":
    unittest.main()
