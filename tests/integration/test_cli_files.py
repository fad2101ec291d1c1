"""`space cp` (files, directories through a tar stream, stdin/stdout, -p) and `space files`, and the hint
each kind of not-found gets, run with the real `space` binary against a real daemon."""

import hashlib
import io
import os
import tarfile

import pytest

import spacelib


@pytest.fixture
def cli(daemon):
    def run(*args, **kw):
        return spacelib.run_cli(daemon.sock, *args, **kw)
    return run


def out(r):
    return r.stdout.decode(errors="replace")


def err(r):
    return r.stderr.decode(errors="replace")


def make_tree(root):
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("alpha\n")
    (root / "sub" / "b.bin").write_bytes(os.urandom(200_000))
    (root / "sub" / "deeper" / "c.sh").write_text("#!/bin/sh\necho c\n")
    (root / "sub" / "deeper" / "c.sh").chmod(0o755)
    (root / "link").symlink_to("a.txt")


def digest(root):
    files = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            files[str(p.relative_to(root))] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode & 0o777)
    return files


def test_cp_r_directory_round_trip(cli, client, sandbox, tmp_path):
    src = tmp_path / "proj"
    src.mkdir()
    make_tree(src)
    r = cli("cp", "-r", str(src), f"{sandbox}:/root")  # no trailing slash: /root exists, so /root/proj
    assert r.returncode == 0, err(r)
    assert "1 entries not copied" in err(r), err(r)  # the symlink
    listing = client.sh(sandbox, "cd /root/proj && find . -type f | sort && stat -c %a sub/deeper/c.sh").out
    assert listing.split() == ["./a.txt", "./sub/b.bin", "./sub/deeper/c.sh", "755"], listing
    got = client.sh(sandbox, "sha256sum /root/proj/sub/b.bin").out.split()[0]
    assert got == hashlib.sha256((src / "sub" / "b.bin").read_bytes()).hexdigest()

    client.sh(sandbox, "ln -s /etc/passwd /root/proj/evil")  # a sandbox's symlink never writes outside
    back = tmp_path / "back"
    r = cli("cp", "-r", f"{sandbox}:/root/proj", str(back))  # back does not exist: it becomes the copy
    assert r.returncode == 0, err(r)
    want = digest(src)
    assert digest(back) == want
    assert os.readlink(back / "evil") == "/etc/passwd" and (back / "evil").is_symlink()

    into = tmp_path / "into"
    into.mkdir()
    r = cli("cp", "-r", f"{sandbox}:/root/proj", str(into))  # an existing directory: the copy goes inside
    assert r.returncode == 0, err(r)
    assert digest(into / "proj") == want


def test_cp_r_to_stdout_is_a_tar_and_from_stdin(cli, client, sandbox):
    client.sh(sandbox, "mkdir -p /tmp/t/x && echo one > /tmp/t/x/1")
    r = cli("cp", "-r", f"{sandbox}:/tmp/t", "-")
    assert r.returncode == 0, err(r)
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
        assert tf.extractfile("t/x/1").read() == b"one\n"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as out_tar:
            info = tarfile.TarInfo("new/file")
            info.size = 4
            out_tar.addfile(info, io.BytesIO(b"new\n"))
    r = cli("cp", "-r", "-", f"{sandbox}:/tmp/from-stdin", input=buf.getvalue())
    assert r.returncode == 0, err(r)
    assert client.sh(sandbox, "cat /tmp/from-stdin/new/file").out == "new\n"


def test_cp_archive_rejects_climbing_names(client, sandbox):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../../escape")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    status, _, body = client.raw("PUT", f"/v1/sandboxes/{sandbox}/files/archive?path=/tmp/in", buf.getvalue())
    assert status == 400 and b"climbs out" in body, (status, body)


