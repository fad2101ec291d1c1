"""Snapshot key rotation through the API and the CLI (docs/snapshot-archive.md): every tenant's data key
is rewrapped from snapshot_kek_previous to snapshot_kek, durably and without touching any chunk; an
archive exported under the old key still imports on the rotated node; a node that only has the old key
afterwards does not start, and says which setting to fix."""

import hashlib
import json
import os
import signal

import pytest

import spacelib
from test_snapshots import SNAP_RE, history, rollback, snap, snapshot_dirs

BASE = {"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox"}


def make_key(path):
    path.write_bytes(os.urandom(32))
    path.chmod(0o600)
    return f"file:{path}"


def tree_state(root):
    """path -> (mtime_ns, sha256) of every file under root."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            st = os.stat(p)
            out[os.path.relpath(p, root)] = (st.st_mtime_ns, hashlib.sha256(open(p, "rb").read()).hexdigest())
    return out


def restart(d, config):
    d.stop(signal.SIGTERM)
    d.config = {**config, "egress": False}
    d.start()


def test_rotation_rewraps_keys_and_old_archives_still_import(own_daemon, tmp_path):
    kek_a, kek_b = make_key(tmp_path / "kek-a"), make_key(tmp_path / "kek-b")
    d = own_daemon({**BASE, "snapshot_kek": kek_a})
    c = d.client
    src = c.create(template="busybox")["id"]
    c.sh(src, "echo under-a > /root/m; dd if=/dev/urandom of=/root/blob bs=1M count=3 2>/dev/null; "
              "md5sum /root/blob > /root/sum")
    arch_a = tmp_path / "a.spacearchive"
    r = spacelib.run_cli(d.sock, "snapshot", "export", snap(c, src)["id"], "-o", arch_a)
    assert r.returncode == 0, r.stderr

    # Nothing to rotate from yet: a clear refusal.
    status, _, body = c.raw("POST", "/v1/keys/rotate", {})
    assert status == 400 and b"snapshot_kek_previous" in body, (status, body)

    chunks = tree_state(d.state / "chunks")
    assert chunks, "the export stored no chunks"
    key_file = d.state / "keys" / "default.json"
    slots_before = [s["kek_id"] for s in json.loads(key_file.read_text())["slots"]]
    restart(d, {**BASE, "snapshot_kek": kek_b, "snapshot_kek_previous": kek_a})
    r = spacelib.run_cli(d.sock, "keys", "rotate")
    assert r.returncode == 0 and r.stdout.decode().startswith("1 data key"), (r.stdout, r.stderr)
    slots_after = [s["kek_id"] for s in json.loads(key_file.read_text())["slots"]]
    assert len(slots_after) == 1 and slots_after != slots_before  # the old KEK's slot is gone
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert not [p for p in os.listdir(d.state / "keys") if not p.endswith(".json")]  # no temporary left
    assert tree_state(d.state / "chunks") == chunks  # no chunk rewritten, not even touched
    # Again: nothing is wrapped by the old key any more.
    assert c.call("POST", "/v1/keys/rotate", {})["rewrapped"] == 0
    status, _, body = c.raw("POST", "/v1/keys/rotate", {"force": True})
    assert status == 400, body

    # The archive exported under A imports on the node that now has B (A kept or not: the tenant's data
    # key, which B unwraps, opens it).
    restart(d, {**BASE, "snapshot_kek": kek_b})
    dst = c.create(template="busybox")["id"]
    r = spacelib.run_cli(d.sock, "snapshot", "import", arch_a, "--sandbox", dst)
    assert r.returncode == 0, r.stderr
    imported = r.stdout.decode().strip()
    assert SNAP_RE.match(imported)
    rollback(c, dst, imported)
    assert c.download(dst, "/root/m") == b"under-a\n"
    assert c.sh(dst, "md5sum -c /root/sum >/dev/null && echo ok").out.strip() == "ok"
    arch_b = tmp_path / "b.spacearchive"
    r = spacelib.run_cli(d.sock, "snapshot", "export", snap(c, src)["id"], "-o", arch_b)
    assert r.returncode == 0, r.stderr

    # A node that has only A now: its key store answers only to B. That is found when spaced starts, with
    # a message naming the setting and the way out, rather than at the first export or import.
    with pytest.raises(RuntimeError) as start:
        restart(d, {**BASE, "snapshot_kek": kek_a})
    assert "snapshot_kek does not open the data key" in str(start.value), str(start.value)[-2000:]
    assert "snapshot_kek_previous" in str(start.value)
    restart(d, {**BASE, "snapshot_kek": kek_b})
    c.delete(src)
    c.delete(dst)
