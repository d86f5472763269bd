"""The package's version and its wheel.

The version has one source, the repository's VERSION file: sbx/_version.py
must say the same, and pyproject.toml reads it from the package
(setuptools ``dynamic``). The wheel is built offline with the declared
backend (pip, no build isolation, no index); without pip or setuptools the
build test skips, unless CI=true.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import unittest
import zipfile

import sbx

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.abspath(os.path.join(HERE, ".."))
ROOT = os.path.abspath(os.path.join(PKG, "..", ".."))
CI = os.environ.get("CI", "").lower() == "true"


class Version(unittest.TestCase):
    def test_version_is_the_repository_version(self) -> None:
        with open(os.path.join(ROOT, "VERSION")) as f:
            want = f.read().strip()
        self.assertRegex(want, r"^\d+\.\d+\.\d+")
        self.assertEqual(sbx.__version__, want)

    def test_pyproject_reads_it_from_the_package(self) -> None:
        with open(os.path.join(PKG, "pyproject.toml")) as f:
            text = f.read()
        self.assertRegex(text, r'dynamic\s*=\s*\[\s*"version"\s*\]')
        self.assertIn('version = { attr = "sbx._version.__version__" }', text)
        project = text.split("[project]", 1)[1].split("\n[", 1)[0]
        self.assertIsNone(re.search(r'^version\s*=', project, re.M), "a second, static version in [project]")


def builder() -> "str | None":
    """A Python that can build the wheel with the declared backend: this one, else Debian's."""
    for py in (sys.executable, "/usr/bin/python3"):
        if os.path.exists(py) and subprocess.run([py, "-c", "import setuptools, wheel, pip"],
                                                 capture_output=True).returncode == 0:
            return py
    return None


class Wheel(unittest.TestCase):
    def test_wheel_builds_offline(self) -> None:
        py = builder()
        if py is None:
            if CI:
                raise AssertionError("no python3 with setuptools, wheel and pip (python3-setuptools, "
                                     "python3-wheel, python3-pip: scripts/install.sh --test-deps)")
            raise unittest.SkipTest("no python3 with setuptools, wheel and pip")
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as work:
            # Build from a copy, so that the source tree gets no build/ or egg-info.
            subprocess.run(["cp", "-r", PKG, os.path.join(work, "python")], check=True)
            p = subprocess.run([py, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                                "--no-index", "-q", "-w", out, os.path.join(work, "python")],
                               capture_output=True, text=True, timeout=600,
                               env=dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1"))
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            wheels = [w for w in os.listdir(out) if w.endswith(".whl")]
            self.assertEqual(wheels, [f"sbx_sdk-{sbx.__version__}-py3-none-any.whl"])
            with zipfile.ZipFile(os.path.join(out, wheels[0])) as z:
                names = set(z.namelist())
                meta = z.read(f"sbx_sdk-{sbx.__version__}.dist-info/METADATA").decode()
        for want in ("sbx/__init__.py", "sbx/aio.py", "sbx/client.py", "sbx/_version.py", "sbx/py.typed"):
            self.assertIn(want, names)
        self.assertFalse(any(n.startswith("tests/") for n in names), names)
        self.assertIn(f"Version: {sbx.__version__}", meta)


if __name__ == "__main__":
    unittest.main()
