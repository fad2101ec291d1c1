"""exec on a warm sandbox: the request to its first stdout byte and to its exit."""

import os
import time

from phases.common import TEMPLATE, summarize


def phase_exec(d, n, res, notes):
    c = d.client
    sb = d.create({"template": TEMPLATE})
    try:
        for _ in range(5):
            c.exec(sb["id"], ["/bin/true"])
        ms, floor = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            _, t_exit, code, _ = c.exec(sb["id"], ["/bin/true"])
            if t_exit is None or code != 0:
                raise RuntimeError(f"/bin/true: exit={code}")
            ms.append((t_exit - t0) * 1000)
            # The machine's floor, interleaved: the same static busybox spawned and reaped on the host.
            t0 = time.perf_counter()
            pid = os.posix_spawn("/bin/busybox", ["true"], {})
            os.waitpid(pid, 0)
            floor.append((time.perf_counter() - t0) * 1000)
        res["jail.exec_roundtrip"] = summarize(ms)
        res["host.spawn_floor"] = summarize(floor)
        notes["jail.exec_roundtrip"] = {"n": n, "what": "POST exec /bin/true in a running sandbox to the exit event"}
        notes["host.spawn_floor"] = {"n": n, "what": "posix_spawn + waitpid of the host's static busybox 'true', "
                                     "interleaved with the exec samples: what one process costs on this machine"}
    finally:
        d.delete(sb["id"])
