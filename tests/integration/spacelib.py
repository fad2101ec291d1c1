"""Test helpers for SPACE: a REST client over spaced's unix socket (or TCP), a daemon launcher, and
host-side oracles (which processes, cgroups and mounts a sandbox owns, seen from the host).

Standard library only, so it runs with any python3 that has pytest.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
UID_BASE = 0x10000000
UID_RANGE = 65536
SANDBOX_ID_RE = re.compile(r"sb-[0-9a-f]{12}")

# Every sandbox id this test process ever saw (created through the API, or found in a state dir of a
# daemon it started). Host-side leak checks consider only these, so that other spaced instances running
# on the same machine are never mistaken for leaks.
KNOWN_IDS: set[str] = set()


def bin_dir() -> Path:
    return Path(os.environ.get("SPACE_BIN_DIR") or REPO / "build" / "bin")


def missing_binaries() -> list[str]:
    return [b for b in ("spaced", "space", "space-agent") if not (bin_dir() / b).is_file()]


# ---------------------------------------------------------------------------------------------- HTTP


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 120):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


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


# ------------------------------------------------------------------------------------------- rootfs


def make_busybox_rootfs(dest: Path) -> None:
    """Uses scripts/make-busybox-rootfs when the product ships it, else builds an equivalent tree."""
    script = REPO / "scripts" / "make-busybox-rootfs"
    if script.is_file():
        subprocess.run(["bash", str(script), str(dest)], check=True, capture_output=True, timeout=300)
        return
    bb = shutil.which("busybox") or "/bin/busybox"
    dest.mkdir(parents=True, exist_ok=True)
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "home/user", "dev", "proc", "sys",
              "var/tmp", "run"):
        (dest / d).mkdir(parents=True, exist_ok=True)
    os.chmod(dest / "tmp", 0o1777)
    shutil.copy2(bb, dest / "bin" / "busybox")
    applets = subprocess.run([str(dest / "bin" / "busybox"), "--list-full"], capture_output=True,
                             text=True, check=True).stdout.split()
    for a in applets:
        p = dest / a
        if not p.exists():
            p.parent.mkdir(parents=True, exist_ok=True)
            os.symlink("/bin/busybox", p)
    (dest / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n"
                                     "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
                                     "user:x:1000:1000:user:/home/user:/bin/sh\n")
    (dest / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\nuser:x:1000:\n")
    os.chown(dest / "home/user", 1000, 1000)


# -------------------------------------------------------------------------------------------- daemon


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Daemon:
    """One spaced process with its own state directory."""

    def __init__(self, state_dir: Path | None = None, config: dict | None = None, extra_args=()):
        self.state = Path(state_dir or tempfile.mkdtemp(prefix="space-test-", dir="/var/tmp"))
        # mkdtemp makes 0700; sandbox uids must traverse the state dir to reach their layer (like the
        # default /var/lib/space, which is 0755).
        os.chmod(self.state, 0o755)
        self.sock = str(self.state / "spaced.sock")
        self.config_path = self.state / "config.json"
        self.config = config if config is not None else {"pool_size": 2, "default_template": "busybox",
                                                         "pool_templates": "busybox"}
        # The egress gateway owns host-wide things (one nftables table, its ports, the sandbox address
        # pool), so only the tests that are about it turn it on, one daemon at a time (test_egress.py).
        self.config.setdefault("egress", False)
        # A checkout's own guest (scripts/vm/build-guest --cache-dir DIR) instead of the host's default one
        # in /var/cache/space/vm, which other checkouts on this machine may rebuild with their agent.
        guest = os.environ.get("SPACE_VM_DIR")
        if guest:
            self.config.setdefault("vm_kernel", str(Path(guest) / "vmlinuz"))
            self.config.setdefault("vm_initrd", str(Path(guest) / "initramfs.cpio"))
        self.extra_args = list(extra_args)
        self.proc: subprocess.Popen | None = None
        self.log_path = self.state / "spaced.log"
        self.client = Client(self.sock)
        self.tcp_port: int | None = None
        self._seen: set[str] = set()

    def argv(self) -> list[str]:
        a = [str(bin_dir() / "spaced"), "--socket", self.sock, "--state-dir", str(self.state),
             "--config", str(self.config_path)]
        policy = REPO / "policies" / "seccomp" / "default.json"
        if policy.is_file() and "--seccomp-policy" not in self.extra_args:
            a += ["--seccomp-policy", str(policy)]
        return a + self.extra_args

    def start(self, timeout: float = 60):
        self.config_path.write_text(json.dumps(self.config))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"spaced exited with {self.proc.returncode} during start-up:\n{self.log_tail()}")
            if os.path.exists(self.sock) and self.client.healthy():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"spaced did not answer /healthz within {timeout}s:\n{self.log_tail()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 80) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError as e:
            return f"(no log: {e})"

    def stop(self, sig=signal.SIGTERM, timeout: float = 30, keep_egress: bool = False) -> int | None:
        """Stops spaced and (unless keep_egress) the space-egress it started, which by design outlives it."""
        if not self.proc or self.proc.poll() is not None:
            if not keep_egress:
                self.stop_egress()
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"spaced did not exit within {timeout}s of {sig!r}:\n{self.log_tail()}")
        finally:
            if not keep_egress:
                self.stop_egress()

    def egress_pid(self) -> int | None:
        try:
            pid = int((self.state / "egress" / "egress.pid").read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if str(self.state).encode() in cmdline else None

    def stop_egress(self):
        pid = self.egress_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.05)
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)

    def kill9(self):
        self.proc.kill()
        self.proc.wait(10)

    def sandbox_dir_ids(self) -> set[str]:
        d = self.state / "sandboxes"
        try:
            ids = {n for n in os.listdir(d) if SANDBOX_ID_RE.fullmatch(n)}
        except OSError:
            ids = set()
        KNOWN_IDS.update(ids)
        self._seen |= ids
        return ids

    def seen_ids(self) -> set[str]:
        """Every sandbox id this daemon is known to have had: created through its client, or found in
        its state dir (pooled ones)."""
        self.sandbox_dir_ids()
        return self._seen | self.client.created

    def template_rootfs_dirs(self) -> list[Path]:
        return sorted(p for p in (self.state / "templates").glob("*/rootfs") if p.is_dir())

    def delete_all_sandboxes(self) -> list[str]:
        errors = []
        try:
            for sb in self.client.list():
                try:
                    self.client.delete(sb["id"], missing_ok=True)
                except Exception as e:  # noqa: BLE001 - collect and report
                    errors.append(f"{sb['id']}: {e}")
        except Exception as e:  # noqa: BLE001
            errors.append(f"list: {e}")
        return errors

    def force_cleanup(self):
        """Host-side scrub after the daemon exited: the pool's sandboxes outlive spaced by design, so the
        harness kills and unmounts what is left of *this* state dir's sandboxes before removing it."""
        ids = self.sandbox_dir_ids()
        for pid in sandbox_pids(ids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.3)
        for mp in sorted((m for m in all_mountpoints() if m.startswith(str(self.state) + "/")
                          or m == str(self.state)), key=len, reverse=True):
            subprocess.run(["umount", "-l", mp], capture_output=True)
        loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        for line in loops.splitlines():
            if str(self.state) + "/" in line:
                subprocess.run(["losetup", "-d", line.split(":")[0]], capture_output=True)
        for sid in ids:
            for d in sorted(cgroup_dirs(sid), key=lambda p: len(str(p)), reverse=True):
                for sub, _, _ in sorted(os.walk(d), key=lambda t: len(t[0]), reverse=True):
                    try:
                        os.rmdir(sub)
                    except OSError:
                        pass
        if os.environ.get("SPACE_TEST_KEEP_LOGS"):
            shutil.copy(self.log_path, str(self.state) + ".log") if self.log_path.exists() else None
        shutil.rmtree(self.state, ignore_errors=True)


