"""Pooled sandboxes outlive spaced by design; a spaced that starts with another configuration must not
hand out ones made under the old one (SECURITY.md catalogue, pool hygiene): made without a network where
egress is now on, they would have only `lo` and `space net` would refuse them."""

import shutil
import subprocess

import pytest

import spacelib


def test_pooled_sandboxes_made_without_egress_are_recycled_when_egress_comes_on(own_daemon):
    if not (spacelib.bin_dir() / "space-egress").is_file():
        pytest.skip(f"no space-egress in {spacelib.bin_dir()}")
    if not shutil.which("nft") or subprocess.run(["nft", "list", "tables"], capture_output=True).returncode != 0:
        pytest.skip("nftables is not usable here: egress cannot come on")
    if subprocess.run(["pgrep", "-x", "space-egress"], capture_output=True, text=True).stdout.split():
        pytest.skip("another SPACE egress gateway runs on this host; its table and ports are host-wide")
    d = own_daemon({"pool_size": 1, "vm_pool_size": 0, "pool_templates": "busybox", "default_template": "busybox",
                    "egress": False})
    spacelib.wait_for(lambda: 'space_pool_ready{template="busybox"} 1' in d.client.metrics(), timeout=60, what="the jail pool")
    old = d.sandbox_dir_ids()
    assert len(old) == 1, old
    d.stop()
    d.config["egress"] = True
    try:
        d.start()
        assert "egress: on" in d.log_path.read_text(errors="replace"), d.log_tail()
        log = d.log_path.read_text(errors="replace")
        assert f"recycling pooled sandbox {next(iter(old))}: it has no network and egress is now on" in log, d.log_tail()
        spacelib.wait_for(lambda: 'space_pool_ready{template="busybox"} 1' in d.client.metrics(), timeout=60, what="the refilled pool")
        assert not (old & d.sandbox_dir_ids()), "the old pooled sandbox is still there"
        sid = d.client.create()["id"]
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        assert net["mode"] == "deny-all" and net["subnet"].endswith("/30"), net
        assert "eth0:" in d.client.sh(sid, "cat /proc/net/dev").out, "the new sandbox has no link"
        d.client.delete(sid)
    finally:
        d.stop()
        if not subprocess.run(["pgrep", "-x", "space-egress"], capture_output=True, text=True).stdout.split():
            subprocess.run(["nft", "delete", "table", "inet", "space"], capture_output=True)
