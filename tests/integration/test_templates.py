"""Templates against a real spaced: built from a tree uploaded as a tar stream (PUT /v1/templates/{name}/archive)
over the unix socket and over TCP with a key, hostile archives refused with nothing written outside the tree,
the warning for a tree without /bin/sh, and `space template build`'s progress on stderr."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

import spacelib
from spacefixtures import busybox_rootfs_dir
from spacelib import Client


def ndjson(data: bytes) -> list[dict]:
    return [json.loads(x) for x in data.decode().splitlines() if x.strip()]


def busybox_tar(tmp_path: Path, marker: str, compress: str = "-z") -> Path:
    """The busybox tree plus /etc/marker (its own content, so its own template tree), as a tarball."""
    root = tmp_path / f"tree-{marker}"
    shutil.copytree(busybox_rootfs_dir(), root, symlinks=True)
    (root / "etc" / "marker").write_text(marker + "\n")
    out = tmp_path / f"{marker}.tar"
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", compress, "-cf", str(out), "."], check=True)
    return out


def tar_bytes(members) -> bytes:
    """A tar made member by member: (TarInfo, data or None)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name, kind=tarfile.REGTYPE, data=b"", link="", mode=0o644, devmajor=0, devminor=0):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.linkname = link
    info.devmajor, info.devminor = devmajor, devminor
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


def upload(client: Client, name: str, body: bytes, timeout: float = 600):
    status, headers, data = client.raw("PUT", f"/v1/templates/{name}/archive", body,
                                       {"Content-Type": "application/x-tar"}, timeout)
    return status, data


def built(status, data) -> dict:
    assert status == 200, data[:500]
    lines = ndjson(data)
    assert lines[-1]["type"] == "done", lines[-3:]
    return lines[-1]


def store_leftovers(d) -> list[str]:
    """Temporary build trees and upload spools a finished build should not leave behind."""
    tmp = [p.name for p in (d.state / "templates").glob("tmp-*")]
    spools = [p.name for p in (d.state / "scratch").glob("template-upload*")] if (d.state / "scratch").exists() else []
    return tmp + spools


def test_upload_over_the_unix_socket_then_a_sandbox_runs_from_it(daemon, client, make_sandbox, tmp_path):
    tarball = busybox_tar(tmp_path, "unix-upload")
    done = built(*upload(client, "up-unix", tarball.read_bytes()))
    t = done["template"]
    assert t["name"] == "up-unix" and t["source"] == {"kind": "upload"}, t
    assert "warnings" not in done, done  # busybox has /bin/sh -> busybox
    assert Path(t["rootfs"], "etc", "marker").read_text() == "unix-upload\n"
    sid = make_sandbox(template="up-unix")["id"]
    r = client.sh(sid, "cat /etc/marker; echo via-shell")
    assert r.exit_code == 0 and r.out == "unix-upload\nvia-shell\n", r
    client.delete(sid)
    client.delete_template("up-unix")
    assert store_leftovers(daemon) == []


