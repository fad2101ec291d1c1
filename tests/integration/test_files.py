"""File API: streamed upload/download with integrity, constant daemon memory, and metadata operations."""

import hashlib
import json
import os
import tempfile

import pytest

import spacelib
from spacelib import ApiError
from spacefixtures import TIERS, tier_sandbox


# Every test here runs on both isolation tiers: the same agent and protocol serve the jail and the VM.
@pytest.fixture(params=TIERS)
def sandbox(request, client, make_sandbox) -> str:
    return tier_sandbox(request.param, client, make_sandbox)


MiB = 1 << 20
BIG_MIB = int(os.environ.get("SPACE_TEST_BIG_MIB", "1024"))


def test_small_roundtrip_and_mode(client, sandbox):
    client.upload(sandbox, "/tmp/hello.txt", b"hello world\n", mode="0640")
    assert client.download(sandbox, "/tmp/hello.txt") == b"hello world\n"
    r = client.sh(sandbox, "cat /tmp/hello.txt; stat -c %a /tmp/hello.txt")
    assert r.out == "hello world\n640\n", r
    st = client.stat(sandbox, "/tmp/hello.txt")
    assert st["type"] == "file" and st["size"] == 12, st


def test_empty_file(client, sandbox):
    client.upload(sandbox, "/tmp/empty", b"")
    assert client.download(sandbox, "/tmp/empty") == b""
    assert client.stat(sandbox, "/tmp/empty")["size"] == 0


def test_upload_overwrites_and_file_written_inside_downloads(client, sandbox):
    client.upload(sandbox, "/tmp/f", b"A" * 1000)
    client.upload(sandbox, "/tmp/f", b"B" * 10)
    assert client.download(sandbox, "/tmp/f") == b"B" * 10
    client.sh(sandbox, "printf 'made inside' > /tmp/inside")
    assert client.download(sandbox, "/tmp/inside") == b"made inside"


def test_64mib_random_roundtrip(client, sandbox):
    with tempfile.TemporaryFile(dir="/var/tmp") as f:
        h = hashlib.sha256()
        for _ in range(64):
            b = os.urandom(MiB)
            h.update(b)
            f.write(b)
        f.seek(0)
        client.upload(sandbox, "/root/random.bin", f)
    r = client.sh(sandbox, "sha256sum /root/random.bin")
    assert r.out.split()[0] == h.hexdigest(), r
    n, digest = client.download_to(sandbox, "/root/random.bin", None)
    assert n == 64 * MiB
    assert digest == h.hexdigest()


def _chunks(total_mib: int, sink):
    base = os.urandom(8 * MiB)
    for i in range(total_mib):
        off = (i * 1048583) % (len(base) - MiB)
        chunk = i.to_bytes(8, "little") + base[off:off + MiB - 8]
        sink.update(chunk)
        yield chunk


def test_big_streamed_upload_download_constant_memory(daemon, client, make_sandbox):
    sid = make_sandbox(disk_mib=BIG_MIB + 512)["id"]
    rss_before = spacelib.vm_rss_kib(daemon.pid)
    hwm_before = spacelib.vm_hwm_kib(daemon.pid)
    h = hashlib.sha256()
    client.upload(sid, "/root/big.bin", _chunks(BIG_MIB, h))
    st = client.stat(sid, "/root/big.bin")
    assert st["size"] == BIG_MIB * MiB, st
    n, digest = client.download_to(sid, "/root/big.bin", None)
    assert n == BIG_MIB * MiB
    assert digest == h.hexdigest()
    hwm_after = spacelib.vm_hwm_kib(daemon.pid)
    grew_mib = (hwm_after - max(hwm_before, rss_before)) / 1024
    assert grew_mib < 128, (f"spaced's peak RSS grew by {grew_mib:.0f} MiB while streaming {BIG_MIB} MiB "
                            f"(VmHWM {hwm_before} -> {hwm_after} KiB)")
    assert hwm_after < 512 * 1024, f"spaced's VmHWM is {hwm_after} KiB"
    client.remove(sid, "/root/big.bin")


def test_stat_list_mkdir_move_remove(client, sandbox):
    client.mkdir(sandbox, "/tmp/a/b/c", parents=True)
    assert client.stat(sandbox, "/tmp/a/b/c")["type"] == "dir"
    with pytest.raises(ApiError) as e:
        client.mkdir(sandbox, "/tmp/x/y/z", parents=False)
    assert e.value.status in (400, 404, 409), e.value

    client.upload(sandbox, "/tmp/a/b/one.txt", b"1")
    client.upload(sandbox, "/tmp/a/b/two.txt", b"22")
    client.sh(sandbox, "ln -s one.txt /tmp/a/b/link")
    entries = {e["name"]: e for e in client.ls(sandbox, "/tmp/a/b")}
    assert set(entries) == {"c", "one.txt", "two.txt", "link"}, entries
    assert entries["c"]["type"] == "dir"
    assert entries["two.txt"]["type"] == "file" and entries["two.txt"]["size"] == 2
    assert entries["link"]["type"] == "symlink"

    client.move(sandbox, "/tmp/a/b/two.txt", "/tmp/a/moved.txt")
    assert client.download(sandbox, "/tmp/a/moved.txt") == b"22"
    with pytest.raises(ApiError) as e:
        client.stat(sandbox, "/tmp/a/b/two.txt")
    assert e.value.status == 404

    client.remove(sandbox, "/tmp/a/moved.txt")
    r = client.sh(sandbox, "test -e /tmp/a/moved.txt && echo yes || echo no")
    assert r.out == "no\n"

    with pytest.raises(ApiError) as e:
        client.remove(sandbox, "/tmp/a")  # not empty, not recursive
    assert e.value.status in (400, 409), e.value
    client.remove(sandbox, "/tmp/a", recursive=True)
    r = client.sh(sandbox, "test -e /tmp/a && echo yes || echo no")
    assert r.out == "no\n"


def test_file_errors(client, sandbox):
    with pytest.raises(ApiError) as e:
        client.download(sandbox, "/no/such/file")
    assert e.value.status == 404 and e.value.code == "not_found", e.value
    with pytest.raises(ApiError) as e:
        client.download(sandbox, "/etc")
    assert e.value.status == 400, e.value
    with pytest.raises(ApiError) as e:
        client.stat(sandbox, "/no/such/file")
    assert e.value.status == 404
    with pytest.raises(ApiError) as e:
        client.ls(sandbox, "/no/such/dir")
    assert e.value.status == 404
    with pytest.raises(ApiError) as e:
        client.upload(sandbox, "/no/such/dir/file", b"x")
    assert e.value.status in (400, 404), e.value
    for path in ("", "relative/path", "/tmp/\x00nul"):
        status, _, body = client.raw("GET", f"/v1/sandboxes/{sandbox}/files?" + spacelib.q(path=path))
        assert status in (400, 404), (path, status, body)
    status, _, body = client.raw("GET", f"/v1/sandboxes/{sandbox}/files")
    assert status == 400, (status, body)
    status, _, body = client.raw("POST", f"/v1/sandboxes/{sandbox}/files/move", b"{bad json",
                                 {"Content-Type": "application/json"})
    assert status == 400, (status, body)
    assert json.loads(body)["error"]["code"] == "invalid_argument"
    assert client.sh(sandbox, "echo ok").out == "ok\n"


def test_upload_as_seen_by_user(client, sandbox):
    client.upload(sandbox, "/home/user/note", b"n")
    r = client.sh(sandbox, "cat /home/user/note", user="user")
    assert r.out == "n", r
