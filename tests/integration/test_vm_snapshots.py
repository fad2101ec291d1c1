"""Snapshots, rollback and fork of VM sandboxes against real VMs (TCG where /dev/kvm is missing): a VM
snapshot holds memory, device state and disk, so processes continue where they were after a rollback
and in every fork child; children get their own identity and address; paused VMs stay paused; the
rolled-back VM survives a kill -9 of spaced. The generation signal a restore sends (SECURITY.md V9) is
tests/security/test_vm_generation.py. docs/snapshots.md."""

import os
import re

import pytest

import spacelib
from spacefixtures import own_vm_daemon
from spacelib import ApiError, Daemon, wait_for

SNAP_RE = re.compile(r"^snap-[0-9a-f]{16}$")
COUNTER = ("i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; "
           "sleep 0.2; done")


def count(client, sid) -> int:
    out = client.sh(sid, "cat /tmp/count 2>/dev/null").out.strip()
    return int(out) if out.isdigit() else -1


def start_counter(client, sid) -> dict:
    """A shell loop whose counter lives only in its memory: it continues from the snapshot's value after a
    restore only if the process (memory and all) was restored."""
    bg = client.start_process(sid, shell=COUNTER)
    wait_for(lambda: count(client, sid) > 0, timeout=60, what="the counter to start")
    return bg


def snapshot_dirs(d) -> set:
    names = set()
    for root in (d.state / "volume" / "snapshots", d.state / "snapshots"):
        if root.is_dir():
            names |= set(os.listdir(root))
    return names


def test_capabilities_say_a_vm_snapshot_holds_processes(client, make_vm):
    caps = client.get(make_vm())["capabilities"]
    assert caps["snapshot_memory"] is True and caps["rollback"] is True and caps["fork"] is True, caps


def test_rollback_continues_processes_from_the_snapshot_after_rm_rf_usr(client, make_vm):
    sid = make_vm()
    bg = start_counter(client, sid)
    client.upload(sid, "/root/work.txt", b"v1\n")
    s1 = client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "good"})
    assert SNAP_RE.match(s1["id"]) and s1["kind"] == "full" and s1["processes"] is True, s1
    at_snapshot = count(client, sid)
    wait_for(lambda: count(client, sid) > at_snapshot + 10, timeout=60, what="the counter to move on")
    client.upload(sid, "/root/work.txt", b"v2\n")
    client.sh(sid, "rm -rf /usr /root/work.txt; true")
    status, _, _ = client.raw("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["/usr/bin/env", "true"]})
    assert status == 404, status  # really broken

    out = client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "good"})
    assert out["id"] == sid and out["state"] == "running", out
    after = count(client, sid)
    # The loop runs on from where the snapshot caught it, not from where it was before the rollback.
    assert at_snapshot <= after < at_snapshot + 10, (at_snapshot, after)
    wait_for(lambda: count(client, sid) > after, timeout=60, what="the restored loop to go on")
    assert client.download(sid, "/root/work.txt") == b"v1\n"
    assert client.sh(sid, "ls /usr/bin >/dev/null && echo ok").out.strip() == "ok"
    assert client.sh(sid, "hostname").out.strip() == sid
    procs = {p["id"]: p for p in client.processes(sid)}
    assert procs[bg["id"]]["running"] is True, procs
    # Resume after resume after resume, and a second rollback to the same snapshot.
    for _ in range(3):
        client.call("POST", f"/v1/sandboxes/{sid}/pause", {})
        client.call("POST", f"/v1/sandboxes/{sid}/resume", {})
        assert client.download(sid, "/root/work.txt") == b"v1\n"
    client.sh(sid, "echo v3 > /root/work.txt")
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": s1["id"]})
    assert client.download(sid, "/root/work.txt") == b"v1\n"
    # Two rollbacks to one snapshot do not replay the same randomness.
    a = client.sh(sid, "head -c 16 /dev/urandom | od -An -tx1").out
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": s1["id"]})
    b = client.sh(sid, "head -c 16 /dev/urandom | od -An -tx1").out
    assert a != b