def test_cp_file_stdin_stdout_parents_and_no_trailing_slash(cli, client, sandbox, tmp_path):
    r = cli("cp", "-", f"{sandbox}:/tmp/deep/er/piped.txt", input=b"from stdin\n")
    assert r.returncode != 0 and "'space files ls ID DIR'" in err(r), err(r)  # parent missing, no -p
    r = cli("cp", "-p", "-", f"{sandbox}:/tmp/deep/er/piped.txt", input=b"from stdin\n")
    assert r.returncode == 0, err(r)
    r = cli("cp", f"{sandbox}:/tmp/deep/er/piped.txt", "-")
    assert r.returncode == 0 and r.stdout == b"from stdin\n", err(r)
    f = tmp_path / "plain.txt"
    f.write_text("plain\n")
    r = cli("cp", str(f), f"{sandbox}:/tmp")
    assert r.returncode == 0, err(r)
    assert client.sh(sandbox, "cat /tmp/plain.txt").out == "plain\n"
    r = cli("cp", "-p", f"{sandbox}:/tmp/plain.txt", str(tmp_path / "new" / "dir" / "p.txt"))
    assert r.returncode == 0, err(r)
    assert (tmp_path / "new" / "dir" / "p.txt").read_text() == "plain\n"
    r = cli("cp", f"{sandbox}:/tmp/deep", str(tmp_path / "d"))
    assert r.returncode != 0 and "space cp -r" in err(r), err(r)


def test_files_commands(cli, client, sandbox):
    assert cli("files", "mkdir", "-p", sandbox, "/tmp/fs/a/b").returncode == 0
    client.sh(sandbox, "echo hi > /tmp/fs/a/f")
    r = cli("files", "ls", sandbox, "/tmp/fs/a")
    assert r.returncode == 0, err(r)
    lines = out(r).splitlines()
    assert lines[0].split()[:3] == ["TYPE", "MODE", "SIZE"], lines
    assert any(x.split()[0] == "dir" and x.endswith("b/") for x in lines[1:]), lines
    assert any(x.split()[0] == "file" and x.split()[2] == "3" and x.endswith(" f") for x in lines[1:]), lines
    r = cli("files", "stat", sandbox, "/tmp/fs/a/f")
    assert r.returncode == 0 and "type: file" in out(r) and "size: 3" in out(r), out(r)
    assert cli("files", "mv", sandbox, "/tmp/fs/a/f", "/tmp/fs/g").returncode == 0
    assert client.sh(sandbox, "cat /tmp/fs/g").out == "hi\n"
    r = cli("files", "rm", sandbox, "/tmp/fs")
    assert r.returncode != 0, out(r)
    assert cli("files", "rm", "-r", sandbox, "/tmp/fs").returncode == 0
    assert client.sh(sandbox, "test -e /tmp/fs || echo gone").out == "gone\n"


def test_not_found_hints_fit_what_is_missing(cli, sandbox, tmp_path):
    r = cli("exec", "sb-000000000000", "--", "true")
    assert r.returncode == 1 and "hint: 'space ls' lists sandboxes" in err(r), err(r)
    r = cli("files", "stat", sandbox, "/no/such")
    assert "space ls" not in err(r) and "'space files ls ID DIR'" in err(r), err(r)
    r = cli("kill", sandbox, "no-such-proc")
    assert "space ls" not in err(r) and "'space ps ID'" in err(r), err(r)
    r = cli("rollback", sandbox, "no-such-snapshot")
    assert "space ls" not in err(r) and "'space history ID'" in err(r), err(r)
    r = cli("cp", str(tmp_path / "missing"), f"{sandbox}:/tmp/")
    assert r.returncode == 1 and "space ls" not in err(r) and "hint:" not in err(r), err(r)
    r = cli("create", "--template", "no-such-template")
    assert "'space template ls'" in err(r) and "space ls " not in err(r), err(r)


def test_export_without_kek_says_what_it_needs(cli, sandbox, tmp_path):
    r = cli("snapshot", sandbox)
    assert r.returncode == 0, err(r)
    r = cli("snapshot", "export", out(r).strip(), "-o", str(tmp_path / "a.spacearchive"))
    assert r.returncode == 1 and "snapshot_kek" in err(r), err(r)
    assert "hint:" not in err(r), err(r)  # not "the node does not offer this", not an API-key hint
