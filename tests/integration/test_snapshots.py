"""Snapshots, rollback and fork of jail sandboxes through the API and the CLI, against real sandboxes:
the files a snapshot holds come back after destructive commands, forks diverge from their parent and
from each other, snapshot files are durable and a daemon killed in the middle leaves no half-made
snapshot listed. docs/snapshots.md."""

import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

import spacelib
from spacelib import ApiError, wait_for

SNAP_RE = re.compile(r"^snap-[0-9a-f]{16}$")


def snap(client, sid, name=None) -> dict:
    return client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": name} if name else {})


def history(client, sid) -> list:
    return client.call("GET", f"/v1/sandboxes/{sid}/snapshots")["snapshots"]


def rollback(client, sid, ref) -> dict:
    return client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": ref})


def fork(client, sid, count=1, snapshot=None) -> dict:
    body = {"count": count}
    if snapshot:
        body["snapshot"] = snapshot
    return client.call("POST", f"/v1/sandboxes/{sid}/fork", body)


def snapshot_dirs(d) -> set[str]:
    """Snapshot directories on the daemon's layer volume (its own XFS mount, or the state dir)."""
    names = set()
    for root in (d.state / "volume" / "snapshots", d.state / "snapshots"):
        if root.is_dir():
            names |= set(os.listdir(root))
    return names


def test_capabilities_say_what_a_jail_snapshot_holds(client, sandbox):
    caps = client.get(sandbox)["capabilities"]
    assert caps["snapshot_filesystem"] is True
    assert caps["snapshot_memory"] is False  # processes are not captured: a rollback restarts them
    assert caps["rollback"] is True and caps["fork"] is True


def test_rollback_after_destroying_the_system_brings_files_back(client, sandbox):
    client.upload(sandbox, "/root/work.txt", b"v1\n")
    client.sh(sandbox, "mkdir -p /opt/app && seq 1 1000 > /opt/app/data")
    s1 = snap(client, sandbox, name="good")
    assert SNAP_RE.match(s1["id"]) and s1["name"] == "good" and s1["kind"] == "filesystem"
    assert s1["processes"] is False
    bg = client.start_process(sandbox, cmd=["sleep", "1000"])
    client.upload(sandbox, "/root/work.txt", b"v2\n")
    client.sh(sandbox, "rm -rf /usr /bin /opt/app /root/work.txt; true")
    status, _, body = client.raw("POST", f"/v1/sandboxes/{sandbox}/exec", {"cmd": ["/bin/busybox", "true"]})
    assert status == 404 and json.loads(body)["error"]["reason"] == "executable_not_found", (status, body)  # it really is broken

    out = rollback(client, sandbox, "good")
    assert out["id"] == sandbox and out["state"] == "running"
    assert client.download(sandbox, "/root/work.txt") == b"v1\n"
    assert client.sh(sandbox, "wc -l < /opt/app/data").out.strip() == "1000"
    assert client.sh(sandbox, "ls /bin/sh /usr >/dev/null && echo ok").out.strip() == "ok"
    assert client.sh(sandbox, "hostname").out.strip() == sandbox
    # Processes are not part of a jail snapshot: the one started after it is gone.
    assert all(p["id"] != bg["id"] or not p["running"] for p in client.processes(sandbox))
    # The snapshot is still there and can be used again (by id this time).
    client.sh(sandbox, "rm -rf /root; true")
    rollback(client, sandbox, s1["id"])
    assert client.download(sandbox, "/root/work.txt") == b"v1\n"
    assert [s["id"] for s in history(client, sandbox)] == [s1["id"]]


def test_rollback_keeps_the_environment_and_limits(client, make_sandbox):
    sid = make_sandbox(env={"GREETING": "hello"}, memory_mib=96, pids=64)["id"]
    s = snap(client, sid)
    rollback(client, sid, s["id"])
    assert client.sh(sid, "echo $GREETING").out.strip() == "hello"
    got = client.get(sid)
    assert got["limits"]["memory_mib"] == 96 and got["limits"]["pids"] == 64
    limit = spacelib.cgroup_file(sid, "memory", "memory.limit_in_bytes")
    if limit is not None:
        assert int(limit) == 96 << 20


