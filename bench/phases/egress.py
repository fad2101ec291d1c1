"""Egress: the gateway's DNS and connect cost against a direct path (tinyproxy on a side link), and the
intercepted TLS path with secret injection, against upstream servers in a network namespace of the bench's."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from lib.client import ApiError

from phases.common import ROOT, TEMPLATE, log, percentile, summarize, summarize_over_median, summarize_paired


EGRESS_TAG = os.getpid() % 200 + 20
UPSTREAM_NS = f"space-bench-up-{os.getpid()}"
UPSTREAM_HOST_IF = f"sbu{EGRESS_TAG}"     # not "spc*": SPACE's table and reconciliation own those links
SIDE_HOST_IF = f"sbs{EGRESS_TAG}"         # the side link into the sandbox (tinyproxy, direct)
UP_NET = f"10.253.{EGRESS_TAG}."          # host .1; upstream .2 (reached through the gateway), .3 (direct)
SIDE_NET = f"10.252.{EGRESS_TAG}."        # host .1 (tinyproxy listens here), sandbox .2
SECRET_DOMAIN = "secret.bench"
PYTHON_ROOTFS = "/var/cache/space/rootfs-python"

# HTTPS (any name under SECRET_DOMAIN, one certificate for *.SECRET_DOMAIN) and DNS (every name under
# SECRET_DOMAIN -> ADDR) for the upstream namespace; the plain-HTTP upstream is httpload (bench/httpload.c).
UPSTREAM_TLS_DNS = r'''
import socket, socketserver, ssl, struct, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
ADDR, CERT, KEY, DOMAIN = sys.argv[1:5]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def setup(self):  # one write per answer and no Nagle: the server must not add delayed-ACK stalls
        super().setup(); self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def do_GET(self):
        self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    def log_message(self, *a): pass
srv = ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(CERT, KEY)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
class D(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        off, labels = 12, []
        try:
            while data[off]:
                labels.append(data[off + 1:off + 1 + data[off]].decode("ascii", "replace")); off += data[off] + 1
            qtype = struct.unpack("!H", data[off + 1:off + 3])[0]
        except (IndexError, struct.error):
            return
        name, q = ".".join(labels).lower(), data[12:off + 5]
        if name.endswith("." + DOMAIN) and qtype == 1:
            ans = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ADDR)
            sock.sendto(data[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0) + q + ans, self.client_address)
        else:
            rc = 0x8180 if name.endswith("." + DOMAIN) else 0x8183
            sock.sendto(data[:2] + struct.pack("!HHHHH", rc, 1, 0, 0, 0) + q, self.client_address)
threading.Thread(target=srv.serve_forever, daemon=True).start()
threading.Thread(target=socketserver.ThreadingUDPServer((ADDR, 53), D).serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
'''


def run_cmd(*argv, check=True):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: rc={r.returncode} {r.stderr.strip()[:500]}")
    return r


def wait_ready(p, what):
    line = p.stdout.readline().strip()
    if line != "ready":
        p.kill()
        raise RuntimeError(f"{what} did not start: {line!r} {p.stderr.read()[-500:]}")


class EgressUpstream:
    """The egress phase's world outside SPACE: a network namespace with a fast plain-HTTP server
    (httpload), an HTTPS server with a certificate from a bench CA and a DNS server; tinyproxy on the host.
    Made before spaced starts (the daemon's config names the CA and the resolver), removed by close()."""

    def __init__(self, workdir):
        self.work = os.path.join(workdir, "egress")
        os.makedirs(self.work, exist_ok=True)
        os.chmod(self.work, 0o755)
        self.procs = []
        self.httpload = os.path.join(self.work, "httpload")
        self.ca = os.path.join(self.work, "ca.crt")
        self.made_ns = False

    def daemon_config(self):
        return {"egress": True, "egress_test_external_subnets": [UP_NET + "0/24"],
                "egress_upstream_resolvers": UP_NET + "2:53", "egress_upstream_ca_file": self.ca}

    def start(self):
        for tool in ("ip", "nft", "openssl", "cc", "tinyproxy"):
            if not shutil.which(tool):
                raise RuntimeError(f"{tool} not installed (scripts/setup installs it)")
        run_cmd("cc", "-O2", "-static", "-o", self.httpload, os.path.join(ROOT, "bench", "httpload.c"))
        w = self.work
        ca_key, key, csr, crt = (os.path.join(w, n) for n in ("ca.key", "leaf.key", "leaf.csr", "leaf.crt"))
        with open(os.path.join(w, "ext.cnf"), "w") as f:
            f.write(f"subjectAltName=DNS:*.{SECRET_DOMAIN}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        run_cmd("openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", self.ca, "-days", "2",
                "-subj", "/CN=space bench upstream CA")
        run_cmd("openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", f"/CN=*.{SECRET_DOMAIN}")
        run_cmd("openssl", "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", ca_key, "-CAcreateserial",
                "-out", crt, "-days", "2", "-extfile", os.path.join(w, "ext.cnf"))
        run_cmd("ip", "netns", "add", UPSTREAM_NS)
        self.made_ns = True
        run_cmd("ip", "link", "add", UPSTREAM_HOST_IF, "type", "veth", "peer", "name", "up0", "netns", UPSTREAM_NS)
        run_cmd("ip", "addr", "add", UP_NET + "1/24", "dev", UPSTREAM_HOST_IF)
        run_cmd("ip", "link", "set", UPSTREAM_HOST_IF, "up")
        for a in ("2", "3"):
            run_cmd("ip", "-n", UPSTREAM_NS, "addr", "add", UP_NET + a + "/24", "dev", "up0")
        run_cmd("ip", "-n", UPSTREAM_NS, "link", "set", "up0", "up")
        run_cmd("ip", "-n", UPSTREAM_NS, "link", "set", "lo", "up")
        run_cmd("ip", "-n", UPSTREAM_NS, "route", "add", "default", "via", UP_NET + "1")
        http = subprocess.Popen(["ip", "netns", "exec", UPSTREAM_NS, self.httpload, "serve", "0.0.0.0", "80"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(http)
        wait_ready(http, "upstream httpload")
        tls = subprocess.Popen(["ip", "netns", "exec", UPSTREAM_NS, sys.executable, "-c", UPSTREAM_TLS_DNS,
                                UP_NET + "2", crt, key, SECRET_DOMAIN],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(tls)
        wait_ready(tls, "upstream https/dns")

    def attach_side_link(self, netns_path):
        """A second veth into the sandbox's network namespace whose host end is not a SPACE link: the
        sandbox reaches tinyproxy (on the host end) and, through the host (forwarding enabled on these two
        bench links only), the upstream's second address directly, past the gateway. Same hops as the
        gateway's path: sandbox -> veth -> host -> veth -> upstream."""
        run_cmd("ip", "link", "add", SIDE_HOST_IF, "type", "veth", "peer", "name", "side0", "netns", netns_path)
        run_cmd("ip", "addr", "add", SIDE_NET + "1/30", "dev", SIDE_HOST_IF)
        run_cmd("ip", "link", "set", SIDE_HOST_IF, "up")
        ns = ["nsenter", f"--net={netns_path}"]
        run_cmd(*ns, "ip", "addr", "add", SIDE_NET + "2/30", "dev", "side0")
        run_cmd(*ns, "ip", "link", "set", "side0", "up")
        run_cmd(*ns, "ip", "route", "add", UP_NET + "3/32", "via", SIDE_NET + "1", "dev", "side0")
        for ifname in (SIDE_HOST_IF, UPSTREAM_HOST_IF):
            with open(f"/proc/sys/net/ipv4/conf/{ifname}/forwarding", "w") as f:
                f.write("1")

    def start_tinyproxy(self):
        conf = os.path.join(self.work, "tinyproxy.conf")
        with open(conf, "w") as f:
            f.write(f"Port 8888\nListen {SIDE_NET}1\nTimeout 60\nMaxClients 256\nAllow {SIDE_NET}0/30\n"
                    f"LogLevel Critical\nLogFile \"{self.work}/tinyproxy.log\"\nDisableViaHeader Yes\n")
        p = subprocess.Popen(["tinyproxy", "-d", "-c", conf], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True)
        self.procs.append(p)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection((SIDE_NET + "1", 8888), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("tinyproxy did not listen")

    def detach_side_link(self):
        run_cmd("ip", "link", "del", SIDE_HOST_IF, check=False)

    def close(self):
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGKILL) if p.args[0] == "tinyproxy" else p.kill()
                p.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        run_cmd("ip", "link", "del", SIDE_HOST_IF, check=False)
        run_cmd("ip", "link", "del", UPSTREAM_HOST_IF, check=False)
        if self.made_ns:
            run_cmd("ip", "netns", "del", UPSTREAM_NS, check=False)


def sandbox_netns(d, sid):
    """/proc/PID/ns/net of a process started in the sandbox (found by its unique argument)."""
    marker = str(86000 + EGRESS_TAG)
    d.client.json("POST", f"/v1/sandboxes/{sid}/processes", {"cmd": ["/bin/sleep", marker]}, expect=(200, 201))
    deadline = time.time() + 10
    while time.time() < deadline:
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if f.read().split(b"\0")[:2] in ([b"/bin/sleep", marker.encode()], [b"sleep", marker.encode()]):
                        return f"/proc/{p}/ns/net"
            except OSError:
                pass
        time.sleep(0.05)
    raise RuntimeError("cannot find the sandbox's process on the host")


def phase_egress(d, up, quick, res, notes):
    """egress.passthrough_rps and peer.tinyproxy.rps (interleaved), egress.added_latency and
    egress.intercepted_first_request, all driven from inside one jail sandbox (bench/httpload, curl)."""
    if up is None:
        raise RuntimeError("the egress upstream could not be set up (see notes.egress)")
    if "egress: on" not in open(d.log_path, errors="replace").read():
        raise RuntimeError("spaced runs without its egress gateway: " + d.log_tail(5))
    c = d.client
    note = notes.setdefault("egress", {})
    upstream = UP_NET + "2"
    # Plain passthrough: a pooled sandbox without secrets (a sandbox with bound secrets has every answer
    # re-framed and scanned for their values; that is the interception part below).
    policy = {"mode": "allow-list", "rules": [{"action": "allow", "cidr": upstream + "/32", "ports": [80]}]}
    sb = d.create({"template": TEMPLATE, "network": policy})
    sid = sb["id"]
    try:
        _, net = c.json("GET", f"/v1/sandboxes/{sid}/network")
        gw = net["gateway"]
        up.attach_side_link(sandbox_netns(d, sid))
        up.start_tinyproxy()
        with open(up.httpload, "rb") as f:
            status, _, data = c.raw("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/httpload", f.read(),
                                    {"Content-Type": "application/octet-stream"})
        if status not in (200, 201, 204):
            raise RuntimeError(f"upload httpload: {status} {data[:200]!r}")
        _, _, code, out = c.exec(sid, ["/bin/sh", "-c", "chmod 755 /tmp/httpload"])
        if code != 0:
            raise RuntimeError(f"chmod httpload: {out!r}")

        def load(addr, port, target, conns, howlong):
            _, _, code, out = c.exec(sid, ["/tmp/httpload", "load", addr, str(port), target, upstream,
                                           str(conns), str(howlong)])
            try:
                r = json.loads(out)
            except ValueError:
                raise RuntimeError(f"httpload {addr}:{port}: exit {code}, output {out[:300]!r}")
            # A peer that drops a connection now and then (tinyproxy under load) still has a throughput;
            # more than 1% failed requests does not.
            if r["requests"] == 0 or (code != 0 and r.get("errors", 0) * 100 > r["requests"]):
                raise RuntimeError(f"httpload {addr}:{port}: exit {code}, {out[:300]!r}")
            return r

        paths = {"egress": (gw, 3128, f"http://{upstream}/"),           # the explicit proxy (HTTP_PROXY)
                 "transparent": (upstream, 80, "/"),                     # nftables -> transparent port
                 "tinyproxy": (SIDE_NET + "1", 8888, f"http://{upstream}/"),
                 "direct": (UP_NET + "3", 80, "/")}                      # side link, past the gateway
        for name, (a, p, t) in paths.items():  # warm-up; also proves each path works before measuring
            log(f"egress: warm-up {name}")
            load(a, p, t, 1, "-20")

        conns, secs, rounds = 8, (2 if quick else 3), (3 if quick else 5)
        rps = {"egress": [], "transparent": [], "tinyproxy": []}
        reconnects = {k: 0 for k in rps}
        for _ in range(rounds):
            for name in rps:
                a, p, t = paths[name]
                r = load(a, p, t, conns, secs)
                rps[name].append(r["rps"])
                reconnects[name] += r["reconnects"]
        res["egress.passthrough_rps"] = summarize(rps["egress"], "req/s")
        res["egress.transparent_rps"] = summarize(rps["transparent"], "req/s")
        res["peer.tinyproxy.rps"] = summarize(rps["tinyproxy"], "req/s")
        note["rps"] = {
            "how": f"bench/httpload inside a jail sandbox, {conns} HTTP/1.1 keep-alive connections, GET of a "
                   f"2-byte answer from a static C server in a namespace of the bench, {secs} s per round, "
                   f"{rounds} rounds interleaved egress / transparent / tinyproxy; n = rounds",
            "egress.passthrough_rps": "explicit proxy: sandbox -> http://<gateway>:3128 (HTTP_PROXY), "
                                      "absolute-form GET http://<upstream>/",
            "egress.transparent_rps": "the same GET in origin form to the upstream's address: nftables "
                                      "redirects it to the gateway's transparent port",
            "peer.tinyproxy.rps": "tinyproxy (Debian) as explicit proxy on the host end of a second veth "
                                  "into the same sandbox, same upstream, same client",
            "reconnects": reconnects}
        if reconnects["tinyproxy"]:
            note["rps"]["tinyproxy_keepalive"] = "tinyproxy closes the client connection after each answer"

        n_lat = 200 if quick else 500
        direct, via = [], []
        for _ in range(4 if quick else 6):
            direct += load(*paths["direct"], 1, f"-{n_lat}")["lat_ms"]
            via += load(*paths["egress"], 1, f"-{n_lat}")["lat_ms"]
        # The two sets come from different blocks, so no gateway request has a direct twin: each request
        # through the gateway minus the direct requests' median, one sample set.
        res["egress.added_latency"] = summarize_over_median(via, direct)
        res["egress.direct_latency"] = summarize(direct)
        res["egress.via_gateway_latency"] = summarize(via)
        note["added_latency"] = {
            "how": "one keep-alive connection from inside the sandbox, one GET at a time; each request through "
                   "the gateway's explicit proxy minus the median of the direct requests (one sample set: the "
                   "gateway's requests, shifted); the direct path's own jitter is not subtracted, so the "
                   "host's noise in the gateway's tail counts as added",
            "direct_median_ms": round(percentile(sorted(direct), 50), 3),
            "direct": "the same client in the same sandbox to the upstream's second address over the bench's "
                      "side link: sandbox -> veth -> host (forwarding) -> veth -> upstream, the hops the "
                      "gateway's path has, without the gateway",
            "blocks": f"{n_lat} requests per block, direct and gateway blocks alternate"}

    finally:
        d.delete(sid)
        up.detach_side_link()
    phase_egress_intercept(d, up, quick, res, note)


def phase_egress_intercept(d, up, quick, res, note):
    """egress.intercepted_first_request: curl in a python sandbox with a secret bound to the HTTPS names."""
    c = d.client
    if not os.path.isfile(os.path.join(PYTHON_ROOTFS, "usr", "bin", "curl")):
        note["intercepted_first_request"] = {"error": f"no curl in {PYTHON_ROOTFS}: not measured"}
        return
    t0 = time.perf_counter()
    status, _, data = c.raw("POST", "/v1/templates", json.dumps(
        {"name": "python", "kind": "dir", "path": PYTHON_ROOTFS}).encode(), {"Content-Type": "application/json"})
    if status not in (200, 201, 202, 409) or b'"type":"error"' in data.replace(b" ", b""):
        raise RuntimeError(f"python template: {status} {data[-300:]!r}")
    note["python_template_build_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    samples = 15 if quick else 30
    names = [f"s{i}.{SECRET_DOMAIN}" for i in range(samples + 2)]
    token = "sk-bench-" + os.urandom(8).hex()
    c.json("POST", "/v1/secrets", {"name": "BENCH_TOKEN", "value": token, "hosts": names,
                                   "header": "Authorization", "format": "Bearer {}"})
    policy = {"mode": "allow-list", "rules": [{"action": "allow", "domain": "*." + SECRET_DOMAIN, "ports": [443]}]}
    sid = None
    try:
        sid = d.create({"template": "python", "network": policy, "secrets": ["BENCH_TOKEN"]})["id"]
        up.attach_side_link(sandbox_netns(d, sid))
        with open(up.ca, "rb") as f:
            c.raw("PUT", f"/v1/sandboxes/{sid}/files?path=/tmp/upstream-ca.crt", f.read(),
                  {"Content-Type": "application/octet-stream"})
        fmt_w = "%{time_total} %{time_appconnect} %{http_code}"

        def curl(args):
            _, _, code, out = c.exec(sid, ["/bin/sh", "-c", "curl -sS -o /dev/null --max-time 10 "
                                           f"-H \"Authorization: Bearer $BENCH_TOKEN\" -w '{fmt_w}' " + args])
            parts = out.decode(errors="replace").split()
            if code != 0 or len(parts) != 3 or parts[2] != "200":
                raise RuntimeError(f"curl {args}: exit {code} {out[:300]!r}")
            return float(parts[0]) * 1000, float(parts[1]) * 1000

        # Both sides trust one small file (the sandbox's CA, the bench's CA): curl's loading of a full
        # bundle would otherwise weigh on one side only.
        sandbox_ca = "/usr/local/share/ca-certificates/space.crt"
        first, again, direct_tls, tls_parts = [], [], [], {"first": [], "direct": []}
        for i in range(samples + 2):
            name = names[i]
            t, a = curl(f"--noproxy '*' --cacert /tmp/upstream-ca.crt --resolve {name}:443:{UP_NET}3 "
                        f"https://{name}/")
            direct_tls.append(t)
            tls_parts["direct"].append(a)
            t, a = curl(f"--cacert {sandbox_ca} https://{name}/")   # HTTPS_PROXY: CONNECT, then interception
            first.append(t)
            tls_parts["first"].append(a)
            again.append(curl(f"--cacert {sandbox_ca} https://{name}/")[0])  # leaf cached, name pinned
        first, again, direct_tls = first[2:], again[2:], direct_tls[2:]  # the first two warm the paths up
        # Each name's three requests run back to back: sample i of each list is one pair.
        res["egress.intercepted_first_request"] = summarize_paired(first, direct_tls)
        res["egress.intercepted_repeat_request"] = summarize_paired(again, direct_tls)
        note["intercepted_first_request"] = {
            "how": "curl time_total inside the sandbox: first HTTPS request to a new name with a bound secret "
                   "(CONNECT through HTTPS_PROXY, the gateway resolves the name, verifies the upstream, mints "
                   "a leaf from the sandbox's CA) minus the direct HTTPS request to the same name made just "
                   "before it over the side link (--resolve, the bench CA); pairwise, per name",
            "first_ms": summarize(first), "direct_ms": summarize(direct_tls), "repeat_ms": summarize(again),
            "tls_done_ms": {k: summarize(v[2:]) for k, v in tls_parts.items()},  # curl time_appconnect
            "repeat": "egress.intercepted_repeat_request: a second request to the same name, new connection "
                      "(leaf cached, name pinned), minus direct, pairwise"}
    finally:
        if sid:
            d.delete(sid)
        up.detach_side_link()
        try:
            c.json("DELETE", "/v1/secrets/BENCH_TOKEN", expect=(200, 204, 404))
        except ApiError as e:
            log(f"egress: delete secret: {e}")
