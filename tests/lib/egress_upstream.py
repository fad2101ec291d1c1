"""Upstream servers for the egress tests, run inside the test's own network namespace:
HTTP on :80 and HTTPS on :443 that echo the request head (and body) back as JSON, answer
`/redirect?to=URL` with a 302, or, under `/echo-encoded` (`?chunked=1`: in 7-byte chunks), echo every
request header transformed the ways reflecting services do (base64 and base64url of the header line and of
the whole head at three alignments, hex in both cases, percent-encoded), in the body and as response
headers (SECURITY.md E17); a DNS server on :53; and a UDP sink on :5353. Every accepted TCP connection,
request, query and datagram is appended to a JSON-lines log, so the test sees from outside what reached the
upstream side (an `accept` record means the gateway opened a connection, whatever came through it).

DNS answers, by name (SECURITY.md E4, E5, E6 need answers a real resolver would give an attacker):
  private.test, *.private.test    A 10.0.0.1, AAAA ::ffff:127.0.0.1
  *.mapped.test                   AAAA ::ffff:169.254.169.254 only
  *.mixed.test                    A 10.0.0.1, 169.254.169.254, the upstream, 127.0.0.1; AAAA ::1
  *.rebind.test                   TTL 0: the first A query gets the upstream, every later one 10.0.0.1
  any other name ending in .test  A the upstream (TTL 60)
  anything else                   NXDOMAIN"""

import base64
import json
import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

ADDR, LOG, CERT, KEY = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
_lock = threading.Lock()
_rebind_seen: set[str] = set()


def log(**rec):
    with _lock, open(LOG, "a") as f:
        f.write(json.dumps(rec) + "\n")


def encoded_echo(headers: dict) -> tuple[dict, list[tuple[str, str]]]:
    """Every header line and the whole head, transformed: the body (JSON) and response headers."""
    whole = json.dumps(headers)
    body = {"whole_b64": [base64.b64encode(("#" * i + whole).encode()).decode() for i in range(3)],
            "whole_b64url": [base64.urlsafe_b64encode(("#" * i + whole).encode()).decode().rstrip("=")
                             for i in range(3)]}
    out_headers = []
    for k, v in headers.items():
        line = f"{k}: {v}".encode()
        body[k] = {"b64": base64.b64encode(line).decode(), "b64url": base64.urlsafe_b64encode(line).decode(),
                   "hex": v.encode().hex(), "HEX": v.encode().hex().upper(), "quote": quote(v, safe=""),
                   "quote_plus": quote_plus(v), "quote_all": "".join("%%%02X" % b for b in v.encode())}
        out_headers += [(f"X-Echo-B64-{k}", base64.b64encode(line).decode()), (f"X-Echo-Hex-{k}", v.encode().hex()),
                        (f"X-Echo-Quote-{k}", quote(v, safe=""))]
    return body, out_headers


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _body(self) -> tuple[bytes, bool]:
        """The request body, and whether it arrived whole (a gateway that cuts a request off mid-body
        leaves an incomplete one, which no server would act on)."""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                line = self.rfile.readline()
                if not line.endswith(b"\n"):
                    return out, False
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while (line := self.rfile.readline()) not in (b"\r\n", b"\n"):
                        if not line:
                            return out, False
                    return out, True
                data = self.rfile.read(size)
                out += data
                if len(data) < size or not self.rfile.readline():
                    return out, False
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        return body, len(body) == n

    def _answer(self):
        headers = {k: v for k, v in self.headers.items()}
        body, complete = self._body()
        log(kind="http", tls=isinstance(self.connection, ssl.SSLSocket), method=self.command, path=self.path,
            headers=headers, body=body.decode("latin-1")[:4096], complete=complete)
        if not complete:
            self.close_connection = True
            return
        target = parse_qs(urlsplit(self.path).query).get("to")
        if urlsplit(self.path).path == "/redirect" and target:
            self.send_response(302)
            self.send_header("Location", target[0])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if urlsplit(self.path).path == "/echo-encoded":
            body, extra = encoded_echo(headers)
            out = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            for k, v in extra:
                self.send_header(k, v)
            if "chunked=1" in self.path:
                # Small chunks, so that every encoded form straddles the gateway's reads.
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(0, len(out), 7):
                    piece = out[i:i + 7]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                return
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        out = json.dumps({"path": self.path, "headers": headers}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *a):
        pass


