"""The vm tier behind the egress gateway: real microVMs (TCG where /dev/kvm is missing) with egress on, the
VM daemon of lib/vm_egress.py on the upstream namespace of lib/egress.py; a VM's network across a kill -9 of
spaced, the pool's taps, forked and rolled-back VMs. The security cases (SECURITY.md V5, V7, V8) are
tests/security/test_vm_egress_cases.py. Nothing here sends a packet beyond loopback, the
sandboxes' own links and the test namespace."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from egressfixtures import sh, upstream  # noqa: F401  (fixture)
from lib.vm_egress import (ALLOW_ALLOWED, WGET, create_vm, link_of, net_log, pool_creates,  # noqa: F401
                           spc_links, vm_net, wait_pool_ready)


# ------------------------------------------------------------------------------------------------ tests


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


