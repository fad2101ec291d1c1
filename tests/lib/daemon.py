"""The daemon harness: one spaced with its own state directory, the busybox rootfs it serves, and the CLI
run against it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from lib.client import KNOWN_IDS, Client
from lib.host import SANDBOX_ID_RE, all_mountpoints, cgroup_dirs, sandbox_pids

REPO = Path(__file__).resolve().parents[2]


def bin_dir() -> Path:
    return Path(os.environ.get("SPACE_BIN_DIR") or REPO / "build" / "bin")


def missing_binaries() -> list[str]:
    return [b for b in ("spaced", "space", "space-agent") if not (bin_dir() / b).is_file()]


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
