"""The egress gateway itself, checked from the host (SECURITY.md E18, V8).

E18: the running space-egress of a real spaced runs as its own uid, with no capabilities, no_new_privs and
its seccomp filter, in a mount namespace holding only its audit directory and two device nodes, and still
serves sandboxes end to end in that state.

V8 (the gateway's own check, behind the host's antispoof chain): with the antispoof rules taken out for
the test, a packet carrying a neighbour's source address that arrives on another sandbox's link is
refused by the gateway (DNS over UDP and a TCP connection alike), counted, and audited as an unknown
sender; the neighbour's policy is never applied, nothing is resolved or fetched on its behalf, and its
audit holds nothing of it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

from lib import spacelib
from lib.egress import (CURL, UPSTREAM, create, egress_daemon, python_tpl, sh, upstream,  # noqa: F401
                            upstream_log)

EGRESS_UID = 0x0FFF0000  # spaced's default egress_uid (src/core/config.h)


def run(*argv, check=True, **kw):
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=60, **kw)


def status_of(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def mount_points(pid: int) -> set[str]:
    return {line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()}


def control(d, request: dict) -> dict:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(d.state / "egress" / "control.sock"))
        s.sendall(json.dumps(request).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def gateway_audit(d) -> list[dict]:
    path = d.state / "egress" / "audit" / "audit.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_e18_the_gateway_runs_confined_as_seen_from_the_host(egress_daemon, upstream, python_tpl):
    d = egress_daemon
    pid = d.egress_pid()
    assert pid, "no space-egress running for the test daemon"
    st = status_of(pid)
    uid = str(EGRESS_UID)
    assert st["Uid"].split() == [uid] * 4, st["Uid"]
    assert st["Gid"].split() == [uid] * 4, st["Gid"]
    assert st["Groups"] == "", st["Groups"]
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(st[caps], 16) == 0, (caps, st[caps])
    assert st["NoNewPrivs"] == "1", st["NoNewPrivs"]
    assert st["Seccomp"] == "2", st["Seccomp"]
    audit_dir = str((d.state / "egress" / "audit").resolve())
    assert mount_points(pid) == {"/", audit_dir, "/dev/null", "/dev/urandom"}, mount_points(pid)
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt"), "not in a mount namespace"
    # Its state is its own: the audit directory and files belong to its uid, mode 0700/0600.
    a = os.stat(audit_dir)
    assert (a.st_uid, a.st_gid, a.st_mode & 0o7777) == (EGRESS_UID, EGRESS_UID, 0o700), a
    for f in Path(audit_dir).iterdir():
        s = f.stat()
        assert (s.st_uid, s.st_mode & 0o077) == (EGRESS_UID, 0), (f, s)
    # The control socket, config and log beside it stay root's; the gateway got the socket as a descriptor.
    for name in ("control.sock", "egress.json", "egress.log"):
        assert (d.state / "egress" / name).stat().st_uid == 0, name
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert b"--control-fd" in cmdline, cmdline
    # And it works, confined: DNS, the explicit proxy and a transparent connection.
    sid = d.client.create(template=python_tpl,
                          network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]})["id"]
    try:
        r = sh(d, sid, f"{CURL} http://allowed.test/e18-proxy && {CURL} --noproxy '*' http://allowed.test/e18-direct")
        assert r.exit_code == 0 and '"path": "/e18-direct"' in r.out, (r.out, r.err)
        paths = [e["path"] for e in upstream_log(upstream) if e["kind"] == "http"]
        assert "/e18-proxy" in paths and "/e18-direct" in paths, paths
        assert d.egress_pid() == pid, "the gateway restarted while serving (a seccomp kill?)"
        assert any(x.get("sandbox") == sid for x in gateway_audit(d))
    finally:
        d.client.delete(sid)


def spoofing_from(d, sid: str, script: str) -> subprocess.CompletedProcess:
    """Runs `script` (sh) in sandbox `sid`'s network namespace as host root: what a VM guest's root can
    do on its own link (a jail's seccomp would stop it inside)."""
    pids = spacelib.sandbox_pids(sid)
    assert pids, f"no host pid for {sid}"
    return run("nsenter", f"--net=/proc/{pids[0]}/ns/net", "sh", "-c", script, check=False)


def test_v08_the_gateway_refuses_a_neighbours_source_on_the_wrong_link(egress_daemon, upstream):
    d = egress_daemon
    wildcard = {"mode": "allow-list", "rules": [{"action": "allow", "domain": "*.allowed.test"},
                                                {"action": "allow", "domain": "allowed.test"}]}
    neighbour = d.client.create(network=wildcard)["id"]
    attacker = create(d)  # deny-all
    saved = run("nft", "list", "chain", "inet", "space", "antispoof").stdout
    gateway = d.egress_pid()
    rule = table = None
    try:
        n_net = d.client.call("GET", f"/v1/sandboxes/{neighbour}/network")
        a_net = d.client.call("GET", f"/v1/sandboxes/{attacker}/network")
        n_ip = n_net["subnet"].split("/")[0].rsplit(".", 1)[0] + "." + str(int(n_net["gateway"].rsplit(".", 1)[1]) + 1)
        a_gw = a_net["gateway"]
        a_link = "spc%x" % (int.from_bytes(socket.inet_aton(a_net["subnet"].split("/")[0]), "big") >> 2)
        label = "v8gw" + os.urandom(4).hex()
        # Without the host's antispoof rules, only the gateway stands between the spoof and the neighbour.
        run("nft", "flush", "chain", "inet", "space", "antispoof")
        # The gateway's SYN-ACK to the neighbour's address goes back out of the attacker's link, so the
        # spoofed handshake can complete (as if the attacker could see the neighbour's replies).
        table = str(200 + os.getpid() % 50)
        rule = ["from", a_gw, "to", n_ip, "lookup", table, "priority", "90"]
        run("ip", "route", "add", f"{n_ip}/32", "dev", a_link, "table", table)
        run("ip", "rule", "add", *rule)
        before_up, wrong_before = len(upstream_log(upstream)), control(d, {"op": "stats"})["wrong_link"]
        r = spoofing_from(d, attacker, f"""
ip addr add {n_ip}/32 dev eth0 && ip route replace {a_gw} dev eth0 src {n_ip} && ip route get {a_gw}
python3 - <<'EOF' 2>&1 || true
import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("{n_ip}", 0))
q = b"\\x13\\x37\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00"
for l in ("{label}", "allowed", "test"):
    q += bytes([len(l)]) + l.encode()
q += b"\\x00\\x00\\x01\\x00\\x01"
u.sendto(q, ("{a_gw}", 53))
u.settimeout(2)
try:
    print("dns answer", len(u.recv(512)))
except OSError as e:
    print("dns none", e)
t = socket.socket()
t.bind(("{n_ip}", 0))
t.settimeout(5)
try:
    t.connect(("{UPSTREAM}", 80))
    print("tcp connected")
    t.sendall(b"GET /{label} HTTP/1.1\\r\\nHost: allowed.test\\r\\nConnection: close\\r\\n\\r\\n")
    print("tcp reply", repr(t.recv(4096)[:80]))
except OSError as e:
    print("tcp error", e)
EOF
""")
        assert f"src {n_ip}" in r.stdout, r.stdout + r.stderr  # it really sent as its neighbour
        assert "tcp connected" in r.stdout, r.stdout + r.stderr  # the handshake completed: the gateway decided
        time.sleep(1)
        assert "dns answer" not in r.stdout, r.stdout
        reached = [e for e in upstream_log(upstream)[before_up:] if label in json.dumps(e)]
        assert not reached, f"resolved or fetched on the neighbour's behalf: {reached}"
        neighbour_lines = [json.loads(x) for x in d.client.raw("GET", f"/v1/sandboxes/{neighbour}/network/log")[2]
                           .decode().splitlines() if x.strip()]
        assert not [x for x in neighbour_lines if x.get("kind") in ("dns", "connect")], neighbour_lines
        wrong = [x for x in gateway_audit(d) if x.get("rule") == "wrong-link"]
        assert {x["kind"] for x in wrong} >= {"dns", "connect"}, wrong
        assert all(x.get("sandbox", "") == "" and x["source"] == n_ip and a_link in x["reason"] for x in wrong), wrong
        assert control(d, {"op": "stats"})["wrong_link"] >= wrong_before + 2
        assert d.egress_pid() == gateway, "the gateway restarted (a seccomp kill?): see egress.log"
        # Control: the neighbour itself is served on its own link.
        r = sh(d, neighbour, f"nslookup ok-{label}.allowed.test; echo rc=$?")
        time.sleep(0.5)
        assert [e for e in upstream_log(upstream)[before_up:] if f"ok-{label}" in json.dumps(e)], r.out
    finally:
        if rule:
            run("ip", "rule", "del", *rule, check=False)
        if table:
            run("ip", "route", "flush", "table", table, check=False)
        run("nft", "flush", "chain", "inet", "space", "antispoof", check=False)
        run("nft", "-f", "-", input=saved, check=False)
        d.client.delete(attacker)
        d.client.delete(neighbour)
    restored = run("nft", "list", "chain", "inet", "space", "antispoof").stdout
    assert "fib saddr . iif oif missing" in restored, restored
