"""`space net` end to end: rules typed the way the help shows them (CIDR:PORT, a bare address) really open
a connection from a sandbox to a listener in the test's own network namespace, --remove and --reset really
close it again, and `space net log` explains a denied port as a port. The listener lives on a second
subnet of the test namespace that is *not* declared external, so only the CIDR rule can open it (its
addresses are in 10.0.0.0/8, a reserved range)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import spacelib
from egressfixtures import CURL, HOST_IF, NS, TAG, create, egress_daemon, python_tpl, sh, upstream  # noqa: F401

PRIVATE_NET = f"10.252.{TAG}."
LISTENER = PRIVATE_NET + "2"
OPEN_PORT, OTHER_PORT = 8080, 8081
TOKEN = f"space-cli-net-{TAG}"

LISTENER_PY = r"""
import sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = (sys.argv[2] + " port " + str(self.server.server_address[1]) + "\n").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
for port in (int(p) for p in sys.argv[3:]):
    threading.Thread(target=ThreadingHTTPServer((sys.argv[1], port), H).serve_forever, daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def listener(upstream):
    subprocess.run(["ip", "addr", "add", PRIVATE_NET + "1/24", "dev", HOST_IF], check=True)
    subprocess.run(["ip", "-n", NS, "addr", "add", LISTENER + "/24", "dev", "up0"], check=True)
    proc = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, "-c", LISTENER_PY, LISTENER, TOKEN,
                             str(OPEN_PORT), str(OTHER_PORT)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        yield LISTENER
    finally:
        proc.kill()
        proc.wait(10)
        subprocess.run(["ip", "addr", "del", PRIVATE_NET + "1/24", "dev", HOST_IF], check=False)


def cli(d, *args):
    return spacelib.run_cli(d.sock, *args, timeout=60)


def text(r) -> str:
    return r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")


def fetch(d, sid, port) -> str:
    # Transparent (no proxy): the audit line then names the address and port the sandbox asked for.
    return sh(d, sid, f"{CURL} --noproxy '*' http://{LISTENER}:{port}/ 2>&1; echo rc=$?").out


def test_cidr_with_port_opens_only_that_port(egress_daemon, python_tpl, listener):
    d = egress_daemon
    sid = create(d, template=python_tpl)
    try:
        assert f"{TOKEN} port {OPEN_PORT}" not in fetch(d, sid, OPEN_PORT)  # deny-all before the rule

        r = cli(d, "net", sid, "--allow", f"{PRIVATE_NET}0/24:{OPEN_PORT}")
        assert r.returncode == 0, text(r)
        assert f"allow {PRIVATE_NET}0/24 ports {OPEN_PORT}" in text(r), text(r)
        assert "mode allow-list" in text(r), text(r)  # the mode change is explained
        assert f"{TOKEN} port {OPEN_PORT}" in fetch(d, sid, OPEN_PORT)
        assert f"{TOKEN} port {OTHER_PORT}" not in fetch(d, sid, OTHER_PORT)

        log = cli(d, "net", "log", sid)
        assert log.returncode == 0, text(log)
        lines = log.stdout.decode().splitlines()
        assert lines[0].split() == ["TIME", "KIND", "VERDICT", "DESTINATION", "RULE", "REASON"], lines[0]
        denied = [x for x in lines if f"{LISTENER}:{OTHER_PORT}" in x]
        assert denied and all(f"port {OTHER_PORT} not allowed" in x for x in denied), lines
        assert not any("reserved range" in x for x in denied), denied
        raw = cli(d, "net", "log", sid, "--json")
        records = [json.loads(x) for x in raw.stdout.decode().splitlines() if x.strip()]
        assert any(rec.get("verdict") == "allow" and rec.get("used") == f"{LISTENER}:{OPEN_PORT}" for rec in records)

        shown = cli(d, "net", sid)
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        assert f"address: {net['address']} (subnet {net['subnet']}" in text(shown), text(shown)
        assert all(rec.get("source", "").startswith(net["address"]) for rec in records if "source" in rec), records

        r = cli(d, "net", sid, "--remove", f"{PRIVATE_NET}0/24:{OPEN_PORT}")
        assert r.returncode == 0, text(r)
        assert d.client.call("GET", f"/v1/sandboxes/{sid}/network")["rules"] == []
        assert f"{TOKEN} port {OPEN_PORT}" not in fetch(d, sid, OPEN_PORT)
        r = cli(d, "net", sid, "--remove", f"{PRIVATE_NET}0/24:{OPEN_PORT}")
        assert r.returncode == 1 and "no rule matches" in text(r), text(r)
    finally:
        d.client.delete(sid)


def test_bare_address_is_a_host_rule_and_reset_clears(egress_daemon, python_tpl, listener):
    d = egress_daemon
    sid = create(d, template=python_tpl)
    try:
        r = cli(d, "net", sid, "--allow", LISTENER)
        assert r.returncode == 0, text(r)
        rules = d.client.call("GET", f"/v1/sandboxes/{sid}/network")["rules"]
        assert rules == [{"action": "allow", "cidr": LISTENER + "/32"}], rules
        assert f"{TOKEN} port {OTHER_PORT}" in fetch(d, sid, OTHER_PORT)

        r = cli(d, "net", sid, "--mode", "deny-all")
        assert r.returncode == 0, text(r)
        assert "1 rules are kept" in text(r), text(r)
        assert f"{TOKEN} port {OTHER_PORT}" not in fetch(d, sid, OTHER_PORT)

        r = cli(d, "net", sid, "--reset")
        assert r.returncode == 0, text(r)
        net = d.client.call("GET", f"/v1/sandboxes/{sid}/network")
        assert net["mode"] == "deny-all" and net["rules"] == [], net
    finally:
        d.client.delete(sid)
