"""E21 (SECURITY.md): a flood of API connections from one source, unauthenticated TCP connections or
unix connections that never finish a body, leaves the unix socket and other sources answered within 1 s.
Checked from outside against a real spaced with its default limits (docs/api.md, "Connection limits")."""

from __future__ import annotations

import resource
import selectors
import socket
import time

import pytest

from lib import spacelib

ANSWER_WITHIN_S = 1.0  # the acceptance criterion of E21
# The server's defaults (src/http/server.h, src/http/connection_limits.h); spaced has no setting for them.
HEAD_TIMEOUT_S = 10
BODY_TIMEOUT_S = 20
PER_SOURCE = 64
MARGIN_S = 5  # a loaded 2-core machine; the watchdog itself is late by at most 0.1 s

TCP_FLOOD = 600
UNIX_FLOOD = 520
STALLED_BODY = (b"POST /v1/sandboxes HTTP/1.1\r\nHost: spaced\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n")


def raise_nofile(wanted: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted:
        pytest.skip(f"RLIMIT_NOFILE {soft} < {wanted} sockets this test opens")


def status_of(response: bytes) -> int | None:
    parts = response.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        return None
    try:
        return int(parts[1])
    except ValueError:
        return None


def exchange(sock: socket.socket, request: bytes, timeout: float = 10.0) -> tuple[int | None, float]:
    """Sends a whole request on a connected socket; the response's status and how long it took (monotonic)."""
    t0 = time.monotonic()
    sock.settimeout(timeout)
    sock.sendall(request)
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return status_of(data), time.monotonic() - t0


def unix_healthz(path: str) -> tuple[int | None, float]:
    t0 = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        status, _ = exchange(s, b"GET /healthz HTTP/1.1\r\nHost: spaced\r\nConnection: close\r\n\r\n")
    return status, time.monotonic() - t0


def tcp_get(source: str, port: int, target: str, key: str) -> tuple[int | None, float]:
    t0 = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        status, _ = exchange(s, f"GET {target} HTTP/1.1\r\nHost: spaced\r\nAuthorization: Bearer {key}\r\n"
                                f"Connection: close\r\n\r\n".encode())
    return status, time.monotonic() - t0


class Outcome:
    def __init__(self):
        self.data = b""
        self.closed = False
        self.reset = False
        self.closed_after: float | None = None


def collect(socks: dict[socket.socket, Outcome], until: float, t0: float):
    """Reads whatever the server sends on socks until the deadline (or until all of them are closed)."""
    sel = selectors.DefaultSelector()
    for s, o in socks.items():
        if not o.closed:
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
    try:
        while sel.get_map() and time.monotonic() < until:
            for key, _ in sel.select(timeout=max(0.0, min(0.5, until - time.monotonic()))):
                s = key.fileobj
                o = socks[s]
                try:
                    chunk = s.recv(4096)
                except BlockingIOError:
                    continue
                except ConnectionResetError:
                    chunk, o.reset = b"", True
                if chunk:
                    o.data += chunk
                    continue
                o.closed, o.closed_after = True, time.monotonic() - t0
                sel.unregister(s)
    finally:
        sel.close()


@pytest.fixture
def tcp_daemon(own_daemon):
    port = spacelib.free_port()
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox",
                    "listen": f"127.0.0.1:{port}"}, build_template=False)
    d.tcp_port = port
    return d