def test_fork_children_continue_the_parent_and_diverge(client, make_vm):
    parent = make_vm()
    bg = start_counter(client, parent)
    client.upload(parent, "/root/shared.txt", b"from parent\n")
    out = client.call("POST", f"/v1/sandboxes/{parent}/fork", {"count": 2})
    kids = [k["id"] for k in out["sandboxes"]]
    assert len(set(kids)) == 2 and parent not in kids, out
    seeds = set()
    for k in kids:
        sb = client.get(k)
        assert sb["isolation"] == "vm" and sb["labels"]["space.fork_of"] == parent, sb
        assert client.download(k, "/root/shared.txt") == b"from parent\n"
        assert client.sh(k, "hostname").out.strip() == k
        # The parent's loop runs on in the child (its memory was forked, not restarted).
        assert {p["id"]: p for p in client.processes(k)}[bg["id"]]["running"] is True
        c = count(client, k)
        wait_for(lambda: count(client, k) > c, timeout=60, what="the forked loop to go on")
        seeds.add(client.sh(k, "head -c 16 /dev/urandom | od -An -tx1").out)
        client.upload(k, "/root/own.txt", k.encode())
    assert len(seeds) == 2
    # Changes stay where they were made.
    client.upload(parent, "/root/shared.txt", b"parent changed\n")
    for k in kids:
        assert client.download(k, "/root/shared.txt") == b"from parent\n"
        assert client.download(k, "/root/own.txt") == k.encode()
    assert client.download(parent, "/root/shared.txt") == b"parent changed\n"
    assert client.sh(parent, "test -e /root/own.txt || echo none").out.strip() == "none"
    # Each child has its own address when the node gives VMs a network.
    addrs = {}
    for sid in [parent] + kids:
        net = client.sh(sid, "ip -4 -o addr show 2>/dev/null | grep -v ' lo ' || true").out.strip()
        addrs[sid] = net
    if any(addrs.values()):
        assert len(set(addrs.values())) == 3, addrs
        for sid, line in addrs.items():
            assert len(line.splitlines()) == 1, (sid, line)  # the parent's address is gone from a child


def test_snapshot_of_a_paused_vm_leaves_it_paused(client, make_vm):
    sid = make_vm()
    client.upload(sid, "/root/a.txt", b"a\n")
    client.call("POST", f"/v1/sandboxes/{sid}/pause", {})
    s = client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    assert client.get(sid)["state"] == "paused"
    client.call("POST", f"/v1/sandboxes/{sid}/resume", {})
    client.upload(sid, "/root/a.txt", b"b\n")
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": s["id"]})
    assert client.get(sid)["state"] == "running"
    assert client.download(sid, "/root/a.txt") == b"a\n"


def test_snapshot_files_hold_only_the_pages_the_guest_wrote(client, daemon, make_vm):
    sid = make_vm()
    marker = "MEMONLY" + os.urandom(8).hex()
    client.start_process(sid, shell=f"m=MEMONLY; m=${{m}}{marker[7:]}; : > /tmp/m.ok; while true; do echo $m > /dev/null; sleep 0.2; done")
    wait_for(lambda: client.sh(sid, "test -e /tmp/m.ok && echo y").out.strip() == "y", timeout=30, what="the marker")
    s = client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    root = next(r for r in (daemon.state / "volume" / "snapshots", daemon.state / "snapshots")
                if (r / s["id"]).is_dir())
    d = root / s["id"]
    assert sorted(os.listdir(d)) == ["disk.qcow2", "memory", "memory.pages", "snapshot.json", "state"]
    mem = d / "memory"
    allocated = os.stat(mem).st_blocks * 512
    # Sparse: far less than the guest's RAM is stored (the rest is the template's).
    assert allocated < os.path.getsize(mem) / 2, (allocated, os.path.getsize(mem))
    assert oct(os.stat(mem).st_mode & 0o777) == "0o400"
    # Without a key the guest's memory is stored in the clear (root-only): a value only a guest process
    # holds is in it. (The sealed case is test_vm_snapshot_memory_is_sealed_with_the_customers_key.)
    assert marker.encode() in mem.read_bytes()
    client.call("DELETE", f"/v1/snapshots/{s['id']}")
    assert s["id"] not in snapshot_dirs(daemon)


