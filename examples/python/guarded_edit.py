#!/usr/bin/env python3
"""A guarded edit that fails and rolls back (git undo), then one that passes.

guarded() is one exec with undo "auto" and rollback on failure: sbxd
classifies the command (checkpoint_for asks it the same question) and, for
an edit in a git work tree, snapshots the repository first; a command that
exits non-zero gets its work tree, index and branch back.

    PYTHONPATH=sdk/python python3 examples/python/guarded_edit.py
"""

import sys

from sbx import Sandbox, checkpoint_for, guarded

SETUP = """set -e
mkdir -p /workspace/app && cd /workspace/app
git init -q -b main
git config user.email dev@example.invalid && git config user.name dev
echo 'limit = 1' > config.txt
git add config.txt && git commit -qm init
"""


def main() -> int:
    with Sandbox.create(cpus=1, memory_mb=512, network={"internet": False}) as sb:
        assert sb.exec(SETUP).exit_code == 0
        repo = "/workspace/app"

        # The edit breaks the check that follows it: exit 1, rolled back.
        bad = ("sed -i 's/limit = 1/limit = oops/' config.txt && "
               "echo scratch > notes.txt && grep -q 'limit = [0-9]' config.txt")
        kind = checkpoint_for(bad)
        print(f"classified as: {kind} ({kind.reason})")
        g = guarded(sb, bad, cwd=repo)
        print(f"bad edit: undo={g.undo} exit_code={g.result.exit_code} rolled_back={g.rolled_back}")
        assert g.rolled_back, g.rollback_error
        assert sb.read_text(repo + "/config.txt") == "limit = 1\n"
        assert sb.exec("test -e notes.txt", cwd=repo).exit_code != 0, "the untracked file must be gone"

        # A good edit stays.
        good = "sed -i 's/limit = 1/limit = 2/' config.txt && grep -q 'limit = [0-9]' config.txt"
        g = guarded(sb, good, cwd=repo)
        print(f"good edit: undo={g.undo} exit_code={g.result.exit_code} rolled_back={g.rolled_back}")
        assert not g.rolled_back and sb.read_text(repo + "/config.txt") == "limit = 2\n"
        print("guarded-edit: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
