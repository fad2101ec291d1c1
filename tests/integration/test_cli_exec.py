"""`space exec`, `run`, `shell` as docker/kubectl users expect them: flags before `--`, Ctrl-C forwarded,
the process killed when the client goes away, stdin streamed, durations, --version. The real `space`
binary against a real daemon; process state checked from the host's /proc."""

import os
import select
import signal
import subprocess
import time
import uuid

import pytest

import spacelib


def out(r):
    return r.stdout.decode(errors="replace")


def err(r):
    return r.stderr.decode(errors="replace")


@pytest.fixture
def cli(daemon):
    def run(*args, **kw):
        return spacelib.run_cli(daemon.sock, *args, **kw)
    return run


@pytest.fixture
def spawn(daemon):
    """Starts `space ARGS...` as a child with pipes; killed at teardown if still running."""
    procs = []

    def start(*args, stdin=subprocess.DEVNULL):
        p = subprocess.Popen([str(spacelib.bin_dir() / "space"), *map(str, args)], env=spacelib.cli_env(daemon.sock),
                             stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def read_until(stream, needle: bytes, timeout: float = 60) -> bytes:
    """Reads a child's pipe until needle shows up (a bound on hanging, not a measurement)."""
    buf = b""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    while needle not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"did not see {needle!r} within {timeout}s; got {buf[-2000:]!r}")
        r, _, _ = select.select([fd], [], [], min(left, 0.5))
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"output ended before {needle!r}; got {buf[-2000:]!r}")
            buf += chunk
    return buf


def marker() -> str:
    """A sleep argument no other process on the host has: its presence in /proc is our process."""
    return str(100000 + uuid.uuid4().int % 800000)


def host_pids_running(arg: str) -> list[int]:
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if len(argv) >= 2 and argv[0].endswith(b"sleep") and argv[1] == arg.encode():
            found.append(int(d))
    return found


def wait_gone(arg: str, what: str):
    spacelib.wait_for(lambda: not host_pids_running(arg), timeout=30, what=what)


# --- flags before `--` (one value per occurrence, `--` ends the options)

def test_env_right_before_double_dash(cli, sandbox):
    r = cli("exec", sandbox, "-e", "A=1", "--", "sh", "-c", "echo $A")
    assert r.returncode == 0, err(r)
    assert out(r) == "1\n"
    r = cli("exec", "-e", "A=1", sandbox, "-e", "B=2", "--", "env")
    assert r.returncode == 0, err(r)
    assert "A=1\n" in out(r) and "B=2\n" in out(r), out(r)


def test_run_label_right_before_double_dash(cli, client):
    before = {s["id"] for s in client.list()}
    r = cli("run", "--template", "busybox", "-l", "k=v", "-e", "A=2", "--", "sh", "-c", "echo hi $A")
    assert r.returncode == 0, err(r)
    assert out(r) == "hi 2\n"
    assert not ({s["id"] for s in client.list()} - before)


def test_start_env_right_before_double_dash(cli, client, sandbox):
    r = cli("start", sandbox, "-e", "A=3", "--", "sh", "-c", "echo bg $A")
    assert r.returncode == 0, err(r)
    proc = out(r).strip()
    logs = spacelib.wait_for(lambda: (lambda x: x if "bg 3" in out(x) else None)(cli("logs", sandbox, proc)),
                             timeout=30, what="background output")
    assert out(logs) == "bg 3\n"


# --- signals and the client going away

def test_ctrl_c_reaches_the_process_and_exits_130(spawn, sandbox):
    m = marker()
    p = spawn("exec", sandbox, "--", "sh", "-c", f"echo ready; exec sleep {m}")
    read_until(p.stdout, b"ready")
    assert host_pids_running(m), "the command should be running"
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=60) == 130, p.stderr.read()
    assert p.stderr.read() == b""
    wait_gone(m, "the interrupted process to be gone")


def test_signal_is_forwarded_to_a_trap(spawn, sandbox):
    m = marker()
    p = spawn("exec", sandbox, "--", "sh", "-c",
              f"trap 'echo trapped TERM; exit 7' TERM; sleep {m} & echo ready; wait")
    read_until(p.stdout, b"ready")
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    rest = p.stdout.read()
    assert b"trapped TERM" in rest, rest
    assert rc == 7, (rc, p.stderr.read())
    wait_gone(m, "the signalled group to be gone")


def test_second_ctrl_c_kills_a_process_that_ignores_the_first(spawn, sandbox):
    m = marker()
    p = spawn("exec", sandbox, "--", "sh", "-c", f"trap '' INT; echo ready; exec sleep {m}")
    read_until(p.stdout, b"ready")
    p.send_signal(signal.SIGINT)
    with pytest.raises(subprocess.TimeoutExpired):
        p.wait(timeout=2)  # ignored, so still running: not a measurement, the check below is what counts
    assert host_pids_running(m)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=60) == 128 + signal.SIGKILL
    wait_gone(m, "the force-killed process to be gone")


def test_client_killed_means_process_killed(spawn, sandbox):
    m = marker()
    p = spawn("exec", sandbox, "--", "sh", "-c", f"echo ready; sleep {m}; echo never")
    read_until(p.stdout, b"ready")
    assert host_pids_running(m)
    p.kill()  # no signal forwarded, no goodbye: only the closed connection tells spaced
    p.wait()
    wait_gone(m, "spaced to kill the process of a client that went away")


