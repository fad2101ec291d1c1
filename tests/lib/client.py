"""The REST client for spaced over its unix socket (or TCP), used by the tests and by bench/run.

Standard library only, so it runs with any python3 that has pytest."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import socket
import time
import urllib.parse
from dataclasses import dataclass, field

# Every sandbox id this process ever saw (created through the API, or found in a state dir of a daemon it
# started). Host-side leak checks consider only these, so that other spaced instances running on the same
# machine are never mistaken for leaks.
KNOWN_IDS: set[str] = set()

class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over an AF_UNIX socket; counts its (re)connects."""

    def __init__(self, path: str, timeout: float = 120):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path
        self.connects = 0

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s
        self.connects += 1


class ApiError(Exception):
    def __init__(self, status: int, body: bytes, method: str = "", path: str = ""):
        self.status = status
        self.body = body
        try:
            self.json = json.loads(body)
        except Exception:
            self.json = None
        err = (self.json or {}).get("error", {}) if isinstance(self.json, dict) else {}
        self.code = err.get("code") if isinstance(err, dict) else None
        self.message = err.get("message") if isinstance(err, dict) else None
        super().__init__(f"{method} {path} -> {status}: {body[:500]!r}")


@dataclass
class ExecResult:
    exit_code: int | None = None
    signal: int | None = None
    timed_out: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    events: list = field(default_factory=list)
    pid: int | None = None

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")

    def __str__(self):
        return (f"exit_code={self.exit_code} signal={self.signal} timed_out={self.timed_out}\n"
                f"--- stdout\n{self.out[-4000:]}\n--- stderr\n{self.err[-4000:]}")


def q(**params) -> str:
    return urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})


