"""The egress gateway end to end: a real spaced with egress on, real sandboxes with real clients inside
(busybox wget, curl, python3), and upstream HTTP/HTTPS/DNS servers in a network namespace this test
creates. The daemon's config declares that namespace's subnet external (egress_test_external_subnets),
the one setting that lets a private address count as public. Nothing here sends a packet beyond loopback,
the sandboxes' own links and the test namespace: the "direct UDP" checks aim at the test namespace, not
at a public resolver, so a broken rule cannot leak a packet onto the real network.
The security cases (SECURITY.md E1, E11, E16, E17) are in tests/security/test_egress_denials.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from egressfixtures import CURL, UPSTREAM, create, egress_daemon, python_tpl, sh, upstream, upstream_log  # noqa: F401


# ------------------------------------------------------------------------------------------------ tests


def test_sandbox_gets_a_network_and_the_proxy_env(egress_daemon):
    d = egress_daemon
    sid = create(d)
    try:
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        assert net["mode"] == "deny-all" and net["subnet"].endswith("/30"), net
        r = sh(d, sid, "cat /etc/resolv.conf; echo; env | sort; ip addr show eth0 2>/dev/null || ifconfig eth0")
        assert f"nameserver {net['gateway']}" in r.out, r.out
        assert f"HTTP_PROXY=http://{net['gateway']}:3128" in r.out, r.out
        assert "NO_PROXY=localhost,127.0.0.1" in r.out, r.out
        assert "SSL_CERT_FILE=" in r.out and "NODE_EXTRA_CA_CERTS=" in r.out, r.out
        link = "spc%x" % (int.from_bytes(bytes(int(p) for p in net["subnet"].split("/")[0].split(".")), "big") >> 2)
        assert Path(f"/sys/class/net/{link}").exists(), f"host link {link} missing"
    finally:
        d.client.delete(sid)
    assert not Path(f"/sys/class/net/{link}").exists(), f"host link {link} left after delete"


def test_deny_all_blocks_everything(egress_daemon, upstream, python_tpl):
    d = egress_daemon
    sid = create(d, template=python_tpl)
    try:
        before = len(upstream_log(upstream))
        r = sh(d, sid, f"{CURL} http://allowed.test/deny-all; echo rc=$?")
        assert "rc=0" not in r.out and "/deny-all" not in r.out, r.out
        r = sh(d, sid, f"{CURL} --noproxy '*' http://{UPSTREAM}/direct; echo rc=$?")
        assert "rc=0" not in r.out and "/direct" not in r.out, r.out
        log = d.client.raw("GET", f"/v1/sandboxes/{sid}/network/log")[2].decode()
        assert '"verdict":"deny"' in log, log  # refused by the gateway, not by a broken client
        time.sleep(0.5)
        reached = [e for e in upstream_log(upstream)[before:] if e["kind"] == "http"]
        assert not reached, f"requests reached the upstream under deny-all: {reached}"
    finally:
        d.client.delete(sid)


def test_allow_list_allows_only_the_allowed_name(egress_daemon, upstream, python_tpl):
    d = egress_daemon
    sid = d.client.create(template=python_tpl,
                          network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]})["id"]
    try:
        r = sh(d, sid, f"{CURL} http://allowed.test/via-proxy")
        assert r.exit_code == 0 and '"path": "/via-proxy"' in r.out, (r.out, r.err)
        r = sh(d, sid, f"{CURL} --noproxy '*' http://allowed.test/transparent")
        assert r.exit_code == 0 and '"path": "/transparent"' in r.out, (r.out, r.err)
        r = sh(d, sid, f"{CURL} http://other.test/not-allowed; echo rc=$?")
        assert "rc=0" not in r.out and "/not-allowed" not in r.out, r.out
        paths = [e["path"] for e in upstream_log(upstream) if e["kind"] == "http"]
        assert "/via-proxy" in paths and "/transparent" in paths
        assert "/not-allowed" not in paths
        # Changed while running: other.test now allowed, allowed.test no longer.
        d.client.call("PUT", f"/v1/sandboxes/{sid}/network",
                      {"mode": "allow-list", "rules": [{"action": "allow", "domain": "other.test"}]})
        r = sh(d, sid, f"{CURL} http://other.test/now-allowed")
        assert r.exit_code == 0 and "/now-allowed" in r.out, (r.out, r.err)
        # The audit log names the sandbox's decisions.
        status, _, body = d.client.raw("GET", f"/v1/sandboxes/{sid}/network/log")
        assert status == 200, body
        lines = [json.loads(x) for x in body.decode().splitlines() if x.strip()]
        assert lines and all(x["sandbox"] == sid for x in lines)
        assert any(x.get("verdict") == "deny" and x.get("name") == "other.test" for x in lines), lines
    finally:
        d.client.delete(sid)


def test_bad_network_requests_get_clear_errors(egress_daemon):
    c = egress_daemon.client
    for body, needle in (({"network": {"mode": "everything"}}, "mode"),
                         ({"network": {"mode": "allow-list", "rules": [{"action": "allow"}]}}, "rule"),
                         ({"network": {"rules": "x"}}, "rules"),
                         ({"network": {"moed": "deny-all"}}, "unknown field"),
                         ({"secrets": ["NO_SUCH_SECRET"]}, "NO_SUCH_SECRET")):
        status, _, data = c.raw("POST", "/v1/sandboxes", body)
        assert status == 400, (body, status, data)
        assert needle in data.decode(), (needle, data)
    status, _, data = c.raw("POST", "/v1/secrets", {"name": "1BAD", "value": "x", "hosts": ["a.test"]})
    assert status == 400 and b"name" in data, data
    status, _, data = c.raw("POST", "/v1/secrets", {"name": "GOOD", "value": "x"})
    assert status == 400 and b"hosts" in data, data


def _wait_new_gateway(d, old_pid, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = d.egress_pid()
        if pid and pid != old_pid:
            return pid
        time.sleep(0.2)
    raise AssertionError(f"space-egress was not restarted:\n{d.log_tail()}")


def test_gateway_is_restarted_and_survives_a_daemon_restart(egress_daemon, upstream, python_tpl):
    d = egress_daemon
    sid = d.client.create(template=python_tpl,
                          network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]})["id"]
    try:
        assert sh(d, sid, f"{CURL} http://allowed.test/before").exit_code == 0
        # The gateway dies: spaced restarts it and registers the sandbox again, policy included.
        old = d.egress_pid()
        assert old
        os.kill(old, 9)
        new = _wait_new_gateway(d, old)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            r = sh(d, sid, f"{CURL} http://allowed.test/after-gateway-restart")
            if r.exit_code == 0:
                break
            time.sleep(0.3)
        assert r.exit_code == 0 and "/after-gateway-restart" in r.out, (r.out, r.err)
        assert sh(d, sid, f"{CURL} http://other.test/still-denied; echo rc=$?").out.strip().endswith("rc=22")
        # spaced restarts: the gateway (and its pid) stays, the sandbox keeps its network.
        d.stop(keep_egress=True)
        assert d.egress_pid() == new, "space-egress did not outlive spaced"
        d.start()
        assert d.egress_pid() == new, "a restarted spaced replaced a running space-egress"
        assert "adopted the running space-egress" in d.log_path.read_text(errors="replace")
        r = sh(d, sid, f"{CURL} http://allowed.test/after-daemon-restart")
        assert r.exit_code == 0 and "/after-daemon-restart" in r.out, (r.out, r.err)
    finally:
        d.client.delete(sid)