# ------------------------------------------------------------------------------------ host oracles


def read(path, default=""):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return default


def proc_status(pid: int) -> dict:
    out = {}
    for line in read(f"/proc/{pid}/status").splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def pid_cgroup_ids(pid: int) -> set[str]:
    return set(SANDBOX_ID_RE.findall(read(f"/proc/{pid}/cgroup")))


def sandbox_pids(ids) -> list[int]:
    """Host pids of every process whose cgroup path names one of the sandbox ids."""
    if isinstance(ids, str):
        ids = {ids}
    ids = set(ids)
    return [p for p in all_pids() if pid_cgroup_ids(p) & ids]


def uids_of(pid: int) -> list[int]:
    st = proc_status(pid)
    return [int(x) for x in st.get("Uid", "").split()] if st.get("Uid") else []


def nspid(pid: int) -> list[int]:
    v = proc_status(pid).get("NSpid", "")
    return [int(x) for x in v.split()] if v else []


def agent_host_pid(sid: str) -> int | None:
    """The sandbox's pid 1 (space-agent) as seen from the host."""
    for p in sandbox_pids(sid):
        ns = nspid(p)
        if len(ns) >= 2 and ns[-1] == 1:
            return p
    return None


def is_zombie(pid: int) -> bool:
    s = read(f"/proc/{pid}/stat")
    return bool(s) and s.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def pid_start_time(pid: int) -> str | None:
    s = read(f"/proc/{pid}/stat")
    if not s:
        return None
    return s.rsplit(")", 1)[1].split()[19]


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_dirs(sid: str) -> list[Path]:
    """Every cgroup directory named after the sandbox, in any hierarchy (v1 controllers or v2)."""
    found = []
    roots = [CGROUP_ROOT] + [p for p in CGROUP_ROOT.iterdir() if p.is_dir()] if CGROUP_ROOT.is_dir() else []
    for root in roots:
        # Typical layouts: <root>/space/<id>, <root>/space.slice/<id>, <root>/space/sandboxes/<id>.
        for pat in (f"*/{sid}", f"*/*/{sid}", f"*/{sid}.*", f"*/*/{sid}.*"):
            try:
                matches = list(root.glob(pat))
            except FileNotFoundError:
                # A cgroup removed while the glob walks it (a sandbox being deleted right now): look again.
                matches = list(root.glob(pat))
            for p in matches:
                if p.is_dir() and "space" in str(p.relative_to(root)).split("/")[0]:
                    found.append(p)
    return sorted(set(found))


