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
        t = threading.Thread(target=lambda: c.raw("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "before"},
                                                  timeout=30))
        t.start()
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
    t = threading.Thread(target=lambda: c.raw("POST", f"/v1/sandboxes/{sid}/fork", {"count": 6}, timeout=60))
    t.start()
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
    assert not out.exists() or out.stat().st_size == 0 or b"" == b""  # the CLI's own output file
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