def test_resume_after_resume_after_resume_keeps_files(client, sandbox):
    """The failure users of other platforms report: files lost after the second pause."""
    for i in range(4):
        client.upload(sandbox, f"/root/f{i}", f"{i}\n".encode())
        client.call("POST", f"/v1/sandboxes/{sandbox}/pause")
        if i % 2:
            snap(client, sandbox)  # a snapshot of a paused sandbox leaves it paused
            assert client.get(sandbox)["state"] == "paused"
        client.call("POST", f"/v1/sandboxes/{sandbox}/resume")
        for j in range(i + 1):
            assert client.download(sandbox, f"/root/f{j}") == f"{j}\n".encode()


def test_fork_children_diverge_from_the_parent_and_each_other(client, make_sandbox, daemon):
    parent = make_sandbox(env={"ROLE": "parent"}, labels={"team": "a"})["id"]
    client.upload(parent, "/root/shared.txt", b"before\n")
    out = fork(client, parent, count=3)
    kids = [s["id"] for s in out["sandboxes"]]
    daemon.client.created.update(kids)
    try:
        assert len(set(kids)) == 3 and parent not in kids
        assert out["snapshot"]["origin"] == "fork"
        for k in kids:
            got = client.get(k)
            assert got["state"] == "running"
            assert got["labels"]["team"] == "a" and got["labels"]["space.fork_of"] == parent
            assert client.download(k, "/root/shared.txt") == b"before\n"
            assert client.sh(k, "echo $ROLE; hostname").out.split() == ["parent", k]
        # Each changes on its own.
        client.upload(parent, "/root/shared.txt", b"parent\n")
        for k in kids:
            client.upload(k, "/root/shared.txt", f"{k}\n".encode())
            client.upload(k, "/root/only-here", b"x")
        assert client.download(parent, "/root/shared.txt") == b"parent\n"
        assert client.sh(parent, "test -e /root/only-here && echo yes || echo no").out.strip() == "no"
        for k in kids:
            assert client.download(k, "/root/shared.txt") == f"{k}\n".encode()
        # A child's kernel objects are its own.
        for k in kids:
            assert spacelib.cgroup_dirs(k), k
        # Deleting the parent leaves the children intact.
        client.delete(parent)
        for k in kids:
            assert client.download(k, "/root/shared.txt") == f"{k}\n".encode()
    finally:
        for k in kids:
            client.delete(k, missing_ok=True)


def test_fork_from_a_named_snapshot(client, make_sandbox, daemon):
    parent = make_sandbox()["id"]
    client.upload(parent, "/root/v", b"1")
    snap(client, parent, name="one")
    client.upload(parent, "/root/v", b"2")
    out = fork(client, parent, count=1, snapshot="one")
    kid = out["sandboxes"][0]["id"]
    daemon.client.created.add(kid)
    try:
        assert out["snapshot"]["name"] == "one"
        assert client.download(kid, "/root/v") == b"1"
        assert client.download(parent, "/root/v") == b"2"
    finally:
        client.delete(kid, missing_ok=True)


def test_snapshot_errors_are_clear(client, sandbox, make_sandbox):
    snap(client, sandbox, name="x")
    with pytest.raises(ApiError) as e:
        snap(client, sandbox, name="x")
    assert e.value.status == 409
    for bad in ("has space", "a/b", "snap-123", "x" * 65):
        with pytest.raises(ApiError) as e:
            snap(client, sandbox, name=bad)
        assert e.value.status == 400, bad
    with pytest.raises(ApiError) as e:
        rollback(client, sandbox, "nope")
    assert e.value.status == 404
    other = make_sandbox()["id"]
    theirs = snap(client, other)
    with pytest.raises(ApiError) as e:
        rollback(client, sandbox, theirs["id"])  # another sandbox's snapshot
    assert e.value.status == 400
    for body in ({}, {"snapshot": 5}, {"snapshot": ""}, {"snapshot": "x", "extra": 1}):
        status, _, _ = client.raw("POST", f"/v1/sandboxes/{sandbox}/rollback", body)
        assert status == 400, body
    for body in ({"count": 0}, {"count": 65}, {"count": "3"}):
        status, _, _ = client.raw("POST", f"/v1/sandboxes/{sandbox}/fork", body)
        assert status == 400, body
    status, _, _ = client.raw("POST", "/v1/sandboxes/sb-000000000000/snapshots", {})
    assert status == 404


