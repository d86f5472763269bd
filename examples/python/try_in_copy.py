#!/usr/bin/env python3
"""Install-then-verify in a copy: try_in_copy keeps a change only if a check passes.

Runs against a local sbxd: $SBX_URL (+ $SBX_API_KEY) or $SBX_SOCKET.
The copy runs offline ({"internet": false}); here the "install" is a
small tool written into /usr/local/bin, so nothing leaves the machine.

    PYTHONPATH=sdk/python python3 examples/python/try_in_copy.py
"""

import secrets
import sys

import sbx

INSTALL_BROKEN = "printf '#!/bin/sh\\necho helo\\n' > /usr/local/bin/greet && chmod +x /usr/local/bin/greet"
INSTALL_GOOD = "printf '#!/bin/sh\\necho hello\\n' > /usr/local/bin/greet && chmod +x /usr/local/bin/greet"
VERIFY = "greet | grep -qx hello"


def main() -> int:
    client = sbx.Client()
    name = "ex-try-" + secrets.token_hex(3)
    sb = client.create(name, cpus=1, memory_mb=512, network={"internet": False},
                       labels={"example": "try_in_copy"})
    try:
        # 1. A broken install: verify fails, the copy is thrown away.
        res = sbx.try_in_copy(sb, INSTALL_BROKEN, VERIFY)
        print(f"broken install: kept={res.kept} verify exit={res.verify.exit_code if res.verify else None}")
        assert not res.kept and res.sandbox.id == sb.id
        assert sb.exec("command -v greet").exit_code != 0, "the original must be untouched"

        # 2. A good install: verify passes, the copy takes the original's place.
        old_id = sb.id
        res = sbx.try_in_copy(sb, INSTALL_GOOD, VERIFY)
        print(f"good install: kept={res.kept} sandbox={res.sandbox.name} ({res.sandbox.id}, was {old_id})")
        assert res.kept and res.sandbox.name == name and res.sandbox is sb and sb.id != old_id
        sb = res.sandbox      # the same handle, now on the promoted copy
        print("greet says:", sb.exec("greet").stdout.strip())
        return 0
    finally:
        sb.delete()


if __name__ == "__main__":
    sys.exit(main())