class Server(ThreadingHTTPServer):
    """Logs every accepted connection before anything is read from it; TLS (when tls is set) is
    negotiated in the connection's thread, so a refused or garbage handshake is logged too."""
    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def get_request(self):
        sock, addr = self.socket.accept()
        log(kind="accept", port=self.server_address[1], source=addr[0])
        return sock, addr

    def finish_request(self, request, client_address):
        if self.tls:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as e:
                log(kind="tls-failed", port=self.server_address[1], error=str(e))
                return
        super().finish_request(request, client_address)


def serve(port, tls):
    srv = Server((ADDR, port), Echo)
    if tls:
        srv.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.tls.load_cert_chain(CERT, KEY)
    srv.serve_forever()


def qname(data, off=12):
    labels = []
    while data[off]:
        n = data[off]
        labels.append(data[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += n + 1
    return ".".join(labels).lower(), off + 1


def under(name, zone):
    return name == zone or name.endswith("." + zone)


def records(name, qtype):
    """(address, ttl) answers for name and qtype (1 = A, 28 = AAAA), or None for NXDOMAIN."""
    if not name.endswith(".test"):
        return None
    if under(name, "private.test"):
        return [("10.0.0.1", 60)] if qtype == 1 else [("::ffff:127.0.0.1", 60)] if qtype == 28 else []
    if under(name, "mapped.test"):
        return [("::ffff:169.254.169.254", 60)] if qtype == 28 else []
    if under(name, "mixed.test"):
        if qtype == 1:
            return [(a, 60) for a in ("10.0.0.1", "169.254.169.254", ADDR, "127.0.0.1")]
        return [("::1", 60)] if qtype == 28 else []
    if under(name, "rebind.test"):
        if qtype != 1:
            return []
        with _lock:
            first = name not in _rebind_seen
            _rebind_seen.add(name)
        return [(ADDR if first else "10.0.0.1", 0)]
    return [(ADDR, 60)] if qtype == 1 else []


class Dns(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        try:
            name, end = qname(data)
            qtype = struct.unpack("!H", data[end:end + 2])[0]
        except (IndexError, struct.error):
            return
        answers = records(name, qtype)
        log(kind="dns", name=name, qtype=qtype, answers=[a for a, _ in answers or []])
        question = data[12:end + 4]
        rcode = 0x8183 if answers is None else 0x8180  # NXDOMAIN, or NOERROR (maybe without data)
        body = b""
        for addr, ttl in answers or []:
            v6 = ":" in addr
            rdata = socket.inet_pton(socket.AF_INET6 if v6 else socket.AF_INET, addr)
            body += b"\xc0\x0c" + struct.pack("!HHIH", 28 if v6 else 1, 1, ttl, len(rdata)) + rdata
        head = data[:2] + struct.pack("!HHHHH", rcode, 1, len(answers or []), 0, 0)
        sock.sendto(head + question + body, self.client_address)


class Sink(socketserver.BaseRequestHandler):
    def handle(self):
        log(kind="udp", port=5353, source=self.client_address[0], size=len(self.request[0]))


for target in (lambda: serve(80, False), lambda: serve(443, True),
               lambda: socketserver.ThreadingUDPServer((ADDR, 53), Dns).serve_forever(),
               lambda: socketserver.ThreadingUDPServer((ADDR, 5353), Sink).serve_forever()):
    threading.Thread(target=target, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