def test_deleting_snapshots_and_sandboxes_removes_their_files(client, daemon, make_sandbox):
    sid = make_sandbox()["id"]
    a, b = snap(client, sid), snap(client, sid)
    assert {a["id"], b["id"]} <= snapshot_dirs(daemon)
    client.call("DELETE", f"/v1/snapshots/{a['id']}")
    assert a["id"] not in snapshot_dirs(daemon)
    with pytest.raises(ApiError) as e:
        client.call("GET", f"/v1/snapshots/{a['id']}")
    assert e.value.status == 404
    client.delete(sid)
    assert b["id"] not in snapshot_dirs(daemon)


def test_cli_snapshot_history_rollback_fork(daemon, client, make_sandbox):
    sid = make_sandbox()["id"]
    client.upload(sid, "/root/a", b"a")
    r = spacelib.run_cli(daemon.sock, "snapshot", sid, "--name", "first")
    assert r.returncode == 0, r.stderr
    snap_id = r.stdout.decode().strip()
    assert SNAP_RE.match(snap_id), r.stdout  # only the id on stdout
    r = spacelib.run_cli(daemon.sock, "history", sid)
    assert r.returncode == 0 and snap_id in r.stdout.decode() and "first" in r.stdout.decode()
    client.remove(sid, "/root/a")
    r = spacelib.run_cli(daemon.sock, "rollback", sid, "first")
    assert r.returncode == 0, r.stderr
    assert client.download(sid, "/root/a") == b"a"
    r = spacelib.run_cli(daemon.sock, "fork", sid, "-n", "2")
    assert r.returncode == 0, r.stderr
    kids = r.stdout.decode().split()
    daemon.client.created.update(kids)
    try:
        assert len(kids) == 2 and all(spacelib.SANDBOX_ID_RE.fullmatch(k) for k in kids)
        assert all(client.download(k, "/root/a") == b"a" for k in kids)
    finally:
        for k in kids:
            client.delete(k, missing_ok=True)
    r = spacelib.run_cli(daemon.sock, "snapshot", "rm", snap_id)
    assert r.returncode == 0, r.stderr
    r = spacelib.run_cli(daemon.sock, "rollback", sid, "first")
    assert r.returncode != 0 and b"first" in r.stderr


def test_vm_tier_states_its_snapshot_limit(client, make_sandbox):
    from spacefixtures import vm_unavailable_reason
    reason = vm_unavailable_reason(client)
    if reason:
        print("\n" + reason)
        pytest.skip(reason)
    sid = make_sandbox(isolation="vm")["id"]
    caps = client.get(sid)["capabilities"]
    status, _, body = client.raw("POST", f"/v1/sandboxes/{sid}/snapshots", {})
    if caps.get("snapshot_memory") or caps.get("snapshot_filesystem"):
        assert status == 201, body
    else:
        assert status == 501 and b"vm" in body, (status, body)


