"""Foreground exec: output streams, exit status, signals, timeouts, stdin, env, cwd, user, streaming."""

import json

import pytest

from spacelib import ApiError
from spacefixtures import TIERS, tier_sandbox


# Every test here runs on both isolation tiers: the same agent and protocol serve the jail and the VM.
@pytest.fixture(params=TIERS)
def sandbox(request, client, make_sandbox) -> str:
    return tier_sandbox(request.param, client, make_sandbox)



def test_stdout_and_stderr_are_separate(client, sandbox):
    r = client.sh(sandbox, "echo out-1; echo err-1 >&2; echo out-2; echo err-2 >&2")
    assert r.exit_code == 0, r
    assert r.out == "out-1\nout-2\n"
    assert r.err == "err-1\nerr-2\n"
    assert r.pid and r.pid > 0
    assert r.events[0]["type"] == "started", r.events[:3]
    assert r.events[-1]["type"] == "exit", r.events[-3:]


def test_argv_form_is_not_shell_interpreted(client, sandbox):
    r = client.exec(sandbox, cmd=["echo", "$HOME", "a;b", "*"])
    assert r.exit_code == 0, r
    assert r.out == "$HOME a;b *\n"


def test_shell_field(client, sandbox):
    r = client.exec(sandbox, shell="x=6; echo $((x*7)) | tr 4 f")
    assert r.exit_code == 0, r
    assert r.out == "f2\n"


@pytest.mark.parametrize("code", [0, 1, 7, 42, 255])
def test_exit_codes(client, sandbox, code):
    r = client.sh(sandbox, f"exit {code}")
    assert r.exit_code == code, r
    assert not r.signal
    assert not r.timed_out


def test_signal_death(client, sandbox):
    r = client.sh(sandbox, "echo before; kill -9 $$; echo after")
    assert r.signal == 9, r
    assert r.exit_code in (None, -1), r
    assert r.out == "before\n"


def test_sigterm_death(client, sandbox):
    r = client.sh(sandbox, "kill -TERM $$")
    assert r.signal == 15, r


def test_timeout(client, sandbox):
    r = client.sh(sandbox, "echo started; sleep 60; echo never", timeout_s=1)
    assert r.timed_out is True, r
    assert r.out == "started\n"
    assert r.exit_code != 0


def test_timeout_kills_the_process_group(client, sandbox):
    r = client.sh(sandbox, "sleep 600 & sleep 601 & wait", timeout_s=1)
    assert r.timed_out, r
    ps = client.sh(sandbox, "ps -o pid,args | grep -v grep | grep -c 'sleep 60[01]' || true")
    assert ps.out.strip() == "0", ps


def test_stdin(client, sandbox):
    r = client.exec(sandbox, cmd=["cat"], stdin="line one\nline two\n")
    assert r.exit_code == 0, r
    assert r.out == "line one\nline two\n"
    r = client.exec(sandbox, cmd=["wc", "-l"], stdin="a\nb\nc\n")
    assert r.out.strip() == "3"


def test_no_stdin_means_eof(client, sandbox):
    r = client.exec(sandbox, cmd=["cat"], timeout_s=20)
    assert not r.timed_out, "cat without stdin must see EOF, not hang"
    assert r.exit_code == 0 and r.out == ""


def test_env(client, sandbox):
    r = client.sh(sandbox, 'echo "$FOO|$BAR"', env={"FOO": "foo value", "BAR": "x=y"})
    assert r.exit_code == 0, r
    assert r.out == "foo value|x=y\n"
    r = client.sh(sandbox, 'echo "[$FOO]"')
    assert r.out == "[]\n", "env of one exec must not leak into the next"


def test_cwd(client, sandbox):
    client.sh(sandbox, "mkdir -p /tmp/work/dir")
    r = client.exec(sandbox, cmd=["pwd"], cwd="/tmp/work/dir")
    assert r.exit_code == 0, r
    assert r.out == "/tmp/work/dir\n"


def test_bad_cwd_is_an_error(client, sandbox):
    try:
        r = client.exec(sandbox, cmd=["pwd"], cwd="/does/not/exist")
    except ApiError as e:
        assert e.status in (400, 404), e
        return
    assert r.exit_code not in (0, None), r


def test_user(client, sandbox):
    r = client.exec(sandbox, cmd=["id", "-u"], user="user")
    assert r.exit_code == 0, r
    assert r.out.strip() == "1000"
    r = client.exec(sandbox, cmd=["id", "-u"], user="nobody")
    assert r.out.strip() == "65534", r
    r = client.exec(sandbox, cmd=["id", "-u"])
    assert r.out.strip() == "0", r


