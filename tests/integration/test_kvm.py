"""KVM proven, not assumed (docs/vm.md, "KVM or emulation"): the vm tier uses KVM only where a probe VM
reached its agent under -accel kvm; elsewhere it runs under TCG with the reason in GET /v1/node, or is
absent with that reason when emulation is off; `auto` isolation picks a VM only on proven KVM; an
operator who forces vm_accel = kvm gets no daemon rather than a broken one.

Each daemon here gets a probe cache of its own, so that a forced failure never lands in the host-wide
cache the rest of the suite reads."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import spacelib
from spacefixtures import _skip_if_no_binaries

GUEST = Path(os.environ.get("SPACE_VM_DIR", "/var/cache/space/vm"))


def node_after_probe(client, timeout=90):
    """GET /v1/node once the KVM probe has a verdict (it runs beside the daemon under `auto`)."""
    deadline = time.monotonic() + timeout
    while True:
        node = client.call("GET", "/v1/node")
        state = node["isolation"]["vm"].get("kvm", {}).get("state")
        if state != "probing" or time.monotonic() > deadline:
            return node
        time.sleep(0.2)


def kvm_opens() -> str | None:
    """None when this process can open /dev/kvm read-write (so spaced's own checks pass), else why not."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as e:
        return f"/dev/kvm: {e.strerror}"
    os.close(fd)
    return None


def need_guest():
    if not (GUEST / "vmlinuz").exists() or not (GUEST / "initramfs.cpio").exists():
        reason = f"no vm guest in {GUEST} (scripts/vm/build-guest makes it)"
        print("\n" + reason)
        pytest.skip(reason)


@pytest.fixture
def probe_cache():
    d = tempfile.mkdtemp(prefix="space-kvm-cache-", dir="/var/tmp")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def failing_probe(probe_cache, **extra):
    """A daemon config whose KVM probe cannot succeed on any host: 1 ms for a guest boot."""
    return {"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox",
            "vm_kvm_probe_cache_dir": probe_cache, "vm_kvm_probe_timeout_ms": 1, **extra}


def test_node_says_what_is_known_of_kvm(client):
    node = node_after_probe(client)
    vm = node["isolation"]["vm"]
    kvm = vm.get("kvm")
    assert kvm and kvm["state"] in ("proven", "failed", "absent", "off"), node
    assert kvm["usable"] == (kvm["state"] == "proven"), kvm
    if kvm["state"] != "proven":
        assert kvm.get("reason"), kvm
        print(f"\nKVM not used here: {kvm['reason']}")
    if vm.get("available"):
        assert vm["accel"] == ("kvm" if kvm["state"] == "proven" else "tcg"), vm
    # auto is honest: a VM only on proven KVM.
    assert node["isolation"]["auto"] == ("vm" if vm.get("accel") == "kvm" else "jail"), node
    assert node["egress"]["on"] in (True, False) and (node["egress"]["on"] or node["egress"]["reason"]), node


def test_a_failed_probe_falls_back_to_tcg_and_is_cached_for_the_next_daemon(own_daemon, probe_cache):
    need_guest()
    d = own_daemon(failing_probe(probe_cache), build_template=False)
    vm = node_after_probe(d.client)["isolation"]["vm"]
    assert vm["available"] is True and vm["accel"] == "tcg", vm
    assert d.client.call("GET", "/v1/node")["isolation"]["auto"] == "jail"
    why_not = kvm_opens()
    if why_not:
        # No VM was needed to decide: the node is missing or refuses spaced.
        assert vm["kvm"]["state"] in ("absent", "failed") and vm["kvm"]["reason"], vm
        assert not list(Path(probe_cache).glob("*.json")), "a verdict that needed no VM was cached"
        return
    assert vm["kvm"] == {**vm["kvm"], "state": "failed", "usable": False, "cached": False}, vm
    assert vm["kvm"]["reason"] == "guest did not answer in 0.001 s under KVM", vm
    cached = list(Path(probe_cache).glob("*.json"))
    assert len(cached) == 1, cached
    # The next daemon (or this one restarted) takes the verdict instead of probing again.
    probes = d.log_path.read_text().count("vm: probing KVM")
    assert probes == 1, probes
    d.stop()
    d.start()
    again = d.client.call("GET", "/v1/node")["isolation"]["vm"]["kvm"]
    assert again["state"] == "failed" and again["cached"] is True, again
    assert again["checked_at"] == vm["kvm"]["checked_at"], (again, vm["kvm"])
    assert d.log_path.read_text().count("vm: probing KVM") == probes, "the restarted daemon probed again"


def test_without_tcg_a_node_without_kvm_has_no_vm_tier_and_vm_creates_answer_503(own_daemon, probe_cache):
    d = own_daemon(failing_probe(probe_cache, vm_allow_tcg=False))
    node = node_after_probe(d.client)
    vm = node["isolation"]["vm"]
    assert vm["available"] is False and "accel" not in vm, vm
    assert vm["reason"], vm
    if (GUEST / "vmlinuz").exists():
        assert "KVM" in vm["reason"] and "vm_allow_tcg" in vm["reason"], vm
    t0 = time.monotonic()
    status, _, body = d.client.raw("POST", "/v1/sandboxes", {"isolation": "vm"})
    print(f"\nvm create on a node without a vm tier answered {status} in {(time.monotonic() - t0) * 1000:.0f} ms")
    assert status == 503, (status, body)
    assert b"vm tier is not available" in body, body
    # auto is a jail there, and jails are untouched.
    assert node["isolation"]["auto"] == "jail"
    sid = d.client.create()["id"]
    assert d.client.get(sid)["isolation"] == "jail"
    assert d.client.sh(sid, "echo ok").out.strip() == "ok"
    d.client.delete(sid)


def test_vm_accel_kvm_without_proven_kvm_does_not_start(probe_cache):
    _skip_if_no_binaries()
    d = spacelib.Daemon(config=failing_probe(probe_cache, vm_accel="kvm"))
    try:
        with pytest.raises(RuntimeError) as e:
            d.start(timeout=60)
        log = d.log_tail(200)
        assert "vm_accel is kvm" in log, log
        if (GUEST / "vmlinuz").exists():
            assert "KVM is not usable" in log, log
        assert d.proc.returncode != 0, e.value
    finally:
        if d.alive():
            d.stop()
        d.force_cleanup()


def test_a_kvm_node_spaced_may_not_open_is_reported_as_permission_denied(own_daemon, probe_cache):
    """The node spaced checks sits on a nodev mount: even root's open fails (EACCES), as it does for a
    /dev/kvm that a mount, a container runtime or a security module keeps from spaced."""
    need_guest()
    if not os.path.exists("/dev/kvm"):
        pytest.skip("no /dev/kvm on this host to copy")
    mnt = tempfile.mkdtemp(prefix="space-kvm-nodev-", dir="/var/tmp")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "nodev,size=64k", "tmpfs", mnt], check=True)
    try:
        rdev = os.stat("/dev/kvm").st_rdev
        os.mknod(f"{mnt}/kvm", 0o600 | 0o020000, rdev)
        d = own_daemon(failing_probe(probe_cache, vm_kvm_node=f"{mnt}/kvm"), build_template=False)
        vm = node_after_probe(d.client)["isolation"]["vm"]
        assert vm["kvm"]["state"] == "failed", vm
        assert vm["kvm"]["reason"].startswith(f"permission denied opening {mnt}/kvm"), vm
        assert vm["accel"] == "tcg" and vm["available"] is True, vm
        assert not list(Path(probe_cache).glob("*.json")), "no VM was needed to decide"
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)
        os.rmdir(mnt)


def test_auto_picks_a_vm_where_kvm_is_proven(client, make_sandbox):
    vm = node_after_probe(client)["isolation"]["vm"]
    if vm.get("kvm", {}).get("state") != "proven":
        reason = f"KVM is not proven on this host: {vm.get('kvm', {}).get('reason') or vm.get('reason')}"
        print("\n" + reason)
        pytest.skip(reason)
    sid = make_sandbox()["id"]
    assert client.get(sid)["isolation"] == "vm"
    assert client.sh(sid, "uname -r").out.strip() != os.uname().release