def test_cli_uploads_a_tarball_or_stdin_with_progress_on_stderr(daemon, client, tmp_path):
    tarball = busybox_tar(tmp_path, "cli-upload", compress="--zstd")
    r = spacelib.run_cli(daemon.sock, "template", "build", "up-cli", "--tar", str(tarball), timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == "up-cli"
    err = r.stderr.decode()
    assert "uploading" in err and "building template up-cli from upload" in err and "hashing tree" in err, err
    # The same bytes from a pipe: spooled by the CLI (an upload needs its length), same tree.
    with open(tarball, "rb") as f:
        piped = subprocess.run(["cat"], stdin=f, capture_output=True).stdout
    r = spacelib.run_cli(daemon.sock, "--json", "template", "build", "up-stdin", "--tar", "-", input=piped, timeout=600)
    assert r.returncode == 0, r.stderr
    ids = {t["name"]: t["id"] for t in client.templates()}
    assert json.loads(r.stdout)["id"] == ids["up-cli"] == ids["up-stdin"]
    for name in ("up-cli", "up-stdin"):
        client.delete_template(name)


def test_build_from_a_directory_prints_progress(daemon, client, tmp_path):
    root = tmp_path / "progress-tree"
    shutil.copytree(busybox_rootfs_dir(), root, symlinks=True)
    (root / "etc" / "marker").write_text("progress\n")
    r = spacelib.run_cli(daemon.sock, "template", "build", "progress-dir", "--from-dir", str(root), timeout=600)
    assert r.returncode == 0, r.stderr
    err = r.stderr.decode().splitlines()
    assert "building template progress-dir from dir" in err and "hashing tree" in err, err
    assert any(line.startswith("template progress-dir is sha256:") for line in err), err
    assert "warning" not in r.stderr.decode()
    client.delete_template("progress-dir")


def test_a_tree_without_a_shell_builds_with_a_warning_the_cli_prints(daemon, client, tmp_path):
    body = tar_bytes([member("bin", tarfile.DIRTYPE, mode=0o755),
                      member("bin/app", data=b"#!/nothing\n", mode=0o755),
                      member("bin/sh", tarfile.SYMTYPE, link="/usr/bin/bash")])  # the host has one; the tree not
    done = built(*upload(client, "no-shell", body))
    assert len(done.get("warnings", [])) == 1 and "/bin/sh" in done["warnings"][0], done
    assert "space shell" in done["warnings"][0] and '"cmd"' in done["warnings"][0], done
    # The same from a directory with the CLI: built (argv execs work), the warning on stderr.
    root = tmp_path / "no-shell"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "app").write_text("#!/nothing\n")
    r = spacelib.run_cli(daemon.sock, "template", "build", "no-shell-dir", "--from-dir", str(root), timeout=600)
    assert r.returncode == 0, r.stderr
    assert "space: warning: the tree has no executable /bin/sh" in r.stderr.decode(), r.stderr
    for name in ("no-shell", "no-shell-dir"):
        client.delete_template(name)


def test_hostile_uploads_are_refused_and_write_nothing_outside(daemon, client, tmp_path):
    outside = Path(tmp_path / "outside")
    outside.mkdir()
    cases = {
        "dotdot": ([member("ok", data=b"x"), member(f"../../../../..{outside}/dotdot", data=b"pwned")], "'..'"),
        "absolute": ([member(f"{outside}/absolute", data=b"pwned")], "absolute"),
        # An absolute symlink, then a member written through it.
        "through-link": ([member("escape", tarfile.SYMTYPE, link=str(outside)),
                          member("escape/through-link", data=b"pwned")], "symlink"),
        # The same with a relative link that climbs out.
        "through-rel-link": ([member("up", tarfile.SYMTYPE, link="../../../../../../../../.."),
                              member(f"up{outside}/through-rel-link", data=b"pwned")], "symlink"),
        # A hard link whose target goes through a symlink: it would link the host's file into the tree.
        "hard-through-link": ([member("root", tarfile.SYMTYPE, link="/"),
                               member("passwd", tarfile.LNKTYPE, link="root/etc/passwd")], "symlink"),
        "hard-absolute": ([member("passwd", tarfile.LNKTYPE, link="/etc/passwd")], "absolute"),
    }
    before = sorted(os.listdir(daemon.state / "templates"))
    for name, (members, said) in cases.items():
        status, data = upload(client, f"evil-{name}", tar_bytes(members))
        assert status == 400, (name, status, data[:300])
        message = json.loads(data)["error"]["message"]
        assert said in message, (name, message)
        assert not any(t["name"] == f"evil-{name}" for t in client.templates()), name
    assert sorted(os.listdir(outside)) == [], "an upload wrote outside its tree"
    assert sorted(os.listdir(daemon.state / "templates")) == before
    assert store_leftovers(daemon) == []
    status, data = upload(client, "evil-junk", b"this is not a tarball" * 100)
    assert status == 400 and "tar" in json.loads(data)["error"]["message"], data[:300]