def test_e21_unauthenticated_tcp_flood_from_one_source(tcp_daemon):
    d = tcp_daemon
    port = d.tcp_port
    key = d.client.create_key("flood-test")["secret"]
    raise_nofile(TCP_FLOOD + 256)
    flood: dict[socket.socket, Outcome] = {}
    sent_request: set[socket.socket] = set()
    try:
        t0 = time.monotonic()
        for i in range(TCP_FLOOD):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.connect(("127.0.0.1", port))
            # Three in four ask without a key and then keep the socket open; the rest never say anything.
            if i % 4:
                s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: spaced\r\n\r\n")
                sent_request.add(s)
            flood[s] = Outcome()

        # While the flood holds whatever it could get: the operator and another source are answered.
        status, took = unix_healthz(d.sock)
        assert status == 200 and took < ANSWER_WITHIN_S, f"unix socket: {status} after {took:.2f}s"
        status, took = tcp_get("127.0.0.2", port, "/v1/sandboxes", key)
        assert status == 200 and took < ANSWER_WITHIN_S, f"TCP from 127.0.0.2: {status} after {took:.2f}s"

        # What the flood itself got. The share of a source bounds what it holds at once: a 401 ends its
        # connection (so more of the flood is answered, one after another), silent connections keep
        # theirs until the head deadline, and beyond the share the source is refused.
        collect(flood, time.monotonic() + 3, t0)
        statuses = {s: status_of(o.data) for s, o in flood.items()}
        unauthorized = [s for s in flood if statuses[s] == 401]
        refused = [s for s in flood if statuses[s] == 503 or (flood[s].reset and not flood[s].data)]
        still_open = [s for s, o in flood.items() if not o.closed]
        assert all(s in sent_request for s in unauthorized)
        assert all(flood[s].closed for s in unauthorized), "a 401 over TCP must close the connection"
        assert all(s not in sent_request for s in still_open), "only silent connections may still be open"
        assert len(still_open) <= PER_SOURCE, f"one address holds {len(still_open)} connections"
        assert len(unauthorized) + len(refused) + len(still_open) == TCP_FLOOD, \
            (len(unauthorized), len(refused), len(still_open), {statuses[s] for s in flood})
        silent = TCP_FLOOD - len(sent_request)
        assert len(refused) >= silent - PER_SOURCE, (len(refused), len(unauthorized), len(still_open))
        refusal = next(flood[s].data for s in refused if flood[s].data)
        assert b"too many connections from this address" in refusal, refusal[:300]

        # The silent ones hold their slot for the head deadline, not longer, and get no answer.
        collect(flood, t0 + HEAD_TIMEOUT_S + MARGIN_S, t0)
        late = [o for s, o in flood.items() if s in still_open and (not o.closed or o.data)]
        assert not late, f"{len(late)} silent connections outlived the {HEAD_TIMEOUT_S}s head deadline or got data"

        # A second wave, as a reconnecting attacker would send, changes nothing.
        for s in list(flood):
            s.close()
        flood.clear()
        for _ in range(TCP_FLOOD // 2):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: spaced\r\n\r\n")
            flood[s] = Outcome()
        status, took = unix_healthz(d.sock)
        assert status == 200 and took < ANSWER_WITHIN_S, f"unix socket, second wave: {status} after {took:.2f}s"
        status, took = tcp_get("127.0.0.2", port, "/v1/sandboxes", key)
        assert status == 200 and took < ANSWER_WITHIN_S, f"TCP from 127.0.0.2, second wave: {status} after {took:.2f}s"
    finally:
        for s in flood:
            s.close()
    assert d.client.healthy()


def test_e21_unix_connections_that_never_finish_a_body(own_daemon):
    d = own_daemon(build_template=False)
    raise_nofile(UNIX_FLOOD + 256)
    stalled: dict[socket.socket, Outcome] = {}
    try:
        t0 = time.monotonic()
        for _ in range(UNIX_FLOOD):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(d.sock)
            s.sendall(STALLED_BODY)  # and never the 100 bytes
            stalled[s] = Outcome()
        opened = time.monotonic()

        # Meanwhile the unix socket answers, every time within the bound.
        probes = []
        deadline = opened + BODY_TIMEOUT_S + MARGIN_S
        while time.monotonic() < deadline and not all(o.closed for o in stalled.values()):
            status, took = unix_healthz(d.sock)
            probes.append((status, took))
            assert status == 200 and took < ANSWER_WITHIN_S, f"probe {len(probes)}: {status} after {took:.2f}s"
            collect(stalled, time.monotonic() + 0.5, t0)

        answered = [o for o in stalled.values() if status_of(o.data) == 408]
        assert len(answered) == UNIX_FLOOD, (
            f"{len(answered)} of {UNIX_FLOOD} stalled bodies were answered 408 within "
            f"{BODY_TIMEOUT_S + MARGIN_S}s; others got {sorted({status_of(o.data) for o in stalled.values()}, key=str)}")
        assert all(o.closed for o in stalled.values()), "a 408 must close the connection"
        assert max(o.closed_after for o in stalled.values()) <= (opened - t0) + BODY_TIMEOUT_S + MARGIN_S
        assert b"request_timeout" in answered[0].data
    finally:
        for s in stalled:
            s.close()
    assert d.client.healthy()
    # Nothing was created from the bodies that never came.
    assert d.client.list() == []
