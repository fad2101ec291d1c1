"""SECURITY.md E19 and E20 from the host: sandboxes flood the gateway (DNS queries and denied connections as
fast as python can send them) and hold its connections with request heads trickled a byte a second, in real
jail sandboxes behind one spaced with egress on. What is checked is what reached the host: how much the
gateway's audit files grew, the gateway's own counters (its control socket's "stats"), the audit lines
spaced serves, and whether a neighbour sandbox is still answered.

The module's gateway runs with GATEWAY_SETTINGS added to the config spaced wrote for it: spaced writes
egress.json only when it starts and restarts a gateway that died from that same file, so the module edits
the file and kills the gateway once. The flood limits (rates, line budget, audit cap) stay at their
defaults; the head deadline is shortened to 3 s, and the node's connection cap is lowered to 512 so that two
sandboxes at their own cap of 256 would fill it."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time

import pytest

from lib.egress import UPSTREAM, audit, create, egress_daemon, python_tpl, sh, upstream  # noqa: F401

GATEWAY_SETTINGS = {"head_deadline_ms": 3000, "max_connections": 512}
FLOOD_SECONDS = 15
AUDIT_GROWTH_LIMIT = 2 << 20


def control(d, request: dict) -> dict:
    """One request on the gateway's control socket (root only, like spaced)."""
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


def stats(d) -> dict:
    return control(d, {"op": "stats"})


def audit_bytes(d) -> int:
    """The gateway's audit files on the host, rotated one included."""
    total = 0
    for name in ("audit.jsonl", "audit.jsonl.1"):
        try:
            total += (d.state / "egress" / "audit" / name).stat().st_size
        except FileNotFoundError:
            pass
    return total


