#!/usr/bin/env python3
"""Install-then-verify in a copy: keep a change only if a check passes.

First by hand (fork, run, check, keep or drop the copy), then with the
helper try_in_copy, which does the same and puts a kept copy in the
original's place under its name. Runs against a local sbxd: $SBX_URL
(+ $SBX_API_KEY) or $SBX_SOCKET. Everything runs offline; the "install"
is a small tool written into /usr/local/bin.

    PYTHONPATH=sdk/python python3 examples/python/try_in_copy.py
"""

import sys

from sbx import Sandbox, try_in_copy

INSTALL_BROKEN = "printf '#!/bin/sh\\necho helo\\n' > /usr/local/bin/greet && chmod +x /usr/local/bin/greet"
INSTALL_GOOD = "printf '#!/bin/sh\\necho hello\\n' > /usr/local/bin/greet && chmod +x /usr/local/bin/greet"
VERIFY = "greet | grep -qx hello"


def main() -> int:
    with Sandbox.create(cpus=1, memory_mb=512, labels={"example": "try_in_copy"}) as sb:
        sb.network.off()

        # By hand: a live copy of the sandbox, offline, tries the broken install.
        with sb.fork(network={"internet": False}) as copy:
            ran = copy.exec(f"{INSTALL_BROKEN} && {VERIFY}")
            print(f"in a copy: exit_code={ran.exit_code}")
            assert ran.exit_code != 0                 # failed: the copy goes at the end of the block
        assert sb.exec("command -v greet").exit_code != 0, "the original must be untouched"

        # With the helper: a broken install is thrown away ...
        res = try_in_copy(sb, INSTALL_BROKEN, verify=VERIFY)
        print(f"broken install: kept={res.kept} verify exit={res.verify.exit_code if res.verify else None}")
        assert not res.kept and res.sandbox is sb

        # ... a good one takes the original's place, under its name.
        name, old_id = sb.name, sb.id
        res = try_in_copy(sb, INSTALL_GOOD, verify=VERIFY)
        print(f"good install: kept={res.kept} sandbox={sb.name} ({sb.id}, was {old_id})")
        assert res.kept and sb.name == name and sb.id != old_id
        print("greet says:", sb.exec("greet").stdout.strip())
        print("try-in-copy: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
