"""The three patterns of issue 17, written as a user writes them, against a real sbxd: sync and async.

Try in a copy, guard (a failing command rolls back), and a snapshot chain
with a go-back, each twice: by hand with the plain verbs (``fork``,
``exec``, ``snapshot``, ``sandboxes.create(snapshot=...)``) and with the
helpers. The default client comes from the environment (SBX_URL +
SBX_API_KEY, else SBX_SOCKET), as in a user's program; with none set the
tests skip, unless CI=true.
"""

from __future__ import annotations

import asyncio
import os
import unittest

from sbx import Runtime, Sandbox, chain, checkpoint_for, go_back_to, guarded, remember, try_in_copy
from sbx.aio import AsyncRuntime, AsyncSandbox
import sbx.aio

CI = os.environ.get("CI", "").lower() == "true"
SMALL = {"cpus": 1, "memory_mb": 512, "network": {"internet": False}}
REPO = ("mkdir -p /workspace/app && cd /workspace/app && git init -q -b main && "
        "git config user.email a@example.invalid && git config user.name a && "
        "echo 1 > cfg.txt && git add cfg.txt && git commit -qm init")


def setUpModule() -> None:
    if not os.environ.get("SBX_SOCKET") and not os.environ.get("SBX_URL"):
        if CI:
            raise AssertionError("CI=true but none of SBX_SOCKET, SBX_URL is set")
        raise unittest.SkipTest("no sbxd: set SBX_SOCKET or SBX_URL (+ SBX_API_KEY)")


class Sync(unittest.TestCase):
    def test_try_in_a_copy(self) -> None:
        with Sandbox.create(**SMALL) as sb:
            sb.exec("echo v1 > /workspace/version")
            # By hand: fork, try, keep the result only if it passed.
            copy = sb.fork(network={"internet": False})
            self.assertIsInstance(copy, Sandbox)
            try:
                ran = copy.exec("echo v2 > /workspace/version && grep -q v3 /workspace/version")
                self.assertNotEqual(ran.exit_code, 0)
            finally:
                copy.delete()
            self.assertEqual(sb.read_text("/workspace/version"), "v1\n")
            # With the helper: a passing step replaces the original under its name.
            name = sb.name
            res = try_in_copy(sb, "echo v2 > /workspace/version", verify="grep -q v2 /workspace/version")
            self.assertTrue(res.kept)
            self.assertEqual((sb.name, sb.read_text("/workspace/version")), (name, "v2\n"))
            res = try_in_copy(sb, "rm /workspace/version", verify="test -e /workspace/version")
            self.assertFalse(res.kept)
            self.assertEqual(sb.read_text("/workspace/version"), "v2\n")

    def test_guard(self) -> None:
        with Sandbox.create(**SMALL) as sb:
            self.assertEqual(sb.exec(REPO).exit_code, 0)
            bad = "sed -i s/1/2/ cfg.txt && echo junk > junk.txt && false"
            self.assertEqual(checkpoint_for(bad), "git")
            g = guarded(sb, bad, cwd="/workspace/app")
            self.assertEqual((g.undo, g.result.exit_code), ("git", 1))
            self.assertTrue(g.rolled_back, g.rollback_error)
            st = sb.exec("cat cfg.txt; git status --porcelain", cwd="/workspace/app")
            self.assertEqual(st.stdout, "1\n")               # the edit and the untracked file are gone
            ok = guarded(sb, "sed -i s/1/2/ cfg.txt", cwd="/workspace/app")
            self.assertFalse(ok.rolled_back)
            self.assertEqual(sb.read_text("/workspace/app/cfg.txt"), "2\n")
            # Outside a work tree, a failing command that writes files gets the disk back.
            g = guarded(sb, "echo x > /workspace/new.txt && false", cwd="/workspace")
            self.assertTrue(g.rolled_back, g.rollback_error)
            self.assertNotEqual(sb.exec("test -e /workspace/new.txt").exit_code, 0)

    def test_chain(self) -> None:
        runtime = Runtime()
        with runtime.sandboxes.create(**SMALL) as sb:
            try:
                # By hand: a snapshot, and a sandbox started from it.
                sb.exec("echo 1 > /workspace/log")
                snap = sb.snapshot(name="by-hand", retention_days=1, metadata={"step": 1})
                self.assertTrue(snap.id)
                with runtime.sandboxes.create(snapshot=snap.id, network={"internet": False}) as again:
                    self.assertEqual(again.read_text("/workspace/log"), "1\n")
                runtime.snapshots.delete(snap.id)
                # With the helpers: remember, chain, go back.
                for n in (2, 3):
                    sb.exec(f"echo {n} >> /workspace/log")
                    remember(sb, f"step-{n}")
                self.assertEqual([s.name for s in chain(sb)], ["step-2", "step-3"])
                name = sb.name
                go_back_to(sb, "step-2")
                self.assertEqual((sb.name, sb.read_text("/workspace/log")), (name, "1\n2\n"))
            finally:
                for s in chain(sb):
                    runtime.snapshots.delete(s.id)


class Async(unittest.TestCase):
    def test_try_in_a_copy(self) -> None:
        async def main() -> None:
            async with AsyncSandbox.create(**SMALL) as sb:
                await sb.exec("echo v1 > /workspace/version")
                copy = await sb.fork(network={"internet": False})
                self.assertIsInstance(copy, AsyncSandbox)
                async with copy:
                    ran = await copy.exec("echo v2 > /workspace/version && grep -q v3 /workspace/version")
                    self.assertNotEqual(ran.exit_code, 0)
                self.assertEqual(await sb.read_text("/workspace/version"), "v1\n")
                res = await sbx.aio.try_in_copy(sb, "echo v2 > /workspace/version",
                                                verify="grep -q v2 /workspace/version")
                self.assertTrue(res.kept)
                self.assertEqual(await sb.read_text("/workspace/version"), "v2\n")
        asyncio.run(main())

    def test_guard(self) -> None:
        async def main() -> None:
            async with AsyncSandbox.create(**SMALL) as sb:
                self.assertEqual((await sb.exec(REPO)).exit_code, 0)
                bad = "sed -i s/1/2/ cfg.txt && false"
                self.assertEqual(await sbx.aio.checkpoint_for(bad), "git")
                g = await sbx.aio.guarded(sb, bad, cwd="/workspace/app")
                self.assertEqual(g.undo, "git")
                self.assertTrue(g.rolled_back, g.rollback_error)
                self.assertEqual(await sb.read_text("/workspace/app/cfg.txt"), "1\n")
        asyncio.run(main())

    def test_chain(self) -> None:
        async def main() -> None:
            runtime = AsyncRuntime()
            async with runtime.sandboxes.create(**SMALL) as sb:   # awaited inside, deleted at the end
                try:
                    for n in (1, 2):
                        await sb.exec(f"echo {n} >> /workspace/log")
                        await sbx.aio.remember(sb, f"step-{n}")
                    self.assertEqual([s.name for s in await sbx.aio.chain(sb)], ["step-1", "step-2"])
                    await sbx.aio.go_back_to(sb, "step-1")
                    self.assertEqual(await sb.read_text("/workspace/log"), "1\n")
                    stream = await sb.exec_stream("echo a; echo b >&2; exit 4")
                    res = await stream.wait()
                    self.assertEqual((res.stdout, res.stderr, res.exit_code), ("a\n", "b\n", 4))
                finally:
                    for s in await sbx.aio.chain(sb):
                        await runtime.snapshots.delete(s.id)
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
