#!/usr/bin/env python3
"""A five-step chain of memory snapshots with a go-back.

Each step that passes is remembered (a memory snapshot kept by sbxd, so a
restarted agent can still go back); go_back_to replaces the sandbox by one
started from a step's snapshot, running, with that step's memory and
processes, under the same name. A snapshot is also a starting point:
runtime.sandboxes.create(snapshot=...) starts a new sandbox from one.

    PYTHONPATH=sdk/python python3 examples/python/chain.py
"""

import sys

from sbx import Runtime, chain, go_back_to, remember

runtime = Runtime()


def main() -> int:
    sb = runtime.sandboxes.create(cpus=1, memory_mb=512, network={"internet": False})
    try:
        # A process whose memory is part of every snapshot: it counts on.
        # Written whole each time (a rename): a reader never finds it empty.
        sb.start("i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks.new && mv /tmp/ticks.new /tmp/ticks; sleep 0.2; done")
        for n in range(1, 6):
            assert sb.exec(f"echo step-{n} >> /workspace/log.txt").exit_code == 0
            snap = remember(sb, f"step-{n}")
            print(f"remembered step-{n}: {snap.id}")
        print("chain:", [s.name for s in chain(sb)])

        # A snapshot starts a new sandbox too, beside the first.
        with runtime.sandboxes.create(snapshot=snap.id, network={"internet": False}) as other:
            assert other.read_text("/workspace/log.txt").split()[-1] == "step-5"

        old_id = sb.id
        go_back_to(sb, "step-2")
        log = sb.read_text("/workspace/log.txt")
        print(f"back at step-2: {sb.name} ({sb.id}, was {old_id}); log: {log.split()}")
        assert log.split() == ["step-1", "step-2"]
        # The counting process came back with the memory: it still counts.
        r = sb.exec("a=$(cat /tmp/ticks); sleep 1; b=$(cat /tmp/ticks); echo $a $b; [ $b -gt $a ]")
        print("ticks:", r.stdout.strip())
        assert r.exit_code == 0
        # Later steps stay in the chain: one could go forward again.
        assert [s.name for s in chain(sb)][-1] == "step-5"
        print("chain: OK")
        return 0
    finally:
        for s in chain(sb):
            runtime.snapshots.delete(s.id)
        sb.delete()


if __name__ == "__main__":
    sys.exit(main())