class Client:
    """REST client for spaced. `sock` = unix socket path, or tcp=(host, port)."""

    def __init__(self, sock: str | None = None, tcp: tuple[str, int] | None = None, api_key: str | None = None,
                 timeout: float = 300):
        self.sock = sock
        self.tcp = tcp
        self.api_key = api_key
        self.timeout = timeout
        self.created: set[str] = set()

    def conn(self, timeout: float | None = None) -> http.client.HTTPConnection:
        t = timeout or self.timeout
        if self.sock:
            return UnixHTTPConnection(self.sock, timeout=t)
        return http.client.HTTPConnection(self.tcp[0], self.tcp[1], timeout=t)

    def _headers(self, headers=None):
        h = {}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        h.update(headers or {})
        return h

    def open(self, method: str, path: str, body=None, headers=None, timeout=None):
        """Sends a request and returns (connection, response) with the body unread (for streams)."""
        c = self.conn(timeout)
        h = self._headers(headers)
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if body is not None and not isinstance(body, (bytes, str)) and not hasattr(body, "read"):
            c.request(method, path, body=body, headers=h, encode_chunked=True)
        else:
            c.request(method, path, body=body, headers=h)
        return c, c.getresponse()

    def raw(self, method: str, path: str, body=None, headers=None, timeout=None):
        """(status, headers dict lower-cased, body bytes); never raises on HTTP errors."""
        c, r = self.open(method, path, body, headers, timeout)
        try:
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def call(self, method: str, path: str, body=None, ok=(200, 201, 202, 204), headers=None, timeout=None):
        status, _, data = self.raw(method, path, body, headers, timeout)
        if status not in ok:
            raise ApiError(status, data, method, path)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data

    # --- health
    def healthy(self) -> bool:
        try:
            status, _, _ = self.raw("GET", "/healthz", timeout=5)
            return status == 200
        except OSError:
            return False

    def metrics(self) -> str:
        status, _, data = self.raw("GET", "/metrics")
        assert status == 200, data
        return data.decode()

    # --- sandboxes
    def create(self, **kw) -> dict:
        sb = self.call("POST", "/v1/sandboxes", kw, ok=(200, 201))
        KNOWN_IDS.add(sb["id"])
        self.created.add(sb["id"])
        return sb

    def get(self, sid: str) -> dict:
        return self.call("GET", f"/v1/sandboxes/{sid}")

    def list(self, label: str | dict | None = None, state: str | None = None) -> list:
        params = []
        if isinstance(label, dict):
            params += [("label", f"{k}={v}") for k, v in label.items()]
        elif label:
            params.append(("label", label))
        if state:
            params.append(("state", state))
        path = "/v1/sandboxes" + ("?" + urllib.parse.urlencode(params) if params else "")
        return self.call("GET", path)["sandboxes"]

    def delete(self, sid: str, missing_ok: bool = False):
        try:
            self.call("DELETE", f"/v1/sandboxes/{sid}")
        except ApiError as e:
            if not (missing_ok and e.status == 404):
                raise

    # --- exec
    @staticmethod
    def _exec_body(cmd=None, shell=None, env=None, cwd=None, user=None, stdin=None, timeout_s=None):
        body = {}
        if cmd is not None:
            body["cmd"] = list(cmd)
        if shell is not None:
            body["shell"] = shell
        for k, v in (("env", env), ("cwd", cwd), ("user", user), ("stdin", stdin), ("timeout_s", timeout_s)):
            if v is not None:
                body[k] = v
        return body

    def exec_stream(self, sid: str, timeout: float = 600, **kw):
        """Yields decoded NDJSON events as they arrive (stdout/stderr data already base64-decoded)."""
        c, r = self.open("POST", f"/v1/sandboxes/{sid}/exec", self._exec_body(**kw), timeout=timeout)
        try:
            if r.status != 200:
                raise ApiError(r.status, r.read(), "POST", f"/v1/sandboxes/{sid}/exec")
            yield from iter_ndjson(r)
        finally:
            c.close()

    def exec(self, sid: str, cmd=None, shell=None, timeout: float = 600, **kw) -> ExecResult:
        if isinstance(cmd, str):
            shell, cmd = cmd, None
        return collect_exec(self.exec_stream(sid, timeout=timeout, cmd=cmd, shell=shell, **kw))

    def sh(self, sid: str, script: str, **kw) -> ExecResult:
        """Runs script with /bin/sh -c (argv form, so it does not depend on the `shell` field)."""
        return self.exec(sid, cmd=["/bin/sh", "-c", script], **kw)

    # --- background processes
    def start_process(self, sid: str, cmd=None, shell=None, env=None, cwd=None, user=None) -> dict:
        body = self._exec_body(cmd=cmd, shell=shell, env=env, cwd=cwd, user=user)
        return self.call("POST", f"/v1/sandboxes/{sid}/processes", body, ok=(200, 201))

    def processes(self, sid: str) -> list:
        return self.call("GET", f"/v1/sandboxes/{sid}/processes")["processes"]

    def signal(self, sid: str, proc: str, sig="TERM"):
        return self.call("POST", f"/v1/sandboxes/{sid}/processes/{proc}/signal", {"signal": sig})

    def logs_stream(self, sid: str, proc: str, follow: bool = False, timeout: float = 600):
        path = f"/v1/sandboxes/{sid}/processes/{proc}/logs" + ("?follow=1" if follow else "")
        c, r = self.open("GET", path, timeout=timeout)
        try:
            if r.status != 200:
                raise ApiError(r.status, r.read(), "GET", path)
            yield from iter_ndjson(r)
        finally:
            c.close()

    def logs(self, sid: str, proc: str, follow: bool = False, timeout: float = 600) -> ExecResult:
        return collect_exec(self.logs_stream(sid, proc, follow, timeout))

    # --- files
    def upload(self, sid: str, path: str, data, mode: str | None = None, timeout: float = 1800):
        """data: bytes, a file object, or an iterable of bytes chunks (sent with chunked encoding)."""
        url = f"/v1/sandboxes/{sid}/files?" + q(path=path, mode=mode)
        if isinstance(data, (bytes, bytearray)):
            body = bytes(data)
        elif hasattr(data, "read"):
            body = iter(lambda: data.read(1 << 20), b"")
        else:
            body = data
        return self.call("PUT", url, body, ok=(200, 201, 204), timeout=timeout,
                         headers={"Content-Type": "application/octet-stream"})

    def download_stream(self, sid: str, path: str, chunk: int = 1 << 20, timeout: float = 1800):
        url = f"/v1/sandboxes/{sid}/files?" + q(path=path)
        c, r = self.open("GET", url, timeout=timeout)
        try:
            if r.status != 200:
                raise ApiError(r.status, r.read(), "GET", url)
            while True:
                b = r.read(chunk)
                if not b:
                    break
                yield b
        finally:
            c.close()

    def download(self, sid: str, path: str) -> bytes:
        return b"".join(self.download_stream(sid, path))

    def download_to(self, sid: str, path: str, fileobj) -> tuple[int, str]:
        h = hashlib.sha256()
        n = 0
        for b in self.download_stream(sid, path):
            h.update(b)
            n += len(b)
            if fileobj is not None:
                fileobj.write(b)
        return n, h.hexdigest()

    def stat(self, sid: str, path: str) -> dict:
        return self.call("GET", f"/v1/sandboxes/{sid}/files/stat?" + q(path=path))

    def ls(self, sid: str, path: str) -> list:
        r = self.call("GET", f"/v1/sandboxes/{sid}/files/list?" + q(path=path))
        if isinstance(r, dict):
            for key in ("entries", "files"):
                if key in r:
                    return r[key]
        return r

    def mkdir(self, sid: str, path: str, parents: bool = False):
        return self.call("POST", f"/v1/sandboxes/{sid}/files/mkdir", {"path": path, "parents": parents})

    def move(self, sid: str, src: str, dst: str):
        return self.call("POST", f"/v1/sandboxes/{sid}/files/move", {"from": src, "to": dst})

    def remove(self, sid: str, path: str, recursive: bool = False):
        return self.call("DELETE", f"/v1/sandboxes/{sid}/files?" + q(path=path, recursive="1" if recursive else None))

    # --- templates and keys
    def templates(self) -> list:
        r = self.call("GET", "/v1/templates")
        return r["templates"] if isinstance(r, dict) else r

    def build_template(self, name: str, path: str, kind: str = "dir", timeout: float = 1800):
        status, _, data = self.raw("POST", "/v1/templates", {"name": name, "kind": kind, "path": path},
                                   timeout=timeout)
        if status not in (200, 201, 202):
            raise ApiError(status, data, "POST", "/v1/templates")
        # The answer may be one JSON object or an NDJSON progress stream; an error line fails the build.
        for line in data.decode(errors="replace").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("error"):
                raise ApiError(500, line.encode(), "POST", "/v1/templates")
        return data

    def delete_template(self, name: str):
        return self.call("DELETE", f"/v1/templates/{name}")

    def create_key(self, name: str) -> dict:
        return self.call("POST", "/v1/keys", {"name": name}, ok=(200, 201))

    def keys(self) -> list:
        r = self.call("GET", "/v1/keys")
        return r["keys"] if isinstance(r, dict) else r

    def revoke_key(self, kid: str):
        return self.call("DELETE", f"/v1/keys/{kid}")


