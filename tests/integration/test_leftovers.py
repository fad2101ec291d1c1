"""Many create/delete cycles leave nothing behind: after every delete the sandbox's own processes,
cgroups, mounts and directory are gone, and at the end the host holds only the pool's sandboxes."""

import os
import time

import spacelib

CYCLES = int(os.environ.get("SPACE_TEST_CYCLES", "1000"))
POOL = 2


def test_create_delete_cycles_leave_nothing(daemon, client):
    uid_procs_before = {p for p in spacelib.processes_in_uid_range()}
    t0 = time.monotonic()
    failures = []
    for i in range(CYCLES):
        # Alternate pooled (default limits) and freshly started (explicit limits) sandboxes.
        kw = {"template": "busybox", "labels": {"cycle": str(i)}}
        if i % 2:
            kw["pids"] = 64
        sb = client.create(**kw)
        sid = sb["id"]
        if i % 10 == 0:
            r = client.sh(sid, "echo alive")
            assert r.out == "alive\n", r
        fp = spacelib.footprint(sid, daemon.state, daemon.pid)
        assert fp.pids, f"cycle {i}: no host process found for {sid} (cgroup naming changed?)"
        client.delete(sid)
        left = fp.remaining(daemon.pid)
        if left:
            failures.append((i, sid, left))
            assert len(failures) < 3, f"leftovers after delete: {failures}"
        if (i + 1) % 100 == 0:
            print(f"leftovers: {i + 1}/{CYCLES} cycles, {time.monotonic() - t0:.0f}s", flush=True)
    assert not failures, failures

    # Let the pool settle, then look at the whole host.
    time.sleep(2)
    listed = {s["id"] for s in client.list()}
    pool_ids = daemon.sandbox_dir_ids() - listed
    assert len(pool_ids) <= POOL, f"sandbox directories beyond the pool: {sorted(pool_ids)}"
    # A pooled sandbox was created by the daemon, never handed out.
    assert not (pool_ids & client.created), "a deleted sandbox's directory is still there"

    ours = daemon.seen_ids()
    cg_ids = spacelib.space_cgroup_ids() & ours
    assert cg_ids <= pool_ids | listed, f"cgroups of deleted sandboxes: {sorted(cg_ids - pool_ids - listed)}"

    for pid, uid in spacelib.processes_in_uid_range().items():
        if pid in uid_procs_before:
            continue
        ids = spacelib.pid_cgroup_ids(pid)
        if ids and not (ids & ours):
            continue  # another daemon's sandbox on this host
        assert ids and ids <= pool_ids | listed, (
            f"process {pid} uid {uid:#x} ({spacelib.read(f'/proc/{pid}/comm').strip()}) cgroups {ids} "
            f"does not belong to a live sandbox")

    # The layer volume (snapshots, docs/snapshots.md) is the daemon's own, mounted once for its lifetime.
    allowed = {str(daemon.state / "sandboxes"), str(daemon.state / "volume")}
    for mp in set(spacelib.all_mountpoints()) | set(spacelib.all_mountpoints(daemon.pid)):
        if mp.startswith(str(daemon.state) + "/") and mp not in allowed:
            assert any(p in mp for p in pool_ids | listed), f"stray mount {mp}"

    for name in os.listdir(daemon.state / "sandboxes") if (daemon.state / "sandboxes").is_dir() else []:
        if spacelib.SANDBOX_ID_RE.fullmatch(name):
            assert name in pool_ids | listed, f"leftover directory {name}"
    assert client.healthy()
