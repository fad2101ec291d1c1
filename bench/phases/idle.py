"""Idle cost: host memory and PSS per idle sandbox, and pause/resume of a sandbox."""

import time

from lib.host import meminfo, pss_kb

from phases.common import TEMPLATE, aggregate, log, summarize
from phases.daemon import daemon_and_agent_pids


def settled_meminfo(samples=5, gap=0.2):
    """Median of a few /proc/meminfo readings per field, to damp other processes' churn."""
    reads = []
    for i in range(samples):
        if i:
            time.sleep(gap)
        reads.append(meminfo())
    return {k: sorted(r.get(k, 0) for r in reads)[len(reads) // 2] for k in reads[0]}


def phase_idle(d, n, res, notes):
    """Host memory per idle sandbox. Created with a non-default limit (pids) so none comes from the pool
    and the pool does not refill during the measurement."""
    c = d.client
    time.sleep(1.0)
    m0 = c.metrics()
    mem0 = settled_meminfo()
    pss0 = pss_kb(daemon_and_agent_pids(d.proc.pid))
    ids = []
    try:
        t0 = time.perf_counter()
        for i in range(n):
            sb = d.create({"template": TEMPLATE, "pids": 300, "ttl_s": 1800})
            ids.append(sb["id"])
            if (i + 1) % 50 == 0:
                log(f"idle: {i + 1}/{n}")
        create_s = time.perf_counter() - t0
        time.sleep(2.0)
        m1 = c.metrics()
        mem1 = settled_meminfo()
        pss1 = pss_kb(daemon_and_agent_pids(d.proc.pid))

        def per(field, sign=1):
            return sign * (mem1.get(field, 0) - mem0.get(field, 0)) / 1024 / n

        avail = per("MemAvailable", -1)
        pss = (pss1 - pss0) / 1024 / n
        kernel = per("Slab") + per("PageTables") + per("KernelStack")
        attributed = pss + kernel
        fresh = m1.get('space_sandbox_creates_total{source="fresh"}', 0) - \
            m0.get('space_sandbox_creates_total{source="fresh"}', 0)
        # Both are host-wide readings before and after all n sandboxes: one figure, not n samples.
        res["jail.idle_host_mib_per_sandbox"] = aggregate(
            avail, n, "MiB", "one reading: drop in MemAvailable over the n sandboxes, divided by n")
        res["jail.idle_attributed_mib_per_sandbox"] = aggregate(
            attributed, n, "MiB", "one reading: growth of Pss + Slab + PageTables + KernelStack over the n "
                                  "sandboxes, divided by n")
        note = {
            "n": n,
            "idle_host_mib_per_sandbox": "drop in MemAvailable (median of 5 readings before and after) after "
                                         "creating n idle sandboxes (fresh starts, pids=300), divided by n; "
                                         "host-wide, so other activity on the machine shows up in it",
            "idle_attributed_mib_per_sandbox": "Pss of the sandboxes' processes + growth of Slab, PageTables "
                                               "and KernelStack, per sandbox",
            "pss_mib_per_sandbox": round(pss, 3),
            "slab_mib_per_sandbox": round(per("Slab"), 3),
            "pagetables_mib_per_sandbox": round(per("PageTables"), 3),
            "kernelstack_mib_per_sandbox": round(per("KernelStack"), 3),
            "shmem_mib_per_sandbox": round(per("Shmem"), 3),
            "pss_of": "descendants of spaced and space-agent processes, smaps_rollup; pooled ones cancel out",
            "fresh_creates": int(fresh),
            "pool_ready_before_after": [d.pool_ready(m0), d.pool_ready(m1)],
            "serial_create_s": round(create_s, 2)}
        if avail < 0.5 * attributed:
            note["warning"] = "MemAvailable moved less than the attributed memory: host noise (other processes)"
        notes["jail.idle_host_mib_per_sandbox"] = note
    finally:
        for sid in ids:
            try:
                d.delete(sid)
            except Exception as e:  # noqa: BLE001
                log(f"idle: delete {sid}: {e}")


def phase_pause(d, n, res, notes):
    """jail.pause / jail.resume through the API (cgroup freezer) on a sandbox running a busy loop."""
    c = d.client
    sb = d.create({"template": TEMPLATE, "pids": 300})
    try:
        c.json("POST", f"/v1/sandboxes/{sb['id']}/processes",
               {"cmd": ["/bin/sh", "-c", "while true; do :; done"]}, expect=(200, 201))
        pauses, resumes = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            c.json("POST", f"/v1/sandboxes/{sb['id']}/pause", {})
            t1 = time.perf_counter()
            c.json("POST", f"/v1/sandboxes/{sb['id']}/resume", {})
            t2 = time.perf_counter()
            pauses.append((t1 - t0) * 1000)
            resumes.append((t2 - t1) * 1000)
        res["jail.pause"] = summarize(pauses)
        res["jail.resume"] = summarize(resumes)
        notes["jail.pause"] = {"how": "POST .../pause then .../resume on a sandbox whose background process spins; "
                                      "the API call returns once the freezer reports FROZEN / THAWED"}
    finally:
        d.delete(sb["id"])