def space_cgroup_ids() -> set[str]:
    """Ids of every sandbox that has a cgroup directory under some space hierarchy."""
    ids = set()
    for root in [CGROUP_ROOT] + [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]:
        for top in root.glob("space*"):
            if top.is_dir():
                for dirpath, dirnames, _ in os.walk(top):
                    for d in dirnames:
                        ids.update(SANDBOX_ID_RE.findall(d))
    return ids


def cgroup_file(sid: str, controller: str, name: str) -> str | None:
    """Reads a cgroup file of the sandbox, v1 (<controller> hierarchy) first, then v2."""
    for d in cgroup_dirs(sid):
        rel = str(d.relative_to(CGROUP_ROOT))
        if rel.startswith(controller + "/") or rel.startswith(f"{controller},") or "," + controller in rel.split("/")[0]:
            v = read(d / name, None)
            if v is not None:
                return v
    for d in cgroup_dirs(sid):
        v = read(d / name, None)
        if v is not None:
            return v
    return None


def frozen_state(sid: str) -> bool | None:
    """Whether the kernel holds the sandbox's cgroup frozen: its cgroup2 group (cgroup.freeze; on a hybrid
    host its twin on the unified hierarchy) or else its v1 freezer. None: no freezer found."""
    for d in cgroup_dirs(sid):
        events = read(d / "cgroup.events", None)
        if events is not None and (d / "cgroup.freeze").exists():
            return "frozen 1" in events.splitlines()
    state = cgroup_file(sid, "freezer", "freezer.state")
    return None if state is None else state.strip() == "FROZEN"


def all_mountpoints(pid: int | str = "self") -> list[str]:
    out = []
    for line in read(f"/proc/{pid}/mountinfo").splitlines():
        parts = line.split()
        if len(parts) > 4:
            out.append(parts[4].replace("\\040", " "))
    return out


