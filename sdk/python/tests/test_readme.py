"""Every ```python block of sdk/python/README.md, run against a real sbxd.

Each block is a complete program (```py blocks are fragments and are not
run). They read SBX_SOCKET, SBX_URL and SBX_API_KEY as a user's program
would; with none set the test skips, unless CI=true.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "README.md")
CI = os.environ.get("CI", "").lower() == "true"


def blocks() -> "list[tuple[int, str]]":
    """(line number, code) of each ```python block."""
    with open(README) as f:
        text = f.read()
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```$", text, re.M | re.S):
        out.append((text.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


class Readme(unittest.TestCase):
    def test_blocks_are_found(self) -> None:
        self.assertGreaterEqual(len(blocks()), 6)

    def test_python_blocks_run(self) -> None:
        if not os.environ.get("SBX_SOCKET") and not os.environ.get("SBX_URL"):
            if CI:
                raise AssertionError("CI=true but none of SBX_SOCKET, SBX_URL is set")
            self.skipTest("no sbxd: set SBX_SOCKET or SBX_URL (+ SBX_API_KEY)")
        env = dict(os.environ, PYTHONPATH=os.path.abspath(os.path.join(HERE, "..")))
        for line, code in blocks():
            with self.subTest(line=line):
                p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                   timeout=600)
                self.assertEqual(p.returncode, 0, f"README.md:{line}:\n{code}\n{p.stdout}\n{p.stderr}")


if __name__ == "__main__":
    unittest.main()
