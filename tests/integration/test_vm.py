"""The vm tier against real VMs (TCG where /dev/kvm is missing): the CLI's `run --isolation vm`, the tier
and limits a sandbox reports, pause/resume, the VM pool and reattach after kill -9 of spaced. The tier's
security cases (SECURITY.md V1-V6) are tests/security/test_vm_cases.py. Tier-independent behaviour (exec, files, processes, PTY) runs
on both tiers in the test modules of the first slice."""

import glob
import json
import os
import subprocess
import threading

import pytest

import spacelib
from spacefixtures import vm_unavailable_reason
from spacelib import ApiError, Daemon, wait_for
from lib.host import pids_with_cmdline, qemu_pid


def test_cli_run_prints_the_guest_kernel_release(daemon, vm):
    env = dict(os.environ, SPACE_HOST=f"unix://{daemon.sock}")
    r = subprocess.run([str(spacelib.bin_dir() / "space"), "run", "--isolation", "vm", "--", "uname", "-r"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    guest = r.stdout.strip()
    assert guest and guest != os.uname().release, (guest, os.uname().release)


def test_first_vm_of_a_template_says_it_warms_it(own_daemon, tmp_path):
    """A template without VM artifacts: the first `space run --isolation vm` prints that it warms the
    template (once), the next one does not; the API's progress=1 answers plain JSON once it is warm."""
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox"})
    reason = vm_unavailable_reason(d.client)
    if reason:
        pytest.skip(reason)
    env = {"SPACE_HOST": f"unix://{d.sock}"}
    first = spacelib.run_cli(d.sock, "run", "--isolation", "vm", "--", "true", env=env, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "warming template busybox for VMs, one time, ~" in first.stderr.decode(), first.stderr
    second = spacelib.run_cli(d.sock, "run", "--isolation", "vm", "--", "true", env=env, timeout=600)
    assert second.returncode == 0, second.stderr
    assert "warming" not in second.stderr.decode(), second.stderr
    status, headers, body = d.client.raw("POST", "/v1/sandboxes?progress=1", {"isolation": "vm"}, timeout=600)
    assert status == 201 and headers["content-type"].startswith("application/json"), (status, body[:300])
    d.client.delete(json.loads(body)["id"])


def test_sandbox_reports_its_tier_and_capabilities(client, make_vm):
    sid = make_vm()
    sb = client.get(sid)
    assert sb["isolation"] == "vm", sb
    assert sb["capabilities"]["pause"] is True, sb
    node = client.call("GET", "/v1/node")
    assert node["isolation"]["vm"]["accel"] in ("kvm", "tcg"), node
    # auto picks a VM only where KVM makes it fast.
    assert node["isolation"]["auto"] == ("vm" if node["isolation"]["vm"]["accel"] == "kvm" else "jail"), node


def test_one_create_gets_the_same_default_limits_on_both_tiers(client, make_sandbox, make_vm):
    vm_limits = client.get(make_vm())["limits"]
    jail_limits = client.get(make_sandbox()["id"])["limits"]
    assert vm_limits == jail_limits, (vm_limits, jail_limits)
    assert vm_limits["memory_mib"] == 512, vm_limits


def test_guest_oom_kill_is_137_with_its_reason(daemon, client, make_vm):
    # The guest kernel's OOM killer, not the host's: the VM has 128 MiB, and awk keeps a new 1 MiB string
    # for ever until the guest has no page left. (Small allocations: the guest's kernel refuses a single
    # one larger than its RAM outright, as it did dd's 200 MiB buffer, which is no OOM kill.)
    sid = make_vm(memory_mib=128)
    cli = lambda *args: spacelib.run_cli(daemon.sock, *args, timeout=300)  # noqa: E731
    r = cli("exec", sid, "--", "awk", 'BEGIN { s = "x"; while (length(s) < 1048576) s = s s; '
            "for (i = 0; ; i++) kept[i] = s i }")
    stderr = r.stderr.decode(errors="replace")
    assert r.returncode == 137, (r.returncode, stderr)
    assert "killed: memory limit 128 MiB" in stderr, stderr
    usage = client.get(sid)["usage"]
    assert usage["oom_kills"] >= 1, usage
    # An ordinary SIGKILL is not reported as the memory limit's, nor counted.
    r = cli("exec", sid, "--", "sh", "-c", "kill -9 $$")
    assert r.returncode == 137 and "memory limit" not in r.stderr.decode(errors="replace"), r.stderr
    assert client.get(sid)["usage"]["oom_kills"] == usage["oom_kills"], client.get(sid)["usage"]


def test_pause_resume_keeps_files_processes_and_memory(client, make_vm):
    sid = make_vm()
    bg = client.start_process(sid, shell="i=0; while true; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.2; done")
    client.upload(sid, "/root/kept.txt", b"kept\n")
    wait_for(lambda: client.sh(sid, "cat /tmp/count 2>/dev/null").out.strip().isdigit(), timeout=30,
             what="the counter to start")
    for _ in range(3):
        client.call("POST", f"/v1/sandboxes/{sid}/pause", {})
        assert client.get(sid)["state"] == "paused"
        status, _, _ = client.raw("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
        assert status == 409, status
        client.call("POST", f"/v1/sandboxes/{sid}/resume", {})
        assert client.get(sid)["state"] == "running"
        assert client.download(sid, "/root/kept.txt") == b"kept\n"
    procs = {p["id"]: p for p in client.processes(sid)}
    assert procs[bg["id"]]["running"] is True
    n1 = int(client.sh(sid, "cat /tmp/count").out)
    wait_for(lambda: int(client.sh(sid, "cat /tmp/count").out) > n1, timeout=30, what="the loop to go on")


def test_vm_pool_then_kill9_restart_reattaches(own_daemon):
    d = own_daemon({"pool_size": 0, "vm_pool_size": 1, "default_template": "busybox"})
    c = d.client
    reason = vm_unavailable_reason(c)
    if reason:
        pytest.skip(reason)
    c.call("POST", "/v1/templates/busybox/warm", {})
    wait_for(lambda: 'space_pool_ready{template="vm:busybox"} 1' in c.metrics(), timeout=180,
             what="a pooled VM")
    sid = c.create(template="busybox", isolation="vm")["id"]
    assert 'space_sandbox_creates_total{source="pool"} 1' in c.metrics()
    assert c.sh(sid, "hostname").out.strip() == sid
    c.upload(sid, "/root/persist.txt", b"survives restart\n")
    wait_for(lambda: 'space_pool_ready{template="vm:busybox"} 1' in c.metrics(), timeout=180,
             what="the pool to refill")
    vmm = qemu_pid(sid)

    d.kill9()
    assert spacelib.pid_start_time(vmm) is not None, "the VMM died with spaced"
    d2 = Daemon(state_dir=d.state, config=d.config, extra_args=d.extra_args)
    d.proc = d2.start().proc
    c2 = d2.client
    c2.created = c.created
    assert c2.get(sid)["state"] == "running"
    assert c2.download(sid, "/root/persist.txt") == b"survives restart\n"
    assert qemu_pid(sid) == vmm
    # The pooled VM (stopped, waiting) was reattached too and is handed out.
    sid2 = c2.create(template="busybox", isolation="vm")["id"]
    assert c2.sh(sid2, "hostname").out.strip() == sid2
    c2.delete(sid)
    c2.delete(sid2)
    with pytest.raises(ApiError):
        c2.get(sid)
    assert spacelib.pid_start_time(vmm) is None or spacelib.is_zombie(vmm)


def test_kill9_during_template_warmup_leaves_nothing_behind(own_daemon):
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox"})
    c = d.client
    reason = vm_unavailable_reason(c)
    if reason:
        pytest.skip(reason)
    warm_dir = f"{d.state}/vm/run/warm-".encode()

    def warmup_vmms():
        return pids_with_cmdline(warm_dir)

    def warm():
        try:
            c.raw("POST", "/v1/templates/busybox/warm", {})
        except OSError:
            pass  # spaced is killed under this request

    t = threading.Thread(target=warm, daemon=True)
    t.start()
    wait_for(lambda: warmup_vmms() or None, timeout=60, interval=0.1, what="the warm-up VM to start")
    d.kill9()
    assert warmup_vmms(), "the warm-up VMM is expected to outlive spaced (its own session)"
    d2 = Daemon(state_dir=d.state, config=d.config, extra_args=d.extra_args)
    d.proc = d2.start().proc
    c2 = d2.client
    c2.created = c.created
    wait_for(lambda: not warmup_vmms() or None, timeout=20, what="the interrupted warm-up VMM to be killed")
    assert glob.glob("/sys/fs/cgroup/*/space/warm-*") + glob.glob("/sys/fs/cgroup/space/warm-*") == []
    leftovers = [p for p in (d.state / "vm" / "templates").rglob("*.tmp")]
    assert leftovers == [], leftovers
    # And the template can be warmed again, and used.
    c2.call("POST", "/v1/templates/busybox/warm", {}, timeout=300)
    sid = c2.create(template="busybox", isolation="vm")["id"]
    assert c2.sh(sid, "echo ok").out.strip() == "ok"
    c2.delete(sid)