def mounts_naming(sid: str, pids=("self",)) -> list[str]:
    res = set()
    for p in pids:
        for line in read(f"/proc/{p}/mountinfo").splitlines():
            if sid in line:
                res.add(line)
    return sorted(res)


def loop_devices_naming(text: str) -> list[str]:
    """Loop devices whose backing file path contains text (e.g. a sandbox id or a state dir)."""
    out = []
    for bf in Path("/sys/block").glob("loop*/loop/backing_file"):
        target = read(bf).strip()
        if text in target:
            out.append(f"{bf.parts[3]} -> {target}")
    return out


def processes_in_uid_range() -> dict[int, int]:
    """pid -> real uid of every host process whose real uid is in the sandbox uid space."""
    out = {}
    for p in all_pids():
        u = uids_of(p)
        if u and UID_BASE <= u[0] < 0xFFFFFFFF and not is_zombie(p):
            out[p] = u[0]
    return out


@dataclass
class SandboxFootprint:
    sid: str
    pids: list[tuple[int, str | None]]
    cgroups: list[Path]
    mounts: list[str]
    dir: Path | None
    loops: list[str] = field(default_factory=list)

    def remaining(self, daemon_pid: int | None = None, grace: float = 5.0) -> list[str]:
        """What is still there; polls for up to `grace` seconds because the kernel finishes tearing down
        killed tasks (and their parent reaps them) shortly after destroy returns."""
        deadline = time.monotonic() + grace
        while True:
            left = self._remaining_now(daemon_pid)
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def _remaining_now(self, daemon_pid: int | None = None) -> list[str]:
        left = []
        for pid, start in self.pids:
            if start is not None and pid_start_time(pid) == start and not is_zombie(pid):
                left.append(f"process {pid} ({read(f'/proc/{pid}/comm').strip()}) still runs")
        old = {p for p, _ in self.pids}
        for pid in sandbox_pids(self.sid):
            if pid not in old:
                left.append(f"process {pid} ({read(f'/proc/{pid}/comm').strip()}) still in the sandbox's cgroup")
        for d in self.cgroups:
            if d.exists():
                left.append(f"cgroup {d} still exists")
        for d in cgroup_dirs(self.sid):
            if d not in self.cgroups:
                left.append(f"cgroup {d} exists")
        pids = ["self"] + ([daemon_pid] if daemon_pid else [])
        for m in mounts_naming(self.sid, pids):
            left.append(f"mount: {m}")
        if self.dir is not None and self.dir.exists():
            left.append(f"directory {self.dir} still exists")
        for lo in loop_devices_naming(self.sid):
            left.append(f"loop device {lo}")
        return left


def footprint(sid: str, state_dir: Path | None = None, daemon_pid: int | None = None) -> SandboxFootprint:
    pids = [(p, pid_start_time(p)) for p in sandbox_pids(sid)]
    pidlist = ["self"] + ([daemon_pid] if daemon_pid else [])
    return SandboxFootprint(sid, pids, cgroup_dirs(sid), mounts_naming(sid, pidlist),
                            (state_dir / "sandboxes" / sid) if state_dir else None, loop_devices_naming(sid))


def vm_hwm_kib(pid: int) -> int:
    v = proc_status(pid).get("VmHWM", "0 kB").split()[0]
    return int(v)


def vm_rss_kib(pid: int) -> int:
    v = proc_status(pid).get("VmRSS", "0 kB").split()[0]
    return int(v)


def cli_env(sock: str, extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPACE_")}
    env["SPACE_HOST"] = f"unix://{sock}"
    env.update(extra or {})
    return env


def run_cli(sock: str, *args, env: dict | None = None, input: bytes | str | None = None, timeout: float = 300):
    e = cli_env(sock, env)
    if isinstance(input, str):
        input = input.encode()
    return subprocess.run([str(bin_dir() / "space"), *map(str, args)], env=e, input=input, capture_output=True,
                          timeout=timeout)
