"""Background processes: start several, list, read logs (drained and followed), signal."""

import spacelib
from spacelib import ApiError, wait_for
import pytest
from spacefixtures import TIERS, tier_sandbox


# Every test here runs on both isolation tiers: the same agent and protocol serve the jail and the VM.
@pytest.fixture(params=TIERS)
def sandbox(request, client, make_sandbox) -> str:
    return tier_sandbox(request.param, client, make_sandbox)



def proc_key(p):
    return p["id"]


def test_many_background_processes(client, sandbox):
    started = []
    for i in range(6):
        p = client.start_process(sandbox, cmd=["/bin/sh", "-c", f"echo proc-{i}; exec sleep 1000"])
        assert p["id"] and p["pid"] > 0, p
        assert p.get("running", True) is True
        started.append(p)
    assert len({p["id"] for p in started}) == 6
    assert len({p["pid"] for p in started}) == 6

    listed = {p["id"]: p for p in client.processes(sandbox)}
    for p in started:
        assert p["id"] in listed, (p, listed)
        assert listed[p["id"]]["running"] is True
        assert listed[p["id"]]["pid"] == p["pid"]

    # They really run inside the sandbox.
    # A process may not have reached `exec sleep` yet: wait until all six are sleeping.
    spacelib.wait_for(lambda: client.sh(sandbox, "ps -o args | grep -c '^sleep 1000' || true").out.strip() == "6",
                      timeout=20, what="six sleeping background processes")

    for i, p in enumerate(started):
        logs = wait_for(lambda: (lambda r: r if f"proc-{i}\n" in r.out else None)(client.logs(sandbox, p["id"])),
                        timeout=20, what=f"output of {p['id']}")
        assert logs.out == f"proc-{i}\n"

    for p in started:
        client.signal(sandbox, p["id"], "TERM")
    for p in started:
        def ended(pid=p["id"]):
            ps = {x["id"]: x for x in client.processes(sandbox)}
            return ps.get(pid) if ps.get(pid) and not ps[pid]["running"] else None
        info = wait_for(ended, timeout=20, what=f"{p['id']} to end after TERM")
        ex = info.get("exit") or info
        assert ex.get("signal") == 15, info


def test_logs_follow_until_exit(client, sandbox):
    p = client.start_process(sandbox, cmd=["/bin/sh", "-c",
                                           "echo first; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                                           "echo second; echo to-stderr >&2; exit 3"])
    stream = client.logs_stream(sandbox, p["id"], follow=True)
    seen = b""
    for ev in stream:
        assert ev["type"] != "exit", ev
        if ev["type"] == "stdout":
            seen += ev["bytes"]
            if b"first\n" in seen:
                break
    client.sh(sandbox, "touch /tmp/go")
    out, err, exit_ev = b"", b"", None
    for ev in stream:
        if ev["type"] == "stdout":
            out += ev["bytes"]
        elif ev["type"] == "stderr":
            err += ev["bytes"]
        elif ev["type"] == "exit":
            exit_ev = ev
    assert out == b"second\n"
    assert err == b"to-stderr\n"
    assert exit_ev and exit_ev.get("exit_code") == 3, exit_ev

    info = {x["id"]: x for x in client.processes(sandbox)}[p["id"]]
    assert info["running"] is False
    # Non-follow logs after the end return the whole buffered output.
    r = client.logs(sandbox, p["id"])
    assert r.out == "first\nsecond\n", r
    assert r.err == "to-stderr\n", r


def test_background_with_env_cwd_user(client, sandbox):
    p = client.start_process(sandbox, cmd=["/bin/sh", "-c", 'echo "$V $(pwd) $(id -u)"'],
                             env={"V": "vv"}, cwd="/tmp", user="user")
    r = wait_for(lambda: (lambda r: r if r.exit_code is not None or r.out else None)(
        client.logs(sandbox, p["id"], follow=True, timeout=60)), timeout=60, what="logs")
    assert r.out == "vv /tmp 1000\n", r


def test_signal_by_number_and_kill(client, sandbox):
    p = client.start_process(sandbox, cmd=["sleep", "1000"])
    client.signal(sandbox, p["id"], 9)
    info = wait_for(lambda: next((x for x in client.processes(sandbox) if x["id"] == p["id"] and not x["running"]),
                                 None), timeout=20, what="process to die")
    ex = info.get("exit") or info
    assert ex.get("signal") == 9, info


def test_process_errors(client, sandbox):
    for method, path, body in (("POST", f"/v1/sandboxes/{sandbox}/processes/p999/signal", {"signal": "TERM"}),
                               ("GET", f"/v1/sandboxes/{sandbox}/processes/p999/logs", None)):
        status, _, resp = client.raw(method, path, body)
        assert status == 404, (path, status, resp)
    p = client.start_process(sandbox, cmd=["sleep", "1000"])
    for bad in ("NOSUCHSIG", 0, 99999, -3, [1], {"x": 1}):
        status, _, resp = client.raw("POST", f"/v1/sandboxes/{sandbox}/processes/{p['id']}/signal", {"signal": bad})
        assert status == 400, (bad, status, resp)
    status, _, resp = client.raw("POST", f"/v1/sandboxes/{sandbox}/processes", {"cmd": "not-a-list"})
    assert status == 400, (status, resp)
    client.signal(sandbox, p["id"], "KILL")


def test_processes_gone_with_sandbox(client, make_sandbox):
    sid = make_sandbox()["id"]
    client.start_process(sid, cmd=["sleep", "1000"])
    client.delete(sid)
    try:
        client.processes(sid)
        raise AssertionError("processes of a deleted sandbox are still listed")
    except ApiError as e:
        assert e.status == 404
