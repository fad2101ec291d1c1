"""The vm tier: pooled and cold VM starts, exec in a VM, and the VMM's memory per idle VM."""

import os
import time

from lib.client import ApiError
from lib.host import pss_kb

from phases.common import TEMPLATE, VM_MEMORY_MIB, VM_POOL_SIZE, log, summarize
from phases.idle import settled_meminfo


def qemu_pids():
    out = set()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip().startswith("qemu-system"):
                    out.add(int(d))
        except OSError:
            pass
    return out


def phase_vm(d, n, cold_n, idle_n, res, notes):
    """The vm tier: template warm-up, create -> first output from the pool (restored, stopped VMs),
    cold boot of the same kernel and agent without the snapshot, pause/resume, idle memory per VM."""
    c = d.client
    _, node = c.json("GET", "/v1/node")
    vm = (node or {}).get("isolation", {}).get("vm", {})
    if not vm.get("available"):
        notes["vm"] = {"error": f"vm tier unavailable: {vm.get('reason', 'unknown')}"}
        return
    note = {"accel": vm.get("accel"), "guest_memory_mib": VM_MEMORY_MIB}
    notes["vm"] = note
    t0 = time.perf_counter()
    _, warm = c.json("POST", f"/v1/templates/{TEMPLATE}/warm", {})
    note["template_warm_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    note["template_dir"] = warm.get("dir")
    key = f'space_pool_ready{{template="vm:{TEMPLATE}"}}'

    def wait_vm_pool(want, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if c.metrics().get(key, 0) >= want:
                return True
            time.sleep(0.05)
        return False

    if not wait_vm_pool(VM_POOL_SIZE, 180):
        raise RuntimeError(f"vm pool did not fill; log:\n{d.log_tail(10)}")
    first_ms, create_ms, errors, unrefilled = [], [], [], 0
    for i in range(n):
        if not wait_vm_pool(VM_POOL_SIZE, 30):
            unrefilled += 1
        t0 = time.perf_counter()
        sb = d.create({"template": TEMPLATE, "isolation": "vm"})
        create_ms.append((time.perf_counter() - t0) * 1000)
        try:
            t_first, _, code, out = c.exec(sb["id"], ["/bin/echo", "hi"])
            if t_first is None or code != 0 or b"hi" not in out:
                errors.append(f"sample {i}: exit={code} out={out[:100]!r}")
            else:
                first_ms.append((t_first - t0) * 1000)
        except (ApiError, ValueError) as e:
            errors.append(f"sample {i}: {str(e)[:300]}")
        if i == 0:
            # pause/resume on the first VM, many times
            pauses, resumes = [], []
            for _ in range(max(20, n)):
                p0 = time.perf_counter()
                c.json("POST", f"/v1/sandboxes/{sb['id']}/pause", {})
                p1 = time.perf_counter()
                c.json("POST", f"/v1/sandboxes/{sb['id']}/resume", {})
                p2 = time.perf_counter()
                pauses.append((p1 - p0) * 1000)
                resumes.append((p2 - p1) * 1000)
            res["vm.pause"] = summarize(pauses)
            res["vm.resume"] = summarize(resumes)
            _, _, code, out = c.exec(sb["id"], ["/bin/echo", "hi"])
            if code != 0:
                errors.append(f"exec after pause/resume: exit={code}")
        d.delete(sb["id"])
        if (i + 1) % 10 == 0:
            log(f"vm create: {i + 1}/{n}")
    if first_ms:
        res["vm.create_to_first_output"] = summarize(first_ms)
        res["vm.create"] = summarize(create_ms)
    note["create_errors"] = errors[:5]
    note["create_unrefilled_pool"] = unrefilled
    note["create_to_first_output"] = ("POST /v1/sandboxes {isolation: vm} until the first stdout byte of "
                                      "`echo hi`, pooled VMs (restored from the template, exercised, stopped)")

    cold = []
    for i in range(cold_n):
        t0 = time.perf_counter()
        sb = d.create({"template": TEMPLATE, "isolation": "vm", "cold_boot": True})
        t_first, _, code, out = c.exec(sb["id"], ["/bin/echo", "hi"])
        if t_first is not None and code == 0:
            cold.append((t_first - t0) * 1000)
        d.delete(sb["id"])
    if cold:
        res["vm.cold_boot_to_first_output"] = summarize(cold)

    # Idle memory: idle_n VMs created fresh (memory given explicitly, so not from the pool), Pss of their
    # VMMs summed (pages shared with the template's memory are split between the sharers, so counted once).
    before = qemu_pids()
    mem0 = settled_meminfo()
    ids = []
    try:
        for i in range(idle_n):
            sb = d.create({"template": TEMPLATE, "isolation": "vm", "memory_mib": VM_MEMORY_MIB, "ttl_s": 1800})
            ids.append(sb["id"])
            c.exec(sb["id"], ["/bin/true"])
        time.sleep(2.0)
        mem1 = settled_meminfo()
        pids = qemu_pids() - before
        per_vm = [pss_kb([p]) / 1024 for p in sorted(pids)]  # one VMM per VM: one sample per VM
        pss = sum(per_vm)
        if per_vm:
            res["vm.idle_host_mib_per_vm"] = summarize(per_vm, "MiB")
        note["idle"] = {"vms": len(pids), "pss_mib_total": round(pss, 1),
                        "pss_mib_mean_per_vm": round(pss / max(1, len(pids)), 3),
                        "memavailable_drop_mib_per_vm": round((mem0.get("MemAvailable", 0) -
                                                               mem1.get("MemAvailable", 0)) / 1024 / max(1, idle_n), 2),
                        "how": "Pss of each VMM of idle_n VMs of 256 MiB (fresh restores), one sample per VM, read "
                               "together after all were idle; the template's memory is a memfd whose pages the "
                               "VMMs share, and Pss splits those between the sharers"}
    finally:
        for sid in ids:
            try:
                d.delete(sid)
            except Exception as e:  # noqa: BLE001
                log(f"vm idle: delete {sid}: {e}")