def test_run_ctrl_c_is_quiet_130_and_cleans_up(spawn, client):
    before = {s["id"] for s in client.list()}
    m = marker()
    p = spawn("run", "--template", "busybox", "--", "sh", "-c", f"echo ready; exec sleep {m}")
    read_until(p.stdout, b"ready")
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=60) == 130
    assert p.stderr.read() == b"", "an interrupted run ends quietly"
    assert not ({s["id"] for s in client.list()} - before), "run deletes its sandbox"
    wait_gone(m, "the run's process to be gone")


# --- stdin streams as it arrives

def test_interactive_stdin_streams_line_by_line(spawn, sandbox):
    p = spawn("exec", "-i", sandbox, "--", "sh", "-c", 'while read l; do echo "got $l"; done; echo eof',
              stdin=subprocess.PIPE)
    p.stdin.write(b"one\n")
    p.stdin.flush()
    # Answered while stdin is still open: the old client sent nothing before EOF.
    read_until(p.stdout, b"got one\n")
    p.stdin.write(b"two\n")
    p.stdin.flush()
    read_until(p.stdout, b"got two\n")
    p.stdin.close()
    assert p.wait(timeout=60) == 0, p.stderr.read()
    assert p.stdout.read() == b"eof\n"


def test_interactive_stdin_larger_than_a_request_body(cli, sandbox):
    data = os.urandom(3 << 20)
    r = cli("exec", "-i", sandbox, "--", "sh", "-c", "cat | wc -c", input=data)
    assert r.returncode == 0, err(r)
    assert out(r).strip() == str(len(data))


# --- shell

def test_shell_missing_program_shows_the_daemons_message(cli, sandbox):
    # Input from a pipe: the program runs as `space exec -i` runs it, so a missing one is 127 as there.
    r = cli("shell", sandbox, "--cmd", "/no/such/program", input=b"")
    assert r.returncode == 127, (r.returncode, err(r))
    assert "handshake" not in err(r) and "HTTP 200" not in err(r), err(r)
    assert "/no/such/program" in err(r), err(r)


def test_shell_command_line_in_cmd_is_a_usage_error(cli, sandbox):
    r = cli("shell", sandbox, "--cmd", "sh -x")
    assert r.returncode == 2
    assert "-- sh -x" in err(r), err(r)


def test_shell_passes_arguments_after_double_dash(cli, sandbox):
    r = cli("shell", sandbox, "--", "sh", "-c", "echo pty-args-$((6*7)); exit 5")
    assert r.returncode == 5, err(r)
    assert "pty-args-42" in out(r), out(r)


def test_shell_runs_piped_input_and_ends_with_it(cli, sandbox):
    r = cli("shell", sandbox, input=b"echo piped-$((2+3)); exit\n", timeout=120)
    assert r.returncode == 0, err(r)
    assert "piped-5" in out(r), out(r)


def test_shell_ends_by_itself_when_piped_input_ends(cli, sandbox):
    # No exit line: the end of the input is the end of the shell, as with `kubectl exec -it` fed from a
    # pipe: the commands' output alone (no echo, no prompt), the shell's own status. Five times, because
    # an end of input that a terminal's line editor may miss would fail only now and then.
    for i in range(5):
        r = cli("shell", sandbox, input=b"echo one\necho two\n", timeout=60)
        assert r.returncode == 0, (i, r.returncode, err(r))
        assert out(r) == "one\ntwo\n", (i, out(r))
    r = cli("shell", sandbox, input=b"echo err >&2; false\n", timeout=60)
    assert r.returncode == 1 and err(r) == "err\n", (r.returncode, err(r))


# --- durations and their errors

def test_timeout_in_milliseconds(cli, sandbox):
    r = cli("exec", sandbox, "--timeout", "1500ms", "--", "sleep", "60")
    assert r.returncode == 124, err(r)


def test_duration_errors_name_the_flag(cli, sandbox):
    r = cli("exec", sandbox, "--timeout", "8d", "--", "true")
    assert r.returncode != 0
    assert "--timeout" in err(r) and "timeout_s" not in err(r), err(r)
    r = cli("create", "--template", "busybox", "--ttl", "10x")
    assert r.returncode != 0
    assert "--ttl" in err(r), err(r)
    r = cli("create", "--template", "busybox", "--ttl", "0.5s")
    assert r.returncode != 0
    assert "--ttl" in err(r) and "whole seconds" in err(r), err(r)


# --- version and bare invocation

def test_version_and_bare_help(binaries, cli):
    r = cli("--version")
    assert r.returncode == 0, err(r)
    assert out(r).startswith("space "), out(r)
    r = subprocess.run([str(spacelib.bin_dir() / "spaced"), "--version"], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().startswith("spaced "), r.stdout
    r = cli()
    assert r.returncode == 0, err(r)
    assert "exec" in out(r) and "run" in out(r), out(r)


def test_post_exec_client_gone_kills_a_quiet_process(client, sandbox):
    """The NDJSON exec too: a client that leaves while its process writes nothing takes it along."""
    m = marker()
    c, r = client.open("POST", f"/v1/sandboxes/{sandbox}/exec", {"cmd": ["sh", "-c", f"sleep {m}; echo never"]},
                       timeout=60)
    assert r.status == 200
    assert b'"started"' in r.readline()
    spacelib.wait_for(lambda: host_pids_running(m), timeout=30, what="the process to start")
    r.close()
    c.close()  # with the response closed too, the socket's descriptor really goes: the daemon sees a FIN
    wait_gone(m, "spaced to kill the process of a POST exec whose client went away")
