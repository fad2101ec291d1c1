"""Snapshots of jail and VM sandboxes: snapshot, rollback and fork latency."""

import time

from phases.common import TEMPLATE, VM_MEMORY_MIB, percentile, summarize


def phase_snapshot(d, n, fork_rounds, res, notes):
    """jail.snapshot (10 MiB and 1 GiB written), jail.rollback and jail.fork (10 children) through the API."""
    c = d.client
    made = []
    try:
        for label, mib in (("10mib", 10), ("1gib", 1024)):
            sb = d.create({"template": TEMPLATE, "disk_mib": 2048})
            made.append(sb["id"])
            c.json("POST", f"/v1/sandboxes/{sb['id']}/exec",
                   {"cmd": ["/bin/sh", "-c", f"dd if=/dev/urandom of=/root/data bs=1M count={mib} 2>/dev/null; sync"],
                    "timeout_s": 600}, expect=(200,))
            usage = c.json("GET", f"/v1/sandboxes/{sb['id']}")[1].get("usage", {})
            written = usage.get("disk_bytes", 0) >> 20
            if written < mib:
                raise RuntimeError(f"the sandbox's layer holds {written} MiB, not the {mib} MiB written")
            notes.setdefault("jail.snapshot_layers_mib", {})[label] = written
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                _, snap = c.json("POST", f"/v1/sandboxes/{sb['id']}/snapshots", {}, expect=(201,))
                times.append((time.perf_counter() - t0) * 1000)
                c.json("DELETE", f"/v1/snapshots/{snap['id']}", None, expect=(204,))
            res[f"jail.snapshot_{label}"] = summarize(times)
        notes["jail.snapshot"] = {"how": "POST .../snapshots on a sandbox holding 10 MiB or 1 GiB of written, synced "
                                         "data: freeze, syncfs, FICLONE of the layer image, fsync, rename, row"}
        sb = made[0]
        _, snap = c.json("POST", f"/v1/sandboxes/{sb}/snapshots", {"name": "base"}, expect=(201,))
        times = []
        for _ in range(n):
            c.json("POST", f"/v1/sandboxes/{sb}/exec", {"cmd": ["/bin/sh", "-c", "rm -rf /root/data /etc"]},
                   expect=(200,))
            t0 = time.perf_counter()
            c.json("POST", f"/v1/sandboxes/{sb}/rollback", {"snapshot": "base"})
            times.append((time.perf_counter() - t0) * 1000)
        res["jail.rollback"] = summarize(times)
        notes["jail.rollback"] = {"how": "POST .../rollback after rm -rf: processes stopped, layer cloned from the "
                                         "snapshot, the sandbox started again in place (same address), agent answers"}
        times = []
        for _ in range(fork_rounds):
            t0 = time.perf_counter()
            _, out = c.json("POST", f"/v1/sandboxes/{sb}/fork", {"count": 10, "snapshot": snap["id"]}, expect=(201,))
            times.append((time.perf_counter() - t0) * 1000)
            for k in out["sandboxes"]:
                d.delete(k["id"])
        res["jail.fork10"] = summarize(times)
        notes["jail.fork10"] = {"how": "POST .../fork count=10 from an existing snapshot; returns when all 10 children "
                                       "answer"}
    finally:
        for sid in made:
            d.delete(sid)


def phase_vm_snapshot(d, n, fork_rounds, res, notes):
    """vm.snapshot_full (memory + device state + disk of a running VM), vm.rollback (in place, processes
    continue from the snapshot) and vm.fork (4 children) through the API."""
    c = d.client
    _, node = c.json("GET", "/v1/node")
    vm = (node or {}).get("isolation", {}).get("vm", {})
    if not vm.get("available"):
        notes["vm.snapshot"] = {"error": f"vm tier unavailable: {vm.get('reason', 'unknown')}"}
        return
    c.json("POST", f"/v1/templates/{TEMPLATE}/warm", {})
    sb = d.create({"template": TEMPLATE, "isolation": "vm"})["id"]
    kids = []
    try:
        # A guest with some state of its own: 16 MiB of files in its page cache and on its disk, a process.
        c.json("POST", f"/v1/sandboxes/{sb}/exec",
               {"cmd": ["/bin/sh", "-c", "dd if=/dev/urandom of=/root/data bs=1M count=16 2>/dev/null; sync"],
                "timeout_s": 300}, expect=(200,))
        c.json("POST", f"/v1/sandboxes/{sb}/processes", {"cmd": ["/bin/sh", "-c", "while true; do sleep 1; done"]},
               expect=(200, 201))
        times, sizes = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            _, snap = c.json("POST", f"/v1/sandboxes/{sb}/snapshots", {}, expect=(201,))
            times.append((time.perf_counter() - t0) * 1000)
            sizes.append(snap.get("size_bytes", 0))
            c.json("DELETE", f"/v1/snapshots/{snap['id']}", None, expect=(204,))
        res["vm.snapshot_full"] = summarize(times)
        _, base = c.json("POST", f"/v1/sandboxes/{sb}/snapshots", {"name": "base"}, expect=(201,))
        times = []
        for _ in range(n):
            c.json("POST", f"/v1/sandboxes/{sb}/exec", {"cmd": ["/bin/sh", "-c", "rm -rf /root/data"]}, expect=(200,))
            t0 = time.perf_counter()
            c.json("POST", f"/v1/sandboxes/{sb}/rollback", {"snapshot": "base"})
            times.append((time.perf_counter() - t0) * 1000)
        res["vm.rollback"] = summarize(times)
        times = []
        for _ in range(fork_rounds):
            t0 = time.perf_counter()
            _, out = c.json("POST", f"/v1/sandboxes/{sb}/fork", {"count": 4, "snapshot": base["id"]}, expect=(201,))
            times.append((time.perf_counter() - t0) * 1000)
            for k in out["sandboxes"]:
                d.delete(k["id"])
        res["vm.fork4"] = summarize(times)
        notes["vm.snapshot"] = {
            "accel": vm.get("accel"), "guest_memory_mib": VM_MEMORY_MIB,
            "snapshot_bytes_p50": percentile(sorted(sizes), 50) if sizes else None,
            "snapshot_full": "POST .../snapshots on a running VM (16 MiB written, a process): guest stopped, device "
                             "state, the guest's own pages (pagemap), overlay clone, guest resumed, fsync, rename, row",
            "rollback": "POST .../rollback after rm -rf: VMM killed, a new one maps the template, the snapshot's "
                        "pages written in, device state loaded, agent answers, new RNG seed and clock",
            "fork4": "POST .../fork count=4 from a snapshot; returns when all 4 children answer with their identity"}
    finally:
        for sid in kids + [sb]:
            d.delete(sid)