def test_user_cannot_write_root_files(client, sandbox):
    r = client.sh(sandbox, "echo x > /root/owned-by-user", user="user")
    assert r.exit_code != 0, r
    r = client.sh(sandbox, "test -e /root/owned-by-user && echo exists || echo absent")
    assert r.out.strip() == "absent"


def test_unknown_user(client, sandbox):
    try:
        r = client.exec(sandbox, cmd=["id"], user="no-such-user")
    except ApiError as e:
        assert e.status in (400, 404), e
        return
    assert r.exit_code not in (0, None), r


def test_command_not_found(client, sandbox):
    try:
        r = client.exec(sandbox, cmd=["/no/such/binary"])
    except ApiError as e:
        assert e.status in (400, 404), e
        return
    assert r.exit_code == 127 or r.exit_code not in (0, None), r


def test_large_output_is_complete(client, sandbox):
    r = client.sh(sandbox, "i=0; while [ $i -lt 20000 ]; do echo line-$i; i=$((i+1)); done")
    lines = r.out.splitlines()
    assert len(lines) == 20000, len(lines)
    assert lines[0] == "line-0" and lines[-1] == "line-19999"
    r = client.sh(sandbox, "head -c 8000000 /dev/zero")
    assert len(r.stdout) == 8000000 and r.stdout.count(b"\0") == 8000000


def test_binary_output_roundtrip(client, sandbox):
    r = client.sh(sandbox, "printf '\\000\\001\\377\\200abc'")
    assert r.stdout == b"\x00\x01\xff\x80abc", r.stdout


def test_streaming_without_timing(client, sandbox):
    """The first exec prints "ready", then waits for a file. We read "ready" from the still-open stream,
    create the file with a second exec, and only then can the first one finish."""
    flag = "/tmp/streaming-flag"
    client.sh(sandbox, f"rm -f {flag}")
    stream = client.exec_stream(sandbox, cmd=["/bin/sh", "-c",
                                              f"echo ready; while [ ! -e {flag} ]; do sleep 0.05; done; echo done"],
                                timeout_s=120)
    seen = b""
    for ev in stream:
        if ev["type"] == "stdout":
            seen += ev["bytes"]
            if b"ready\n" in seen:
                break
        assert ev["type"] != "exit", f"command ended before the file existed: {ev}"
    assert seen == b"ready\n"
    r = client.sh(sandbox, f"touch {flag}")
    assert r.exit_code == 0, r
    rest = b""
    exit_ev = None
    for ev in stream:
        if ev["type"] == "stdout":
            rest += ev["bytes"]
        if ev["type"] == "exit":
            exit_ev = ev
    assert rest == b"done\n"
    assert exit_ev and exit_ev["exit_code"] == 0, exit_ev


def test_concurrent_execs(client, sandbox):
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda i: client.sh(sandbox, f"echo n-{i}; exit {i}"), range(12)))
    for i, r in enumerate(results):
        assert r.exit_code == i and r.out == f"n-{i}\n", (i, r)


def test_exec_bad_bodies_are_400(client, sandbox):
    for body in (b"{", b"[]", json.dumps({}).encode(), json.dumps({"cmd": "echo"}).encode(),
                 json.dumps({"cmd": []}).encode(), json.dumps({"cmd": [1, 2]}).encode(),
                 json.dumps({"cmd": ["true"], "timeout_s": -1}).encode(),
                 json.dumps({"cmd": ["true"], "env": ["A=B"]}).encode(),
                 json.dumps({"cmd": ["true"], "shell": "true"}).encode()):
        status, _, resp = client.raw("POST", f"/v1/sandboxes/{sandbox}/exec", body,
                                     {"Content-Type": "application/json"})
        assert status == 400, (body, status, resp[:300])
        assert json.loads(resp)["error"]["code"] == "invalid_argument"
    assert client.sh(sandbox, "echo ok").out == "ok\n"


def test_exec_in_deleted_sandbox(client, make_sandbox):
    sid = make_sandbox()["id"]
    client.delete(sid)
    status, _, resp = client.raw("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    assert status == 404, (status, resp)


def test_python_template(client, python_template, make_sandbox):
    sid = make_sandbox(template=python_template)["id"]
    r = client.exec(sid, cmd=["python3", "-c", "import sys; print(6*7); print(sys.version_info[0])"])
    assert r.exit_code == 0, r
    assert r.out == "42\n3\n"
    r = client.exec(sid, cmd=["curl", "--version"])
    assert r.exit_code == 0 and "curl" in r.out, r
