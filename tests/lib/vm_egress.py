"""The vm tier behind the egress gateway, shared by tests/integration/test_vm_egress.py and
tests/security/test_vm_egress_cases.py: a spaced with egress on and a VM pool of one (module fixture
`vm_net`, on the upstream namespace of lib/egress.py), and readers of what each VM's link, tap and audit
show. Each VM's NIC is a host tap `spc<N>` that QEMU inherits as a descriptor; its guest configures the
sandbox end at hand-over."""

from __future__ import annotations

import json
import os
import time

import pytest

from lib import spacelib
from lib.egress import NET, UPSTREAM, run as _run, skip as _skip, upstream_log
from lib.fixtures import (PYTHON_ROOTFS, _current_daemons, baseline_uid_procs, start_daemon_with_busybox,
                          stop_and_check, vm_unavailable_reason)

# busybox: a 403 from the gateway is a non-zero exit. Not wget -T: Debian's busybox 1.35 crashes with it.
WGET = "timeout 10 wget -q -O -"
ALLOW_ALLOWED = {"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]}


def spc_links() -> set[str]:
    return {n for n in os.listdir("/sys/class/net") if n.startswith("spc")}


@pytest.fixture(scope="module")
def vm_net(upstream):
    """A spaced with egress on (lib/egress.py's settings) and a VM pool of one for the busybox template,
    whose VM artifacts are made first (one boot under emulation). Creates take the pooled VM when one is
    ready and restore a fresh one otherwise, so both paths run."""
    config = {"pool_size": 0, "vm_pool_size": 1, "pool_templates": "busybox", "default_template": "busybox",
              "egress": True, "egress_test_external_subnets": [NET + "0/24"],
              "egress_upstream_resolvers": UPSTREAM + ":53", "egress_upstream_ca_file": upstream["ca"]}
    baseline = baseline_uid_procs()
    links_before = spc_links()
    d = start_daemon_with_busybox(config)
    problems = []
    try:
        if "egress: on" not in d.log_path.read_text(errors="replace"):
            _skip(f"spaced did not turn egress on:\n{d.log_tail()}")
        reason = vm_unavailable_reason(d.client)
        if reason:
            _skip(reason)
        d.client.call("POST", "/v1/templates/busybox/warm", {})
        yield d
    finally:
        if d.alive():
            problems = stop_and_check(d, baseline, 1)
        # Nothing of this daemon's may be left but the pooled VM (a VMM mid-prepare at the kill -9 of spaced
        # is cleaned by reconcile, found by its directory).
        pool_left = d.sandbox_dir_ids() - d.client.created
        stray = [p for p in spacelib.all_pids() if str(d.state).encode() + b"/" in
                 spacelib.read(f"/proc/{p}/cmdline").encode() and not any(i in spacelib.read(f"/proc/{p}/cmdline")
                                                                         for i in pool_left)]
        if stray:
            problems.append(f"processes of this daemon's state dir left behind: {stray}")
        d.force_cleanup()  # the pooled VM's QEMU and the state dir
        if d in _current_daemons:
            _current_daemons.remove(d)
        # The pooled VM outlived spaced by design and was killed by the harness: its tap went with it.
        deadline = time.monotonic() + 5
        while spc_links() - links_before and time.monotonic() < deadline:
            time.sleep(0.1)
        left = spc_links() - links_before
        for link in left:
            _run("ip", "link", "del", link, check=False)
        if left:
            problems.append(f"sandbox links left behind: {sorted(left)}")
        if not _run("pgrep", "-x", "space-egress", check=False).stdout.split():
            _run("nft", "delete", "table", "inet", "space", check=False)
    assert d.egress_pid() is None, "space-egress outlived the test daemon's teardown"
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def python_vm_template(vm_net):
    """The python template (curl, python3, a CA bundle) as VM artifacts: an ext4 image of the tree and one
    warm-up boot under emulation."""
    if not (PYTHON_ROOTFS / "usr" / "bin" / "curl").exists():
        _skip(f"no python rootfs with curl at {PYTHON_ROOTFS}")
    if not any(t.get("name") == "python" for t in vm_net.client.templates()):
        vm_net.client.build_template("python", str(PYTHON_ROOTFS))
    vm_net.client.call("POST", "/v1/templates/python/warm", {}, timeout=600)
    return "python"


def pool_creates(d) -> int:
    for line in d.client.metrics().splitlines():
        if line.startswith('space_sandbox_creates_total{source="pool"}'):
            return int(line.split()[-1])
    raise AssertionError("no pool counter in /metrics")


def wait_pool_ready(d, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in d.client.metrics().splitlines():
            if line.startswith("space_pool_ready{") and "vm" in line and not line.endswith(" 0"):
                return
        time.sleep(0.5)
    raise AssertionError(f"the VM pool did not fill:\n{d.log_tail()}")


def create_vm(d, **kw) -> str:
    return d.client.create(isolation="vm", **kw)["id"]


def link_of(subnet: str) -> str:
    network = int.from_bytes(bytes(int(p) for p in subnet.split("/")[0].split(".")), "big")
    return "spc%x" % (network >> 2)


def taps_of(pid: int) -> list[str]:
    """The tap devices the process holds descriptors of (tun fdinfo names the interface)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        for line in spacelib.read(f"/proc/{pid}/fdinfo/{fd}").splitlines():
            if line.startswith("iff:"):
                out.append(line.split(":", 1)[1].strip())
    return out


def net_log(d, sid) -> list[dict]:
    status, _, body = d.client.raw("GET", f"/v1/sandboxes/{sid}/network/log")
    assert status == 200, body
    return [json.loads(x) for x in body.decode().splitlines() if x.strip()]


def http_paths(up, since=0) -> list[str]:
    return [e["path"] for e in upstream_log(up)[since:] if e["kind"] == "http"]