class KeepAliveClient:
    """One HTTP/1.1 keep-alive connection to spaced, for bench/run: its figures are of requests on an open
    connection, as an SDK sends them, not of connects. exec() notes when the first stdout and the exit
    arrived."""

    # spaced closes a connection that waits over 10 s for its next request head (docs/api.md, "Connection
    # limits"): a connection idle for longer than this is replaced before use instead of failing a POST.
    IDLE_REUSE_S = 5.0

    def __init__(self, sock_path):
        self.conn = UnixHTTPConnection(sock_path)
        self.last_used = time.monotonic()

    def healthy(self) -> bool:
        try:
            return self.raw("GET", "/healthz")[0] == 200
        except OSError:
            return False

    def close(self):
        self.conn.close()

    def raw(self, method, path, body=None, headers=None, retry=None):
        """Sends one request and reads the whole answer: (status, headers, bytes)."""
        if retry is None:
            retry = method in ("GET", "DELETE")
        hdrs = dict(headers or {})
        if time.monotonic() - self.last_used > self.IDLE_REUSE_S:
            self.conn.close()  # http.client connects again on the next request
        for attempt in (0, 1):
            self.last_used = time.monotonic()
            try:
                self.conn.request(method, path, body=body, headers=hdrs)
                resp = self.conn.getresponse()
                data = resp.read()
                self.last_used = time.monotonic()
                return resp.status, resp.headers, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    http.client.CannotSendRequest, http.client.ResponseNotReady):
                self.conn.close()
                if attempt or not retry:
                    raise

    def json(self, method, path, obj=None, expect=(200, 201, 202, 204)):
        body = None
        headers = {}
        if obj is not None:
            body = json.dumps(obj).encode()
            headers["Content-Type"] = "application/json"
        status, _, data = self.raw(method, path, body, headers)
        if status not in expect:
            raise ApiError(status, data, method, path)
        if not data.strip():
            return status, None
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data.decode(errors="replace")

    def metrics(self):
        status, _, data = self.raw("GET", "/metrics")
        if status != 200:
            raise ApiError(status, data, "GET", "/metrics")
        out = {}
        for line in data.decode(errors="replace").splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^(\S+)\s+(\S+)", line)
            if m:
                try:
                    out[m.group(1)] = float(m.group(2))
                except ValueError:
                    pass
        return out

    def create(self, spec):
        _, body = self.json("POST", "/v1/sandboxes", spec, expect=(200, 201))
        if not isinstance(body, dict) or "id" not in body:
            raise ApiError(500, json.dumps(body).encode(), "POST", "/v1/sandboxes (no id in the answer)")
        return body

    def delete(self, sid):
        self.json("DELETE", f"/v1/sandboxes/{sid}", expect=(200, 202, 204, 404))

    def exec(self, sid, cmd):
        """Runs cmd; returns (t_first_stdout or None, t_exit or None, exit_code, stdout bytes)."""
        body = json.dumps({"cmd": cmd}).encode()
        self.conn.request("POST", f"/v1/sandboxes/{sid}/exec", body=body,
                          headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        if resp.status != 200:
            data = resp.read()
            raise ApiError(resp.status, data, "POST", f"/v1/sandboxes/{sid}/exec")
        t_first = t_exit = None
        code = None
        out = b""
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line:
                continue
            ev = json.loads(line)
            typ = ev.get("type")
            if typ == "stdout":
                if t_first is None:
                    t_first = time.perf_counter()
                out += base64.b64decode(ev.get("data", ""))
            elif typ == "exit":
                t_exit = time.perf_counter()
                code = ev.get("exit_code")
            elif typ == "error":
                resp.read()
                raise ApiError(500, json.dumps(ev).encode(), "exec stream", f"/v1/sandboxes/{sid}/exec")
        return t_first, t_exit, code, out


def iter_ndjson(resp):
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.strip()
        if not line:
            continue
        ev = json.loads(line)
        if ev.get("type") in ("stdout", "stderr") and isinstance(ev.get("data"), str):
            ev["bytes"] = base64.b64decode(ev["data"])
        yield ev


def collect_exec(events) -> ExecResult:
    res = ExecResult()
    out, err = [], []
    for ev in events:
        res.events.append({k: v for k, v in ev.items() if k != "bytes"})
        t = ev.get("type")
        if t == "started":
            res.pid = ev.get("pid")
        elif t == "stdout":
            out.append(ev.get("bytes", b""))
        elif t == "stderr":
            err.append(ev.get("bytes", b""))
        elif t == "exit":
            res.exit_code = ev.get("exit_code")
            res.signal = ev.get("signal")
            res.timed_out = bool(ev.get("timed_out"))
        elif t == "error":
            raise ApiError(500, json.dumps(ev).encode(), "stream", "")
    res.stdout = b"".join(out)
    res.stderr = b"".join(err)
    return res


def wait_for(pred, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

