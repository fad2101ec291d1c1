"""Interactive shell: `space shell ID` driven under a real pseudo-terminal (the CLI speaks WebSocket to
GET /v1/sandboxes/{id}/pty)."""

import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

import spacelib
from spacefixtures import TIERS, tier_sandbox


# Every test here runs on both isolation tiers: the same agent and protocol serve the jail and the VM.
@pytest.fixture(params=TIERS)
def sandbox(request, client, make_sandbox) -> str:
    return tier_sandbox(request.param, client, make_sandbox)



class PtyCli:
    def __init__(self, sock, *args, rows=24, cols=80):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

        def child_setup():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen([str(spacelib.bin_dir() / "space"), *args], stdin=slave, stdout=slave,
                                     stderr=slave, env=spacelib.cli_env(sock), preexec_fn=child_setup,
                                     close_fds=True)
        os.close(slave)
        self.buf = b""

    def send(self, data: bytes):
        os.write(self.master, data)

    def expect(self, needle: bytes, timeout: float = 30) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"did not see {needle!r} within {timeout}s; got {self.buf[-2000:]!r}")
            r, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if r:
                try:
                    chunk = os.read(self.master, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    if needle not in self.buf:
                        raise AssertionError(f"terminal closed before {needle!r}; got {self.buf[-2000:]!r}")
                    break
                self.buf += chunk
        return self.buf

    def resize(self, rows, cols):
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        # The kernel signals the terminal's foreground process group; be explicit for robustness.
        try:
            os.kill(self.proc.pid, signal.SIGWINCH)
        except ProcessLookupError:
            pass

    def drain_until_exit(self, timeout=30) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            r, _, _ = select.select([self.master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(self.master, 65536)
                    self.buf += chunk
                except OSError:
                    pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"space shell did not exit; output {self.buf[-2000:]!r}")
        return self.proc.returncode

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


@pytest.fixture
def shell(daemon):
    opened = []

    def open_(*args, **kw):
        p = PtyCli(daemon.sock, "shell", *args, **kw)
        opened.append(p)
        return p

    yield open_
    for p in opened:
        p.close()


def test_shell_runs_commands(shell, sandbox):
    t = shell(sandbox)
    t.send(b"echo hello-$((6*7))\n")
    t.expect(b"hello-42")
    t.send(b"tty; echo tty-rc=$?\n")
    t.expect(b"tty-rc=0")
    assert b"/dev/pts/" in t.buf, t.buf[-500:]
    t.send(b"exit\n")
    assert t.drain_until_exit() == 0


def test_shell_exit_status_propagates(shell, sandbox):
    t = shell(sandbox)
    t.send(b"echo ready-$((1+1))\n")
    t.expect(b"ready-2")
    t.send(b"exit 5\n")
    assert t.drain_until_exit() == 5


def test_shell_initial_size_and_resize(shell, sandbox):
    t = shell(sandbox, rows=30, cols=100)
    t.send(b"stty size; echo size-$((1+1))-done\n")
    t.expect(b"size-2-done", timeout=30)
    assert b"30 100" in t.buf, t.buf[-500:]
    t.resize(50, 132)
    # The resize travels asynchronously; ask until the shell sees it (no timing assertion).
    deadline = time.monotonic() + 20
    while b"50 132" not in t.buf:
        assert time.monotonic() < deadline, f"resize never arrived: {t.buf[-500:]!r}"
        t.send(b"stty size\n")
        try:
            t.expect(b"50 132", timeout=1)
        except AssertionError:
            pass
    t.send(b"exit\n")
    t.drain_until_exit()


def test_shell_ctrl_c_reaches_the_sandbox(shell, client, sandbox):
    t = shell(sandbox)
    t.send(b"sleep 1000\n")
    spacelib.wait_for(lambda: "sleep 1000" in client.sh(sandbox, "ps -o args").out, timeout=30,
                      what="sleep 1000 to run under the shell")
    t.send(b"\x03")
    t.send(b"echo marker-$((3*3))\n")  # only runs once the sleep was interrupted
    t.expect(b"marker-9", timeout=30)
    t.send(b"exit\n")
    t.drain_until_exit()


def test_pty_websocket_requires_upgrade(client, sandbox):
    status, _, body = client.raw("GET", f"/v1/sandboxes/{sandbox}/pty?cmd=/bin/sh")
    assert status in (400, 426), (status, body[:200])
    status, _, body = client.raw("GET", "/v1/sandboxes/sb-000000000000/pty?cmd=/bin/sh")
    assert status in (400, 404, 426), (status, body[:200])
