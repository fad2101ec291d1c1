"""kill -9 of spaced in the middle of a rollback, a fork, an export and an import (docs/snapshots.md,
"Durability and crashes"). After the restart the sandbox runs and its files are the state before or
after the operation (marker files and checksums, never a mix), no half-made snapshot or fork child is
listed, nothing of the operation is left in the state dir, and the own_daemon fixture's leak check
(processes, cgroups, mounts, loop devices) passes at teardown.

The moment to kill is found by watching the state dir for the operation's own footprint (the rollback's
`<layer>.next` clone, a fork child's directory, chunks being written, the hidden import directory), so
the kill lands inside the operation without any hook in spaced."""

import os
import subprocess
import threading
import time

import pytest

import spacelib
from spacelib import wait_for
from test_snapshots import history, rollback, snap, snapshot_dirs

BASE = {"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox"}


def volume(d):
    v = d.state / "volume"
    return v if (v / "layers").is_dir() else d.state


def in_background(fn):
    """Runs fn on a thread; the daemon dies under it, so whatever it raises is expected and dropped."""
    def quietly():
        try:
            fn()
        except Exception:  # noqa: BLE001
            pass
    t = threading.Thread(target=quietly)
    t.start()
    return t


def poll_until(pred, timeout):
    """Busy-polls (no sleep: the windows are milliseconds wide); True when pred held."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
    return False


def assert_no_leftovers(d):
    v = volume(d)
    assert not [f for f in os.listdir(v / "layers") if not f.endswith(".img")], os.listdir(v / "layers")
    assert not [f for f in os.listdir(v / "snapshots") if f.startswith(".") or f.endswith(".tmp")]
    assert not (d.state / "scratch").exists() or not os.listdir(d.state / "scratch")
    chunks = d.state / "chunks"
    if chunks.is_dir():
        for dirpath, _, files in os.walk(chunks):
            for f in files:
                assert len(f) == 64 and all(ch in "0123456789abcdef" for ch in f), os.path.join(dirpath, f)
    listed = set()
    for sb in d.client.list():
        listed |= {s["id"] for s in history(d.client, sb["id"])}
    assert snapshot_dirs(d) == listed  # every listed snapshot has its files, and only those exist


def make_marked(c, mib=8):
    sid = c.create(template="busybox")["id"]
    c.sh(sid, f"dd if=/dev/urandom of=/root/blob bs=1M count={mib} 2>/dev/null; md5sum /root/blob > /root/sum; "
              "echo before > /root/marker")
    return sid


def assert_whole(c, sid, markers):
    assert c.get(sid)["state"] == "running"
    got = c.download(sid, "/root/marker").decode().strip()
    assert got in markers, got
    assert c.sh(sid, "md5sum -c /root/sum >/dev/null && echo ok").out.strip() == "ok"
    return got


def test_kill9_during_rollback(own_daemon):
    d = own_daemon()
    c = d.client
    sid = make_marked(c)
    s = snap(c, sid, name="before")
    layer_next = volume(d) / "layers" / f"{sid}.img.next"
    caught = 0
    # Killed as the clone appears, and a few milliseconds later: before the old processes are stopped,
    # while the sandbox restarts, after the layer was switched.
    for attempt, delay in enumerate((0, 0.005, 0.015, 0.03, 0.06)):
        # The live state differs from the snapshot's in every file the test looks at.
        c.sh(sid, "dd if=/dev/urandom of=/root/blob bs=1M count=8 2>/dev/null; md5sum /root/blob > /root/sum; "
                  "echo after-edit > /root/marker")
        t = in_background(lambda: c.raw("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "before"}, timeout=30))
        if poll_until(layer_next.exists, 10):
            caught += 1
            time.sleep(delay)
        d.kill9()
        t.join(30)
        d.start()
        got = assert_whole(c, sid, {"before", "after-edit"})
        print(f"attempt {attempt}: after the restart the sandbox holds '{got}'")
        assert [x["id"] for x in history(c, sid)] == [s["id"]]
        assert_no_leftovers(d)
        # And it works on: a rollback now succeeds.
        rollback(c, sid, "before")
        assert_whole(c, sid, {"before"})
    assert caught, "never caught a rollback in the middle"
    finished = d.log_path.read_text().count("finishing the interrupted rollback")
    print(f"{caught} rollbacks caught in the middle, {finished} finished at the next start")
    c.delete(sid)


@pytest.mark.parametrize("children_seen", [2, 5])
def test_kill9_during_fork(own_daemon, children_seen):
    """Killed while the first children start, and when some have finished (those are removed again at
    the next start: a fork is all or nothing)."""
    d = own_daemon()
    c = d.client
    sid = make_marked(c)
    before = {sb["id"] for sb in c.list()}
    sandboxes = d.state / "sandboxes"
    dirs_before = set(os.listdir(sandboxes))
    t = in_background(lambda: c.raw("POST", f"/v1/sandboxes/{sid}/fork", {"count": 6}, timeout=60))
    assert poll_until(lambda: len(set(os.listdir(sandboxes)) - dirs_before) >= children_seen, 30), \
        "no fork child started"
    d.kill9()
    t.join(60)
    d.start()
    removed = d.log_path.read_text().count("of a fork of")
    print(f"{removed} finished children of the interrupted fork removed at the start")
    listed = c.list()
    assert {sb["id"] for sb in listed} == before, listed  # no child of the unfinished fork is listed
    assert set(os.listdir(sandboxes)) == dirs_before
    assert_whole(c, sid, {"before"})
    assert_no_leftovers(d)
    # Forking works afterwards.
    out = c.call("POST", f"/v1/sandboxes/{sid}/fork", {"count": 2})
    kids = [k["id"] for k in out["sandboxes"]]
    d.client.created.update(kids)
    for k in kids:
        assert_whole(c, k, {"before"})
        c.delete(k)
    c.delete(sid)


@pytest.fixture
def kek(tmp_path):
    key = tmp_path / "kek"
    key.write_bytes(os.urandom(32))
    key.chmod(0o600)
    return f"file:{key}"


def chunk_count(d):
    return sum(len(files) for _, _, files in os.walk(d.state / "chunks")) if (d.state / "chunks").is_dir() else 0


def test_kill9_during_export_of_a_large_snapshot(own_daemon, kek, tmp_path):
    d = own_daemon({**BASE, "snapshot_kek": kek})
    c = d.client
    sid = make_marked(c, mib=200)
    s = snap(c, sid)
    out = tmp_path / "a.spacearchive"
    p = subprocess.Popen([str(spacelib.bin_dir() / "space"), "snapshot", "export", s["id"], "-o", str(out)],
                         env=spacelib.cli_env(d.sock, None), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert poll_until(lambda: chunk_count(d) >= 20, 120), "the export stored no chunks"
    d.kill9()
    p.wait(30)
    assert p.returncode != 0
    assert not out.exists()  # the CLI names its file only once the whole archive arrived
    assert not (tmp_path / "a.spacearchive.space-partial").exists()
    d.start()
    assert_whole(c, sid, {"before"})
    assert [x["id"] for x in history(c, sid)] == [s["id"]]
    assert_no_leftovers(d)
    # The chunks stored before the kill are whole: the next export uses them and its archive imports.
    out.unlink(missing_ok=True)
    r = spacelib.run_cli(d.sock, "snapshot", "export", s["id"], "-o", out)
    assert r.returncode == 0, r.stderr
    c.sh(sid, "echo later > /root/marker")
    r = spacelib.run_cli(d.sock, "snapshot", "import", out, "--sandbox", sid)
    assert r.returncode == 0, r.stderr
    rollback(c, sid, r.stdout.decode().strip())
    assert_whole(c, sid, {"before"})
    c.delete(sid)


def test_kill9_during_import(own_daemon, kek, tmp_path):
    d = own_daemon({**BASE, "snapshot_kek": kek})
    c = d.client
    sid = make_marked(c, mib=200)
    s = snap(c, sid)
    archive = tmp_path / "a.spacearchive"
    r = spacelib.run_cli(d.sock, "snapshot", "export", s["id"], "-o", archive)
    assert r.returncode == 0, r.stderr
    c.sh(sid, "echo after-edit > /root/marker")
    snaps = volume(d) / "snapshots"
    p = subprocess.Popen([str(spacelib.bin_dir() / "space"), "snapshot", "import", str(archive), "--sandbox", sid],
                         env=spacelib.cli_env(d.sock, None), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert poll_until(lambda: any(f.startswith(".") for f in os.listdir(snaps)), 120), "the import never started"
    d.kill9()
    p.wait(30)
    d.start()
    assert [x["id"] for x in history(c, sid)] == [s["id"]]  # nothing half-imported is listed
    assert_whole(c, sid, {"after-edit"})
    assert_no_leftovers(d)
    r = spacelib.run_cli(d.sock, "snapshot", "import", archive, "--sandbox", sid)
    assert r.returncode == 0, r.stderr
    rollback(c, sid, r.stdout.decode().strip())
    assert_whole(c, sid, {"before"})
    c.delete(sid)


def test_full_layer_volume_fails_snapshots_and_forks_cleanly(own_daemon):
    """A 320 MiB layer volume (the state dir is not XFS here, so spaced makes its own image of that size)
    that a sandbox fills: snapshots and forks fail with HTTP 507 naming the full volume, nothing is
    listed, the sandbox runs on, and an earlier snapshot still rolls back (which frees the space)."""
    d = own_daemon({**BASE, "disk_volume_bytes": 320 << 20})
    c = d.client
    if not (d.state / "volume").is_dir():
        pytest.skip("the state dir can reflink itself: no volume of a configured size to fill")
    sid = c.create(template="busybox")["id"]
    c.sh(sid, "echo early > /root/marker")
    early = snap(c, sid, name="early")
    # More than the volume holds (the sandbox's own quota is 1 GiB): the volume runs out first.
    r = c.sh(sid, "dd if=/dev/urandom of=/root/fill bs=1M count=400 conv=fsync 2>&1; echo rc=$?", timeout=120)
    print("fill:", r.out.strip().splitlines()[-2:])
    st = os.statvfs(d.state / "volume")
    print(f"volume: {st.f_bavail * st.f_frsize >> 20} MiB free of {st.f_blocks * st.f_frsize >> 20} MiB")
    for path, body in ((f"/v1/sandboxes/{sid}/snapshots", {}),
                       (f"/v1/sandboxes/{sid}/fork", {"count": 2}),
                       (f"/v1/sandboxes/{sid}/fork", {"count": 1, "snapshot": "early"})):
        status, _, resp = c.raw("POST", path, body, timeout=60)
        assert status == 507 and b"layer volume" in resp and b"full" in resp, (path, status, resp)
    assert [s["id"] for s in history(c, sid)] == [early["id"]]
    assert {sb["id"] for sb in c.list()} == {sid}
    assert_no_leftovers(d)
    assert c.sh(sid, "echo alive").out.strip() == "alive"
    rollback(c, sid, "early")
    assert c.download(sid, "/root/marker") == b"early\n"
    assert c.sh(sid, "test -e /root/fill && echo yes || echo no").out.strip() == "no"
    # The filled layer's blocks are free again once its old mount is gone: snapshots work again.
    wait_for(lambda: c.raw("POST", f"/v1/sandboxes/{sid}/snapshots", {})[0] == 201, timeout=30,
             what="a snapshot after the rollback freed the volume")
    c.delete(sid)
