"""Snapshots, rollback and fork of VM sandboxes against real VMs (TCG where /dev/kvm is missing): a VM
snapshot holds memory, device state and disk, so processes continue where they were after a rollback
and in every fork child; children get their own identity and address; paused VMs stay paused; the
rolled-back VM survives a kill -9 of spaced; the processes a restore brings back learn of it through a new
generation and are signalled or killed as asked (SECURITY.md V9). docs/snapshots.md."""

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


# A userspace DRBG in the shell's own memory (SECURITY.md V9): seeded once from the kernel, then a 31-bit
# LCG, one value per line of its log, "i value generation-counter" (read with a builtin: no process, no
# reseed). Only a reseed from the kernel changes its course, as with OpenSSL's DRBG or Python's random.
DRBG = ("seed() {{ x=$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); }}; seed; {trap}"
        "i=0; while true; do i=$((i+1)); x=$(( (x * 1103515245 + 12345) % 2147483648 )); "
        "g=-; read -r g rest < /run/space/generation; echo \"$i $x $g\" >> {log}; sleep 0.2; done")
# Subscribed: reseeds on the default restore signal and notes the generation it saw then.
SUBSCRIBED = DRBG.format(log="/root/sub.log",
                         trap="trap 'seed; echo \"reseed $(cat /run/space/generation)\" >> /root/sub.log' URG; ")
UNSUBSCRIBED = DRBG.format(log="/root/plain.log", trap="")


class DrbgLog:
    def __init__(self, client, sid, path):
        self.values, self.gens, self.reseeds = {}, {}, []
        for line in client.sh(sid, f"cat {path} 2>/dev/null").out.splitlines():
            parts = line.split(" ")
            if parts[0] == "reseed":  # after the step it follows
                self.reseeds.append((max(self.values, default=0), " ".join(parts[1:])))
            elif len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                self.values[int(parts[0])] = int(parts[1])
                self.gens[int(parts[0])] = int(parts[2]) if parts[2].isdigit() else None

    def last(self) -> int:
        return max(self.values, default=0)


def generation(client, sid):
    """(counter, id) from the guest's /run/space/generation."""
    line = client.sh(sid, "cat /run/space/generation 2>&1").out
    m = re.fullmatch(r"([0-9]+) ([0-9a-f]{32})\n", line)
    assert m, f"{sid}: /run/space/generation: {line!r}"
    return int(m[1]), m[2]


def wait_drbg(client, sid, path, beyond, what):
    wait_for(lambda: DrbgLog(client, sid, path).last() > beyond, timeout=120, what=what)


