"""Upstream servers for test_egress.py, run inside the test's own network namespace:
HTTP on :80 and HTTPS on :443 that echo the request head back as JSON, a DNS server on :53 that answers
A records for the test names, and a UDP sink on :5353. Every request, query and datagram is appended
to a JSON-lines log, so the test sees from outside what reached the upstream side."""

import json
import socket
import socketserver
import ssl
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ADDR, LOG, CERT, KEY = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
NAMES = {"allowed.test", "other.test", "secret.test"}
_lock = threading.Lock()


def log(**rec):
    with _lock, open(LOG, "a") as f:
        f.write(json.dumps(rec) + "\n")


class Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        headers = {k: v for k, v in self.headers.items()}
        log(kind="http", tls=isinstance(self.connection, ssl.SSLSocket), path=self.path, headers=headers)
        body = json.dumps({"path": self.path, "headers": headers}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def serve_http():
    ThreadingHTTPServer((ADDR, 80), Echo).serve_forever()


def serve_https():
    srv = ThreadingHTTPServer((ADDR, 443), Echo)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(CERT, KEY)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()


def qname(data, off=12):
    labels = []
    while data[off]:
        n = data[off]
        labels.append(data[off + 1:off + 1 + n].decode("ascii", "replace"))
        off += n + 1
    return ".".join(labels).lower(), off + 1


class Dns(socketserver.BaseRequestHandler):
    def handle(self):
        data, sock = self.request
        try:
            name, end = qname(data)
            qtype = struct.unpack("!H", data[end:end + 2])[0]
        except (IndexError, struct.error):
            return
        log(kind="dns", name=name, qtype=qtype)
        question = data[12:end + 4]
        if name in NAMES and qtype == 1:
            answer = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 60, 4) + socket.inet_aton(ADDR)
            head = data[:2] + struct.pack("!HHHHH", 0x8180, 1, 1, 0, 0)
            sock.sendto(head + question + answer, self.client_address)
        else:
            rcode = 0x8180 if name in NAMES else 0x8183  # NOERROR/no data, or NXDOMAIN
            sock.sendto(data[:2] + struct.pack("!HHHHH", rcode, 1, 0, 0, 0) + question, self.client_address)


class Sink(socketserver.BaseRequestHandler):
    def handle(self):
        log(kind="udp", port=5353, source=self.client_address[0], size=len(self.request[0]))


for target in (serve_http, serve_https,
               lambda: socketserver.ThreadingUDPServer((ADDR, 53), Dns).serve_forever(),
               lambda: socketserver.ThreadingUDPServer((ADDR, 5353), Sink).serve_forever()):
    threading.Thread(target=target, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