def test_rolled_back_vm_survives_kill9_of_spaced(own_daemon):
    d = own_vm_daemon(own_daemon)
    c = d.client
    sid = c.create(template="busybox", isolation="vm")["id"]
    c.upload(sid, "/root/keep.txt", b"snapshot\n")
    s = c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    c.upload(sid, "/root/keep.txt", b"later\n")
    c.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": s["id"]})
    d.kill9()
    d2 = Daemon(state_dir=d.state, config=d.config, extra_args=d.extra_args)
    d.proc = d2.start().proc
    c2 = d2.client
    c2.created = c.created
    assert c2.get(sid)["state"] == "running"
    assert c2.download(sid, "/root/keep.txt") == b"snapshot\n"
    c2.delete(sid)
    with pytest.raises(ApiError):
        c2.get(sid)
    layers = [p for p in (d.state / "volume" / "layers", d.state / "layers") if p.is_dir()]
    assert not any(f.startswith(sid) for p in layers for f in os.listdir(p)), "the VM's overlay was left behind"


def test_vm_snapshot_memory_is_sealed_with_the_customers_key(own_daemon, tmp_path):
    """With snapshot_kek set, a VM snapshot's guest pages are stored only sealed (AES-256-GCM under the
    tenant's data key): a marker that lives only in a guest process's memory is not in any snapshot file
    in the clear, and a rollback from the sealed snapshot still continues that process."""
    key = tmp_path / "kek"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    d = own_vm_daemon(own_daemon, snapshot_kek=f"file:{key}")
    c = d.client
    sid = c.create(template="busybox", isolation="vm")["id"]
    marker = "MEMONLY" + os.urandom(8).hex()
    # The marker is built at run time inside the guest (never on its disk): only in the shell's memory.
    bg = c.start_process(sid, shell=f"m=MEMONLY; m=${{m}}{marker[7:]}; : > /tmp/m.ok; while true; do echo $m > /dev/null; sleep 0.2; done")
    wait_for(lambda: c.sh(sid, "test -e /tmp/m.ok && echo y").out.strip() == "y", timeout=30, what="the marker")
    s = c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    root = next(r for r in (d.state / "volume" / "snapshots", d.state / "snapshots") if (r / s["id"]).is_dir())
    files = sorted(os.listdir(root / s["id"]))
    assert "memory.sealed" in files and "memory" not in files, files
    for f in files:
        assert marker.encode() not in (root / s["id"] / f).read_bytes(), f"{f} holds the marker in the clear"
    c.sh(sid, "echo after > /root/after.txt")
    c.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": s["id"]})
    assert c.sh(sid, "test -e /root/after.txt || echo gone").out.strip() == "gone"
    assert {p["id"]: p for p in c.processes(sid)}[bg["id"]]["running"] is True
    # Nothing of the clear memory stays in the tmpfs it was opened into.
    assert not [f for f in os.listdir("/dev/shm") if f.startswith("space-vm-memory-")]
    # Export and import into another VM of the same template: a rollback there continues this VM's
    # process, with this VM's files. A jail cannot take a VM snapshot.
    c.sh(sid, "echo exported > /root/exported.txt")
    s2 = c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    archive = tmp_path / "vm.spacearchive"
    r = spacelib.run_cli(d.sock, "snapshot", "export", s2["id"], "-o", str(archive))
    assert r.returncode == 0, r.stderr
    assert marker.encode() not in archive.read_bytes()
    other = c.create(template="busybox", isolation="vm")["id"]
    r = spacelib.run_cli(d.sock, "snapshot", "import", str(archive), "--sandbox", other)
    assert r.returncode == 0, r.stderr
    imported = r.stdout.decode().strip()
    assert SNAP_RE.match(imported)
    c.call("POST", f"/v1/sandboxes/{other}/rollback", {"snapshot": imported})
    assert c.download(other, "/root/exported.txt") == b"exported\n"
    assert {p["id"]: p for p in c.processes(other)}[bg["id"]]["running"] is True
    assert c.sh(other, "hostname").out.strip() == other
    jail = c.create(template="busybox", isolation="jail")["id"]
    r = spacelib.run_cli(d.sock, "snapshot", "import", str(archive), "--sandbox", jail)
    assert r.returncode != 0 and b"jail snapshot" in r.stderr, r
    assert c.call("GET", f"/v1/sandboxes/{jail}/snapshots")["snapshots"] == []
    for x in (sid, other, jail):
        c.delete(x)