def test_device_nodes_and_host_xattrs_of_an_upload_are_not_made(daemon, client, tmp_path):
    tarball = busybox_tar(tmp_path, "devices", compress="-a")  # plain tar: members appended below
    with tarfile.open(tarball, "a") as t:
        for info, _ in (member("dev/sda", tarfile.BLKTYPE, mode=0o666, devmajor=8, devminor=0),
                        member("usr/mem", tarfile.CHRTYPE, mode=0o666, devmajor=1, devminor=1)):
            t.addfile(info)
        info, data = member("etc/flagged", data=b"x")
        info.pax_headers = {"SCHILY.xattr.trusted.overlay.opaque": "y", "SCHILY.xattr.user.kept": "v"}
        t.addfile(info, io.BytesIO(data))
    done = built(*upload(client, "devices", tarball.read_bytes()))
    rootfs = Path(done["template"]["rootfs"])
    assert not os.path.lexists(rootfs / "dev" / "sda") and not os.path.lexists(rootfs / "usr" / "mem")
    warnings = " ".join(done.get("warnings", []))
    assert "2 device node(s) not made" in warnings and "dev/sda" in warnings, done
    assert "1 extended attribute(s)" in warnings, done
    names = os.listxattr(rootfs / "etc" / "flagged")
    assert "trusted.overlay.opaque" not in names, names
    client.delete_template("devices")


def test_upload_over_tcp_needs_a_key_and_has_a_size_cap(own_daemon, tmp_path):
    port = spacelib.free_port()
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox",
                    "listen": f"127.0.0.1:{port}", "template_upload_max_mib": 16})
    key = d.client.call("POST", "/v1/keys", {"name": "uploader"})["secret"]
    anon = Client(tcp=("127.0.0.1", port))
    keyed = Client(tcp=("127.0.0.1", port), api_key=key)
    tarball = busybox_tar(tmp_path, "tcp-upload")

    status, _ = upload(anon, "tcp-anon", tarball.read_bytes())
    assert status == 401
    done = built(*upload(keyed, "tcp-keyed", tarball.read_bytes()))
    assert done["template"]["name"] == "tcp-keyed"
    # Over TCP a path on the daemon's host is the operator's only.
    status, _, data = keyed.raw("POST", "/v1/templates", {"name": "tcp-path", "kind": "dir",
                                                          "path": str(busybox_rootfs_dir())})
    assert status == 403 and b"upload" in data, data
    # Content past the cap, however well it compresses: 413 before anything is built.
    big = tmp_path / "big"
    big.mkdir()
    (big / "zeros").write_bytes(bytes(17 << 20))
    bomb = tmp_path / "big.tar.gz"
    subprocess.run(["tar", "-C", str(big), "-czf", str(bomb), "."], check=True)
    assert bomb.stat().st_size < 1 << 20
    status, data = upload(keyed, "tcp-big", bomb.read_bytes())
    assert status == 413 and b"template_upload_max_mib" in data, data[:300]
    assert store_leftovers(d) == []

    # The CLI against the TCP endpoint packs a local directory itself and uploads it; a sandbox of it runs.
    root = tmp_path / "cli-tree"
    shutil.copytree(busybox_rootfs_dir(), root, symlinks=True)
    (root / "etc" / "marker").write_text("from-cli-over-tcp\n")
    env = {"SPACE_HOST": f"http://127.0.0.1:{port}", "SPACE_API_KEY": key}
    r = spacelib.run_cli(d.sock, "template", "build", "tcp-cli", "--from-dir", str(root), env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "packing" in r.stderr.decode() and "building template tcp-cli from upload" in r.stderr.decode(), r.stderr
    r = spacelib.run_cli(d.sock, "run", "--template", "tcp-cli", "--", "cat", "/etc/marker", env=env, timeout=600)
    assert r.returncode == 0 and r.stdout.decode() == "from-cli-over-tcp\n", r.stderr