def test_fork_generation_reaches_running_processes_and_subscribed_drbgs_diverge(client, make_vm):
    parent = make_vm()
    client.start_process(parent, shell=SUBSCRIBED)
    client.start_process(parent, shell=UNSUBSCRIBED)
    for log in ("/root/sub.log", "/root/plain.log"):
        wait_drbg(client, parent, log, 2, "the parent's DRBGs to run")
    parent_gen = generation(client, parent)
    kids = [k["id"] for k in client.call("POST", f"/v1/sandboxes/{parent}/fork", {"count": 2})["sandboxes"]]

    gens = {k: generation(client, k) for k in kids}
    # Each child is one restore further than its parent, with an id of its own; the parent is untouched.
    assert all(c == parent_gen[0] + 1 for c, _ in gens.values()), (parent_gen, gens)
    assert len({parent_gen[1]} | {g for _, g in gens.values()}) == 3, (parent_gen, gens)
    assert generation(client, parent) == parent_gen
    sub, plain = {}, {}
    for k in kids:
        wait_for(lambda: DrbgLog(client, k, "/root/sub.log").reseeds, timeout=120, what=f"{k}'s DRBG to reseed")
        at = DrbgLog(client, k, "/root/sub.log").reseeds[0][0]
        wait_drbg(client, k, "/root/sub.log", at + 3, f"{k}'s reseeded DRBG to go on")
        sub[k] = DrbgLog(client, k, "/root/sub.log")
        wait_for(lambda: list(DrbgLog(client, k, "/root/plain.log").gens.values()).count(gens[k][0]) >= 3,
                 timeout=120, what=f"{k}'s plain DRBG to go on")
        plain[k] = DrbgLog(client, k, "/root/plain.log")
    last = max(max(l.last() for l in sub.values()), max(l.last() for l in plain.values()))
    for log in ("/root/sub.log", "/root/plain.log"):
        wait_drbg(client, parent, log, last, "the parent's DRBGs to pass their children's")
    parent_sub = DrbgLog(client, parent, "/root/sub.log")
    parent_plain = DrbgLog(client, parent, "/root/plain.log")
    assert parent_sub.reseeds == [], parent_sub.reseeds  # the parent was never signalled

    after = {}
    for k in kids:
        assert len(sub[k].reseeds) == 1, sub[k].reseeds
        at, seen = sub[k].reseeds[0]
        # The handler ran after the child's generation was published.
        assert seen == f"{gens[k][0]} {gens[k][1]}", (seen, gens[k])
        after[k] = {i: v for i, v in sub[k].values.items() if i > at}
        assert len(after[k]) >= 3, sub[k].values
        # Subscribed: after its reseed, nothing the parent drew at the same step.
        assert all(parent_sub.values[i] != v for i, v in after[k].items()), (k, after[k], parent_sub.values)
        # Not subscribed: the documented hazard. Steps made in the child's own generation repeat the
        # parent's output (on_restore "signal", the default, does not change a program that ignores it).
        own = [i for i, g in plain[k].gens.items() if g == gens[k][0]]
        assert len(own) >= 3 and all(plain[k].values[i] == parent_plain.values[i] for i in own), (k, own)
    a, b = (after[k] for k in kids)
    both = set(a) & set(b)
    assert not both or any(a[i] != b[i] for i in both), (a, b)
    # Both loops still run in every child: the default signal is ignored by those that do not handle it.
    for k in kids:
        assert all(p["running"] for p in client.processes(k)), client.processes(k)


def test_rollback_generation_kill_ends_processes_and_none_shows_the_hazard(client, make_vm):
    sid = make_vm()
    bg = client.start_process(sid, shell=UNSUBSCRIBED)
    wait_drbg(client, sid, "/root/plain.log", 2, "the DRBG to run")
    snap = client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "seeded"})
    at_snapshot = generation(client, sid)
    wait_drbg(client, sid, "/root/plain.log", DrbgLog(client, sid, "/root/plain.log").last() + 5, "the DRBG to go on")
    first = DrbgLog(client, sid, "/root/plain.log")

    # none: the process continues from the snapshot and draws again what it drew the first time.
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "seeded", "on_restore": "none"})
    none_gen = generation(client, sid)
    assert none_gen[0] == at_snapshot[0] + 1 and none_gen[1] != at_snapshot[1], (at_snapshot, none_gen)
    assert {p["id"]: p for p in client.processes(sid)}[bg["id"]]["running"] is True
    wait_drbg(client, sid, "/root/plain.log", first.last(), "the restored DRBG to catch up")
    again = DrbgLog(client, sid, "/root/plain.log")
    redrawn = [i for i in first.values if again.gens[i] == none_gen[0]]
    assert redrawn and all(again.values[i] == first.values[i] for i in redrawn), (first.values, again.values)

    # kill: every process is gone when the rollback answers; one started again seeds itself afresh.
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": snap["id"], "on_restore": "kill"})
    kill_gen = generation(client, sid)
    assert kill_gen[0] == at_snapshot[0] + 1 and kill_gen[1] not in (at_snapshot[1], none_gen[1]), kill_gen
    killed = {p["id"]: p for p in client.processes(sid)}[bg["id"]]
    assert killed["running"] is False and killed["exit"]["signal"] == 9, killed
    client.sh(sid, "rm -f /root/plain.log")
    client.start_process(sid, shell=UNSUBSCRIBED)
    wait_drbg(client, sid, "/root/plain.log", 3, "the re-run DRBG to run")
    fresh = DrbgLog(client, sid, "/root/plain.log")
    assert [fresh.values[i] for i in (1, 2, 3)] != [first.values[i] for i in (1, 2, 3)], (fresh.values, first.values)

    with pytest.raises(ApiError) as e:
        client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "seeded", "on_restore": "restart"})
    assert e.value.status == 400 and "on_restore" in str(e.value), e.value


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