def restart_gateway(d, settings: dict):
    """Adds settings to the gateway's config file and kills the gateway; spaced starts it again from that
    file (and registers its sandboxes again). Returns once the new one answers "stats"."""
    path = d.state / "egress" / "egress.json"
    cfg = json.loads(path.read_text())
    cfg.update(settings)
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    old = d.egress_pid()
    assert old, "no gateway to restart"
    os.kill(old, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pid = d.egress_pid()
        if pid and pid != old:
            try:
                return stats(d)
            except OSError:
                pass
        time.sleep(0.2)
    raise AssertionError("the gateway did not come back with the settings " + json.dumps(settings) + "; its log:\n"
                         + (d.state / "egress" / "egress.log").read_text(errors="replace")[-3000:])


@pytest.fixture(scope="module")
def gateway(egress_daemon):
    s = restart_gateway(egress_daemon, GATEWAY_SETTINGS)
    assert s["limits"]["head_deadline_ms"] == GATEWAY_SETTINGS["head_deadline_ms"], s
    assert s["connections"]["max_connections"] == GATEWAY_SETTINGS["max_connections"], s
    return egress_daemon


def allow_list(d, tpl) -> str:
    return create(d, template=tpl,
                  network={"mode": "allow-list", "rules": [{"action": "allow", "domain": "allowed.test"}]})


def put_script(d, sid, name: str, code: str):
    r = sh(d, sid, f"cat > /tmp/{name} <<'PYEOF'\n{code}\nPYEOF")
    assert r.exit_code == 0, (r.out, r.err)


def start(d, sid, *argv) -> str:
    return d.client.start_process(sid, cmd=["python3", *argv])["id"]


def finish(d, sid, proc, timeout=90) -> dict:
    """Waits for a background script and returns the JSON it printed last."""
    r = d.client.logs(sid, proc, follow=True, timeout=timeout)
    assert r.exit_code == 0, (r.out, r.err)
    return json.loads(r.out.strip().splitlines()[-1])


# The gateway's address, as the sandbox knows it (its resolver and its proxy live there).
GATEWAY_ADDR = '''
def gateway_addr():
    for line in open("/etc/resolv.conf"):
        if line.startswith("nameserver"):
            return line.split()[1]
'''

# DNS queries for ever new names under a denied domain (so that no two are the same decision), from one
# process, and TCP connections to a denied address carrying a request, from another, for argv[1] seconds.
FLOOD = GATEWAY_ADDR + r'''
import json, os, random, socket, struct, sys, time
seconds = float(sys.argv[1])
gw = gateway_addr()

def query(i, name):
    labels = b"".join(bytes([len(l)]) + l.encode() for l in name.split("."))
    return struct.pack("!HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + labels + b"\x00\x00\x01\x00\x01"

r, w = os.pipe()
if os.fork() == 0:
    queries = [query(i, "x%08x.flood.test" % random.getrandbits(32)) for i in range(4096)]
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for q in queries:
            try:
                s.sendto(q, (gw, 53))
                sent += 1
            except BlockingIOError:
                pass
        try:
            while s.recv(512):
                pass
        except BlockingIOError:
            pass
    os.write(w, json.dumps({"dns_sent": sent}).encode())
    os._exit(0)
os.close(w)
connects = 0
end = time.monotonic() + seconds
request = b"GET /flood HTTP/1.1\r\nHost: allowed.test\r\n\r\n"
while time.monotonic() < end:
    c = socket.socket()
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # no TIME_WAIT pile-up
    c.settimeout(2)
    try:
        c.connect(("''' + UPSTREAM + r'''", 80))
        c.sendall(request)
        connects += 1
    except OSError:
        pass
    c.close()
os.wait()
out = json.loads(os.read(r, 4096))
out["connects"] = connects
print(json.dumps(out))
'''

# A well-behaved neighbour: every half second for argv[1] seconds, resolves allowed.test the way a stub
# resolver does (1 s timeout, three tries) and fetches http://allowed.test/ through the proxy (5 s
# timeout), and says how each round went.
ASK = GATEWAY_ADDR + r'''
import json, random, socket, struct, sys, time
seconds = float(sys.argv[1])
gw = gateway_addr()
rounds = []
end = time.monotonic() + seconds
while True:
    tries, answer, t0 = 0, None, time.monotonic()
    while tries < 3 and answer is None:
        tries += 1
        qid = random.getrandbits(16)
        q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\x00\x00\x01\x00\x01"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(1)
        s.sendto(q, (gw, 53))
        try:
            while answer is None:
                data = s.recv(512)
                if struct.unpack("!H", data[:2])[0] == qid:
                    answer = socket.inet_ntoa(data[-4:]) if data[7] else "no data"
        except socket.timeout:
            pass
        s.close()
    status = None
    try:
        c = socket.create_connection((gw, 3128), timeout=5)
        c.sendall(b"GET http://allowed.test/neighbour HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        status = c.recv(64).split(b" ")[1].decode()
        c.close()
    except (OSError, IndexError) as e:
        status = type(e).__name__
    rounds.append({"answer": answer, "tries": tries, "ms": round((time.monotonic() - t0) * 1000), "http": status})
    if time.monotonic() >= end:
        break
    time.sleep(0.5)
print(json.dumps(rounds))
'''

# Opens connections (argv[1]: "proxy" or "HOST:PORT" for the transparent path), argv[2] of them, and
# trickles argv[3] (hex) into each, one byte a second, for argv[4] seconds; reopens what the gateway closes when
# argv[5] is "reopen". Prints, per connection, when it was closed (seconds after its connect) or null.
TRICKLE = GATEWAY_ADDR + r'''
import json, select, socket, sys, time
to, count, data, seconds, reopen = sys.argv[1], int(sys.argv[2]), bytes.fromhex(sys.argv[3]), float(sys.argv[4]), sys.argv[5] == "reopen"
host, port = (gateway_addr(), 3128) if to == "proxy" else (to.rsplit(":", 1)[0], int(to.rsplit(":", 1)[1]))
live, closed = {}, []
opened = 0

def open_one():
    global opened
    s = socket.create_connection((host, port), timeout=5)
    s.setblocking(False)
    live[s] = [time.monotonic(), 0]
    opened += 1

def close(s):
    closed.append(round(time.monotonic() - live.pop(s)[0], 2))
    s.close()

for _ in range(count):
    open_one()
end = time.monotonic() + seconds
while time.monotonic() < end and live:
    for s in list(live):
        i = live[s][1]
        try:
            s.send(data[i % len(data):i % len(data) + 1])
            live[s][1] += 1
        except OSError:
            close(s)
    t = time.monotonic() + 1
    while live and time.monotonic() < t:
        readable, _, _ = select.select(list(live), [], [], max(0, t - time.monotonic()))
        for s in readable:
            try:
                if s.recv(4096):
                    continue
            except OSError:
                pass
            close(s)
    while reopen and len(live) < count and time.monotonic() < end:
        try:
            open_one()
        except OSError:
            break
print(json.dumps({"closed_after_s": closed, "still_open": len(live), "opened": opened}))
'''


# argv[1] queries for the name argv[2], one after the other (each waits for its answer).
SAME_NAME = GATEWAY_ADDR + r'''
import socket, struct, sys
gw, answered = gateway_addr(), 0
q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in sys.argv[2].split(".")) + b"\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
for _ in range(int(sys.argv[1])):
    s.sendto(q, (gw, 53))
    try:
        s.recv(512)
        answered += 1
    except socket.timeout:
        pass
print(answered)
'''


# ------------------------------------------------------------------------------------------------ E19


def test_e19_a_flood_of_dns_and_denied_connections_is_bounded_on_disk_and_a_neighbour_is_answered(
        gateway, upstream, python_tpl):
    d = gateway
    flooder = create(d, template=python_tpl)  # deny-all
    neighbour = allow_list(d, python_tpl)
    try:
        put_script(d, flooder, "flood.py", FLOOD)
        put_script(d, neighbour, "ask.py", ASK)
        first = json.loads(sh(d, neighbour, "python3 /tmp/ask.py 0").out)[0]
        assert first["answer"] == UPSTREAM and first["http"] == "200", first  # the control, before the flood
        before_bytes, before = audit_bytes(d), stats(d)
        flood = start(d, flooder, "/tmp/flood.py", str(FLOOD_SECONDS))
        time.sleep(1)
        during = json.loads(sh(d, neighbour, f"python3 /tmp/ask.py {FLOOD_SECONDS - 3}", timeout_s=60).out)
        sent = finish(d, flooder, flood)
        after_flood = json.loads(sh(d, neighbour, "python3 /tmp/ask.py 0").out)
        time.sleep(2)  # the last interval's summary lines
        grown = audit_bytes(d) - before_bytes
        after = stats(d)
        print(f"\nflood: {sent}; audit grew {grown} bytes; neighbour during: {during}; after: {after_flood}")
        print("gateway audit counters:", json.dumps(after.get("audit")),
              {k: v for k, v in after.get("denials", {}).items() if "rate-limit" in k})

        # The flood was a flood: on the old gateway every one of these was a line on the host's disk.
        assert sent["dns_sent"] > 20 * 1000 and sent["connects"] > 500, sent
        assert grown < AUDIT_GROWTH_LIMIT, f"the audit grew {grown} bytes in {FLOOD_SECONDS} s"
        # What was not written was counted, by the gateway and in the lines spaced serves.
        def counted(s, rule):
            return s["denials"].get(f"deny: {rule}", 0)
        assert counted(after, "dns-rate-limit") - counted(before, "dns-rate-limit") > sent["dns_sent"] // 2, after
        assert counted(after, "connection-rate-limit") - counted(before, "connection-rate-limit") > 0, after
        mine = after["sandboxes"][flooder]
        assert mine["aggregated"] > sent["dns_sent"] // 2 and mine["dropped"] > 0, mine
        lines = audit(d, flooder)
        repeated = {}
        for x in lines:
            if "repeated" in x:
                repeated[x["rule"]] = repeated.get(x["rule"], 0) + x["repeated"]
        assert repeated.get("dns-rate-limit", 0) > sent["dns_sent"] // 2, repeated
        assert repeated.get("audit-rate-limit", 0) > 0, repeated  # the budget's "dropped" lines
        assert all(x["interval_s"] > 0 for x in lines if "repeated" in x)
        # The neighbour kept its answers: every round answered (a stub resolver's three tries) and its request
        # served, right after too.
        assert during and all(r["answer"] == UPSTREAM and r["http"] == "200" for r in during), during
        assert after_flood[0]["answer"] == UPSTREAM and after_flood[0]["tries"] == 1, after_flood
        assert after_flood[0]["http"] == "200", after_flood
        assert neighbour not in after["sandboxes"] or after["sandboxes"][neighbour]["dropped"] == 0
    finally:
        d.client.delete(flooder)
        d.client.delete(neighbour)


def test_e19_space_net_log_reads_the_audit_after_a_flood(gateway, python_tpl):
    """`space net log` (spaced reading audit.jsonl) still serves a sandbox's lines, the aggregated ones
    included."""
    d = gateway
    sid = create(d, template=python_tpl)
    try:
        put_script(d, sid, "same.py", SAME_NAME)
        r = sh(d, sid, "python3 /tmp/same.py 50 same.flood.test")
        assert r.exit_code == 0 and r.out.strip() == "50", (r.out, r.err)
        time.sleep(2)
        lines = [x for x in audit(d, sid) if x.get("name") == "same.flood.test"]
        full = [x for x in lines if "repeated" not in x]
        assert full, audit(d, sid)
        assert len(full) < 10, full  # one per interval, not one per query
        assert sum(x.get("repeated", 0) for x in lines) + len(full) >= 50, lines
    finally:
        d.client.delete(sid)


# ------------------------------------------------------------------------------------------------ E20


def test_e20_request_heads_trickled_a_byte_a_second_are_cut_at_the_absolute_deadline(gateway, upstream, python_tpl):
    d = gateway
    sid = allow_list(d, python_tpl)
    try:
        put_script(d, sid, "trickle.py", TRICKLE)
        head = b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\nUser-Agent: slow\r\n\r\n".hex()
        hello = (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"r" * 40).hex()  # a ClientHello's start
        proxy = start(d, sid, "/tmp/trickle.py", "proxy", "4", head, "20", "once")
        transparent = start(d, sid, "/tmp/trickle.py", f"{UPSTREAM}:443", "2", hello, "20", "once")
        got = finish(d, sid, proxy), finish(d, sid, transparent)
        print("\ntrickled:", got)
        deadline_s = GATEWAY_SETTINGS["head_deadline_ms"] / 1000
        for r in got:
            assert r["still_open"] == 0, r
            # Each byte a second renewed the old 10 s handshake timeout: the heads lived as long as they were
            # sent. Now the deadline from accept holds, whatever arrives.
            assert all(deadline_s - 0.5 <= t < deadline_s + 4 for t in r["closed_after_s"]), r
        time.sleep(1.5)
        # One line per interval for the identical refusals, the rest in its "repeated" count.
        cut = [x for x in audit(d, sid) if x.get("rule") == "head-deadline"]
        assert sum(x.get("repeated", 1) for x in cut) == 6, cut
        assert not stats(d)["connections"]["by_sandbox"].get(sid), stats(d)["connections"]
    finally:
        d.client.delete(sid)


def test_e20_sandboxes_at_their_cap_leave_connections_for_a_neighbour(gateway, upstream, python_tpl):
    """Two sandboxes keep 300 slow connections each open (reopening what is cut), against a node cap of 512
    and a sandbox cap of 256: together they would take every connection. The reserve keeps the node's last
    connections for sandboxes holding few, so a neighbour's requests go through all along."""
    d = gateway
    attackers = [create(d, template=python_tpl) for _ in range(2)]
    neighbour = allow_list(d, python_tpl)
    procs = []
    try:
        head = b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\nUser-Agent: slow\r\n\r\n".hex()
        for a in attackers:
            put_script(d, a, "trickle.py", TRICKLE)
        for a in attackers:
            procs.append(start(d, a, "/tmp/trickle.py", "proxy", "300", head, "25", "reopen"))
        # Wait until the two hold what they can: each at most its 256, both together the shared 448.
        deadline = time.monotonic() + 20
        held = {}
        while time.monotonic() < deadline:
            held = stats(d)["connections"]["by_sandbox"]
            if sum(held.get(a, 0) for a in attackers) >= 400:
                break
            time.sleep(0.3)
        assert sum(held.get(a, 0) for a in attackers) >= 400, held
        results, peak = [], {}
        for i in range(6):
            r = sh(d, neighbour, f"curl -sS -f --max-time 8 -o /dev/null -w '%{{http_code}}' "
                                 f"http://allowed.test/neighbour-{i}; echo ' rc='$?")
            results.append(r.out.strip())
            now = stats(d)["connections"]
            peak = max(peak, now, key=lambda c: c["active"]) if peak else now
            time.sleep(1)
        print("\nneighbour:", results, "peak:", {k: peak[k] for k in ("active", "by_sandbox")})
        assert all(r == "200 rc=0" for r in results), results
        assert all(peak["by_sandbox"].get(a, 0) <= 256 for a in attackers), peak
        assert peak["active"] <= 512, peak
        denials = stats(d)["sandboxes"]
        refused = {a: {k: v for k, v in denials.get(a, {}).get("denials", {}).items()
                       if k in ("deny: connection-limit", "deny: node-connection-limit")} for a in attackers}
        # Both wanted more than they got: each its own cap or the node's shared part stopped them.
        assert all(refused[a] for a in attackers), refused
        assert any("deny: node-connection-limit" in refused[a] for a in attackers), refused
    finally:
        for a, p in zip(attackers, procs):
            try:
                finish(d, a, p)
            except Exception:  # noqa: BLE001 — the deletes below end them anyway
                pass
        for s in attackers + [neighbour]:
            d.client.delete(s)


# ------------------------------------------------------------------------------------------------ E19, last


def test_e19_the_audit_is_capped_and_rotated_and_net_log_serves_the_current_file(gateway, python_tpl):
    """Runs last: it restarts the gateway with a small cap (and budgets large enough to reach it quickly)."""
    d = gateway
    cap = 256 << 10
    restart_gateway(d, {"audit_log_max_bytes": cap, "audit_line_burst": 20000, "dns_query_burst": 20000})
    sid = create(d, template=python_tpl)
    try:
        put_script(d, sid, "names.py", GATEWAY_ADDR + r'''
import socket, struct, sys
gw = gateway_addr()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
answered = 0
for i in range(int(sys.argv[1])):
    name = b"\x05n%04d\x06rotate\x04test\x00" % i
    s.sendto(struct.pack("!HHHHHH", i, 0x0100, 1, 0, 0, 0) + name + b"\x00\x01\x00\x01", (gw, 53))
    try:
        s.recv(512)
        answered += 1
    except socket.timeout:
        pass
print(answered)
''')
        r = sh(d, sid, "python3 /tmp/names.py 4000", timeout_s=120)
        assert r.exit_code == 0 and int(r.out.strip()) >= 3900, (r.out, r.err)
        time.sleep(1.5)
        files = {n: (d.state / "egress" / "audit" / n) for n in ("audit.jsonl", "audit.jsonl.1", "audit.jsonl.2")}
        sizes = {n: p.stat().st_size for n, p in files.items() if p.exists()}
        s = stats(d)["audit"]
        print("\naudit files:", sizes, "counters:", s)
        assert "audit.jsonl.2" not in sizes and "audit.jsonl.1" in sizes, sizes
        assert all(size <= cap // 2 for size in sizes.values()), sizes
        assert s["rotations"] >= 2 and s["write_failures"] == 0, s
        # spaced's `space net log` reads the current file: whole lines, the newest there, the oldest rotated away.
        names = [x.get("name") for x in audit(d, sid)]
        assert "n3999.rotate.test" in names, names[-5:]
        assert "n0000.rotate.test" not in names
        for line in files["audit.jsonl"].read_text().splitlines():
            json.loads(line)
    finally:
        d.client.delete(sid)