def test_kill9_during_vm_snapshots_leaves_the_vm_running_and_whole_snapshots(own_daemon):
    """spaced is killed while a VM snapshot is being made (its guest stopped, a .tmp directory on the
    volume): after the restart the VM runs on (its processes advance), every listed snapshot is whole and
    rolls back, and the unfinished one is gone."""
    import threading
    import time
    d = own_vm_daemon(own_daemon)
    c = d.client
    sid = c.create(template="busybox", isolation="vm")["id"]
    start_counter(c, sid)
    c.upload(sid, "/root/keep.txt", b"kept\n")
    c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})  # one whole snapshot before the kill
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {}, timeout=30)
            except Exception:  # noqa: BLE001 - the daemon dies under it
                return

    t = threading.Thread(target=hammer)
    t.start()
    vol = d.state / "volume" / "snapshots"
    deadline = time.monotonic() + 60
    def guest_stopped():
        # The guest is stopped from its device state until its disk is cloned.
        for n in os.listdir(vol):
            if n.endswith(".tmp"):
                files = set(os.listdir(vol / n)) if (vol / n).is_dir() else set()
                if "state" in files and "disk.qcow2" not in files:
                    return True
        return False

    while time.monotonic() < deadline and not guest_stopped():
        time.sleep(0.001)
    d.kill9()
    stop.set()
    t.join(30)
    d.start()
    assert c.get(sid)["state"] == "running"
    n = count(c, sid)
    wait_for(lambda: count(c, sid) > n, timeout=60, what="the guest to run on after the restart")
    listed = c.call("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]
    assert listed and snapshot_dirs(d) == {s["id"] for s in listed}, (listed, snapshot_dirs(d))
    c.upload(sid, "/root/keep.txt", b"changed\n")
    c.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": listed[-1]["id"]})
    assert c.download(sid, "/root/keep.txt") == b"kept\n"
    c.delete(sid)


def test_kill9_during_vm_rollback_finishes_it_at_the_next_start(own_daemon):
    """spaced is killed after a VM rollback killed the old VMM and before the new one answered: the next
    start restores the snapshot again, and the VM runs with the snapshot's files and processes."""
    import threading
    import time
    d = own_vm_daemon(own_daemon)
    c = d.client
    sid = c.create(template="busybox", isolation="vm")["id"]
    bg = start_counter(c, sid)
    c.upload(sid, "/root/keep.txt", b"snapshot\n")
    s = c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    c.upload(sid, "/root/keep.txt", b"later\n")
    old_vmm = next(p for p in spacelib.all_pids()
                   if f"/sandboxes/{sid}/qmp.sock".encode() in spacelib.read(f"/proc/{p}/cmdline").encode())
    def roll():
        try:
            c.raw("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": s["id"]})
        except Exception:  # noqa: BLE001 - the daemon dies under it
            pass

    t = threading.Thread(target=roll, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and spacelib.pid_start_time(old_vmm) is not None \
            and not spacelib.is_zombie(old_vmm):
        time.sleep(0.001)
    d.kill9()
    t.join(30)
    d.start()
    assert c.get(sid)["state"] == "running"
    assert "finishing the interrupted rollback" in d.log_path.read_text(errors="replace")
    assert c.download(sid, "/root/keep.txt") == b"snapshot\n"
    assert {p["id"]: p for p in c.processes(sid)}[bg["id"]]["running"] is True
    n = count(c, sid)
    wait_for(lambda: count(c, sid) > n, timeout=60, what="the restored loop to go on")
    vmms = [p for p in spacelib.all_pids()
            if f"/sandboxes/{sid}/qmp.sock".encode() in spacelib.read(f"/proc/{p}/cmdline").encode()]
    assert len(vmms) == 1, vmms  # no VMM of the interrupted attempt is left
    c.delete(sid)