def test_kill9_during_snapshots_leaves_only_whole_snapshots(own_daemon):
    """spaced is killed while snapshots are being taken back to back; after the restart every listed
    snapshot has its files and rolls back, and no directory of an unfinished one remains."""
    d = own_daemon()
    c = d.client
    sid = c.create(template="busybox")["id"]
    c.sh(sid, "dd if=/dev/urandom of=/root/blob bs=1M count=8 2>/dev/null; md5sum /root/blob > /root/sum")
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                c.call("POST", f"/v1/sandboxes/{sid}/snapshots", {}, timeout=10)
            except Exception:  # noqa: BLE001 - the daemon dies under it
                return

    t = threading.Thread(target=hammer)
    t.start()
    wait_for(lambda: len(snapshot_dirs(d)) >= 3, timeout=30, what="a few snapshots")
    d.kill9()
    stop.set()
    t.join(20)
    # An interrupted snapshot as the kernel may leave one: files without a row.
    vol = d.state / "volume" / "snapshots" if (d.state / "volume" / "snapshots").is_dir() else d.state / "snapshots"
    (vol / "snap-00000000deadbeef.tmp").mkdir()
    (vol / "snap-00000000feedface").mkdir()
    (vol / ".snap-00000000cafebabe.import-x").mkdir()  # an interrupted import
    (d.state / "scratch").mkdir(exist_ok=True)
    (d.state / "scratch" / "import-0123").write_bytes(b"half an upload")
    d.start()
    assert not (d.state / "scratch").exists()
    listed = history(c, sid)
    assert listed, "the snapshots acknowledged before the kill are gone"
    assert snapshot_dirs(d) == {s["id"] for s in listed}
    c.sh(sid, "rm -f /root/blob")
    rollback(c, sid, listed[-1]["id"])
    assert c.sh(sid, "md5sum -c /root/sum >/dev/null && echo ok").out.strip() == "ok"
    c.delete(sid)


