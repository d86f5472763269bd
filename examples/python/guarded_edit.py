#!/usr/bin/env python3
"""A guarded edit that fails and rolls back (git undo), then one that passes.

guarded() classifies the command (checkpoint_for): an edit of files in a
git working tree takes a repository snapshot (kept under refs/sbx/guard),
and a failing command gets its working tree, index and branch back.

    PYTHONPATH=sdk/python python3 examples/python/guarded_edit.py
"""

import secrets
import sys

import sbx

SETUP = """set -e
mkdir -p /workspace/app && cd /workspace/app
git init -q -b main
git config user.email dev@example.invalid && git config user.name dev
echo 'limit = 1' > config.txt
git add config.txt && git commit -qm init
"""


def main() -> int:
    client = sbx.Client()
    sb = client.create("ex-guard-" + secrets.token_hex(3), cpus=1, memory_mb=512,
                       network={"internet": False})
    try:
        assert sb.exec(SETUP).exit_code == 0
        repo = "/workspace/app"

        # The edit breaks the check that follows it: exit 1, rolled back.
        bad = "sed -i 's/limit = 1/limit = oops/' config.txt && echo scratch > notes.txt && grep -q 'limit = [0-9]' config.txt"
        print("classified as:", sbx.checkpoint_for(bad))
        g = sbx.guarded(sb, bad, cwd=repo)
        print(f"bad edit: undo={g.undo} exit={g.result.exit_code} rolled_back={g.rolled_back}")
        assert g.undo == "git" and g.rolled_back
        assert sb.read_text(repo + "/config.txt") == "limit = 1\n"
        assert sb.exec("test -e notes.txt", cwd=repo).exit_code != 0, "untracked file must be gone"

        # A good edit stays.
        good = "sed -i 's/limit = 1/limit = 2/' config.txt && grep -q 'limit = [0-9]' config.txt"
        g = sbx.guarded(sb, good, cwd=repo)
        print(f"good edit: undo={g.undo} exit={g.result.exit_code} rolled_back={g.rolled_back}")
        assert not g.rolled_back and sb.read_text(repo + "/config.txt") == "limit = 2\n"
        return 0
    finally:
        sb.delete()


if __name__ == "__main__":
    sys.exit(main())