def test_idle_sandbox_pauses_itself_and_the_next_use_resumes_it(client, make_sandbox):
    sid = make_sandbox(idle_pause_s=1)["id"]
    client.upload(sid, "/root/f", b"kept")
    wait_for(lambda: client.get(sid)["state"] == "paused", timeout=20, what="the idle sandbox to pause")
    got = client.get(sid)
    assert got["auto_paused"] is True and got["idle_pause_s"] == 1
    frozen = spacelib.frozen_state(sid)
    assert frozen is not False, "the sandbox's cgroup is not frozen"
    assert client.download(sid, "/root/f") == b"kept"  # the call wakes it
    assert client.get(sid)["state"] == "running"
    # Paused by its owner: no automatic wake-up.
    client.call("POST", f"/v1/sandboxes/{sid}/pause")
    status, _, _ = client.raw("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    assert status == 409
    client.call("POST", f"/v1/sandboxes/{sid}/resume")
    status, _, body = client.raw("POST", "/v1/sandboxes", {"template": "busybox", "idle_pause_s": -1})
    assert status == 400, body


def test_paused_sandbox_survives_a_daemon_kill_and_resumes_intact(own_daemon):
    d = own_daemon()
    c = d.client
    sid = c.create(template="busybox")["id"]
    c.upload(sid, "/root/f", b"kept")
    bg = c.start_process(sid, shell="i=0; while true; do i=$((i+1)); echo $i > /tmp/n.new; mv /tmp/n.new /tmp/n; sleep 0.05; done")
    wait_for(lambda: c.sh(sid, "cat /tmp/n 2>/dev/null").out.strip().isdigit(), timeout=10, what="the counter")
    c.call("POST", f"/v1/sandboxes/{sid}/pause")
    d.kill9()
    d.start()
    assert c.get(sid)["state"] == "paused"
    frozen = spacelib.frozen_state(sid)
    assert frozen is not False, "the sandbox's cgroup is not frozen"
    for _ in range(2):
        c.call("POST", f"/v1/sandboxes/{sid}/resume")
        assert c.download(sid, "/root/f") == b"kept"
        n = int(c.sh(sid, "cat /tmp/n").out)
        wait_for(lambda: int(c.sh(sid, "cat /tmp/n").out) > n, timeout=10, what="the counter to go on")
        assert {p["id"]: p for p in c.processes(sid)}[bg["id"]]["running"] is True
        c.call("POST", f"/v1/sandboxes/{sid}/pause")
    c.call("POST", f"/v1/sandboxes/{sid}/resume")
    c.delete(sid)


def test_rolling_history_takes_automatic_snapshots(client, make_sandbox):
    """The cadence and thinning are tested over a simulated week in tests/unit/core/retention_test.cc; here
    the daemon really takes the first automatic snapshot of a sandbox with a history policy."""
    sid = make_sandbox(history={"every_s": 3600})["id"]
    client.upload(sid, "/root/f", b"x")
    wait_for(lambda: any(s["origin"] == "auto" for s in history(client, sid)), timeout=20,
             what="the first automatic snapshot")
    listed = client.call("GET", f"/v1/sandboxes/{sid}/snapshots")
    autos = [s for s in listed["snapshots"] if s["origin"] == "auto"]
    assert len(autos) == 1  # not due again for an hour
    assert listed["total_size_bytes"] >= autos[0]["size_bytes"] > 0
    for bad in ({"every_s": 5}, {"every_s": 600, "keep": []}, {"every": 600}, "hourly"):
        status, _, body = client.raw("POST", "/v1/sandboxes", {"template": "busybox", "history": bad})
        assert status == 400, (bad, body)


def test_export_import_roundtrip_is_encrypted_and_verified(own_daemon, tmp_path):
    """BYOK: the daemon's snapshot_kek is a key file; an archive imports into another sandbox (other uid
    range) and rolls back there; a flipped bit, a truncated file or another key imports nothing."""
    key = tmp_path / "kek"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox", "snapshot_kek": f"file:{key}"})
    c = d.client
    a = c.create(template="busybox")["id"]
    c.sh(a, "echo secret-plans > /etc/plans; dd if=/dev/urandom of=/etc/blob bs=1M count=2 2>/dev/null; "
            "md5sum /etc/blob > /etc/sum")
    s = snap(c, a, name="exportme")
    archive = tmp_path / "a.spacearchive"
    r = spacelib.run_cli(d.sock, "snapshot", "export", s["id"], "-o", str(archive))
    assert r.returncode == 0, r.stderr
    data = archive.read_bytes()
    assert b"secret-plans" not in data  # encrypted (and compressed)
    b = c.create(template="busybox")["id"]
    before = {x["id"] for x in history(c, b)}
    r = spacelib.run_cli(d.sock, "snapshot", "import", str(archive), "--sandbox", b)
    assert r.returncode == 0, r.stderr
    imported = r.stdout.decode().strip()
    assert SNAP_RE.match(imported) and imported != s["id"]
    rollback(c, b, imported)
    assert c.download(b, "/etc/plans") == b"secret-plans\n"
    assert c.sh(b, "md5sum -c /etc/sum >/dev/null && echo ok && stat -c %u /etc/plans").out.split() == ["ok", "0"]
    for bad in (data[:-100], data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 1]) + data[len(data) // 2 + 1:]):
        (tmp_path / "bad").write_bytes(bad)
        r = spacelib.run_cli(d.sock, "snapshot", "import", str(tmp_path / "bad"), "--sandbox", b)
        assert r.returncode != 0 and r.stderr, r
    assert {x["id"] for x in history(c, b)} == before | {imported}
    c.delete(a)
    c.delete(b)


def test_import_errors_name_the_file_and_what_to_do(own_daemon, tmp_path):
    """What a user sees from `space snapshot import` when the file is no archive, or the archive's disk
    differs from the sandbox's quota: the file's name, "not a SPACE archive", the --disk to use."""
    key = tmp_path / "kek"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox", "snapshot_kek": f"file:{key}"})
    c = d.client
    a = c.create(template="busybox", disk_mib=64)["id"]
    b = c.create(template="busybox", disk_mib=128)["id"]
    before = {x["id"] for x in history(c, b)}

    notes = tmp_path / "notes.txt"
    notes.write_text("these are my notes, not a snapshot\n" * 10)
    r = spacelib.run_cli(d.sock, "snapshot", "import", str(notes), "--sandbox", b)
    err = r.stderr.decode()
    assert r.returncode != 0 and str(notes) in err and "not a SPACE archive" in err, err
    assert "SPACE_API_KEY" not in err and "space ls" not in err, err  # no hint that does not fit

    s = snap(c, a, name="small-disk")
    archive = tmp_path / "small.spacearchive"
    r = spacelib.run_cli(d.sock, "snapshot", "export", s["id"], "-o", str(archive))
    assert r.returncode == 0, r.stderr
    r = spacelib.run_cli(d.sock, "snapshot", "import", str(archive), "--sandbox", b)
    err = r.stderr.decode()
    assert r.returncode != 0 and str(archive) in err and "--disk 64M" in err, err
    assert {x["id"] for x in history(c, b)} == before  # nothing kept

    # Into a sandbox made as the message says, it imports.
    e = c.create(template="busybox", disk_mib=64)["id"]
    r = spacelib.run_cli(d.sock, "snapshot", "import", str(archive), "--sandbox", e)
    assert r.returncode == 0, r.stderr
    for sid in (a, b, e):
        c.delete(sid)


def test_export_without_a_customer_key_is_refused(client, sandbox):
    s = snap(client, sandbox)
    status, _, body = client.raw("GET", f"/v1/snapshots/{s['id']}/archive")
    assert status == 501 and b"snapshot_kek" in body, (status, body)


def test_history_after_exec_snapshots_only_when_files_changed(client, make_sandbox):
    """after_exec: an exec that wrote a file leaves an automatic snapshot; one that only read does not
    (the jail compares its layer's write counter, no tree walk); rolling back to it restores the file."""
    sid = make_sandbox(history={"after_exec": True})["id"]

    def autos():
        return [s for s in history(client, sid) if s["origin"] == "auto"]

    client.sh(sid, "echo one > /root/one")
    wait_for(lambda: len(autos()) == 1, timeout=20, what="an automatic snapshot after a writing exec")
    first = autos()[0]
    # Reads only (of template files and of files in the writable layer: noatime keeps a read from
    # writing it), then a write. The history handles finished execs in order, so once the write's snapshot is listed the reads
    # were looked at, and they added none.
    for _ in range(3):
        assert client.sh(sid, "cat /etc/hostname").out.strip()
    client.sh(sid, "ls -l / >/dev/null; cat /root/one >/dev/null")
    client.sh(sid, "echo two > /root/two")
    wait_for(lambda: len(autos()) >= 2, timeout=20, what="an automatic snapshot after the second write")
    later = autos()
    assert len(later) == 2, later
    assert later[0]["id"] == first["id"] and later[1]["origin"] == "auto" and later[1]["size_bytes"] > 0
    # Nothing changed since: more reads add nothing (checked by a write that follows them, as above).
    client.sh(sid, "cat /root/two /root/one >/dev/null")
    client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "marker"})  # manual: no after-exec check
    assert len(autos()) == 2
    # Rollback to the automatic snapshot brings the file written before it back.
    client.sh(sid, "rm /root/two /root/one")
    rollback(client, sid, later[1]["id"])
    assert client.download(sid, "/root/two") == b"two\n"
    assert client.download(sid, "/root/one") == b"one\n"
    rollback(client, sid, first["id"])
    assert client.sh(sid, "test -e /root/two && echo yes || echo no").out.strip() == "no"
    assert client.download(sid, "/root/one") == b"one\n"
    for bad in ({"after_exec": "yes"}, {"after_exec": False}, {"every_s": 0}):
        status, _, body = client.raw("POST", "/v1/sandboxes", {"template": "busybox", "history": bad})
        assert status == 400, (bad, body)


def test_cli_history_after_exec(daemon, client):
    r = spacelib.run_cli(daemon.sock, "create", "--template", "busybox", "--history-after-exec")
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().split()[0]
    daemon.client.created.add(sid)
    try:
        client.sh(sid, "echo x > /root/x")
        wait_for(lambda: any(s["origin"] == "auto" for s in history(client, sid)), timeout=20,
                 what="an automatic snapshot after the CLI-created sandbox's exec")
    finally:
        client.delete(sid, missing_ok=True)
