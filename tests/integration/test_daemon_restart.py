"""Crash-restart: spaced is killed with SIGKILL and started again on the same state dir; live sandboxes are
reattached, and a sandbox whose agent dies afterwards is reported failed. Runs its own daemon."""

import os
import signal

import spacelib
from spacelib import ApiError, Daemon, wait_for


def test_kill9_restart_reattaches_then_agent_death_is_failed(own_daemon):
    d = own_daemon()
    c = d.client
    sb = c.create(template="busybox", labels={"test": "restart"})
    sid = sb["id"]
    bg = c.start_process(sid, cmd=["sleep", "1000"])
    c.upload(sid, "/root/persist.txt", b"survives restart\n")
    c.sh(sid, "echo made-inside > /tmp/inside.txt")
    agent_before = spacelib.agent_host_pid(sid)
    assert agent_before, f"no agent process found on the host for {sid}"

    d.kill9()
    # The sandbox itself does not depend on spaced being alive.
    assert spacelib.pid_start_time(agent_before) is not None, "the agent died with spaced"

    d2 = Daemon(state_dir=d.state, config=d.config, extra_args=d.extra_args)
    d.proc = d2.start().proc  # the fixture now stops and checks the new process
    c2 = d2.client
    c2.created = c.created

    listed = {s["id"]: s for s in c2.list()}
    assert sid in listed, listed
    assert listed[sid]["state"] == "running", listed[sid]
    assert c2.download(sid, "/root/persist.txt") == b"survives restart\n"
    r = c2.sh(sid, "cat /tmp/inside.txt")
    assert r.out == "made-inside\n", r
    procs = {p["id"]: p for p in c2.processes(sid)}
    assert bg["id"] in procs and procs[bg["id"]]["running"] is True, procs
    assert spacelib.agent_host_pid(sid) == agent_before, "the agent was restarted, not reattached"

    # Now the agent dies behind spaced's back.
    fp = spacelib.footprint(sid, d.state, d.proc.pid)
    os.kill(agent_before, signal.SIGKILL)

    def failed():
        try:
            s = c2.get(sid)
        except ApiError:
            return None
        return s if s["state"] == "failed" else None

    s = wait_for(failed, timeout=20, interval=0.3, what=f"{sid} to be reported failed after its agent was killed")
    assert s.get("error"), s
    status, _, body = c2.raw("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": ["true"]})
    assert status in (409, 503), (status, body)
    assert {x["id"] for x in c2.list(state="failed")} >= {sid}

    c2.delete(sid)
    try:
        c2.get(sid)
        raise AssertionError("deleted sandbox still answers")
    except ApiError as e:
        assert e.status == 404
    left = fp.remaining(d.proc.pid)
    assert not left, left
    assert c2.healthy()


def test_restart_cleans_sandboxes_that_died_while_down(own_daemon):
    d = own_daemon()
    sid = d.client.create(template="busybox")["id"]
    fp = spacelib.footprint(sid, d.state, d.proc.pid)
    agent = spacelib.agent_host_pid(sid)
    assert agent
    d.kill9()
    os.kill(agent, signal.SIGKILL)
    wait_for(lambda: spacelib.pid_start_time(agent) is None, timeout=10, what="agent to die")

    d2 = Daemon(state_dir=d.state, config=d.config, extra_args=d.extra_args)
    d.proc = d2.start().proc
    d2.client.created = d.client.created
    s = d2.client.get(sid)
    assert s["state"] == "failed", s
    d2.client.delete(sid)
    assert not fp.remaining(d.proc.pid), fp.remaining(d.proc.pid)


def test_sigterm_is_clean_and_restart_keeps_sandboxes(own_daemon):
    d = own_daemon()
    sid = d.client.create(template="busybox")["id"]
    d.client.sh(sid, "echo keep > /root/k")
    assert d.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    d2 = Daemon(state_dir=d.state, config=d.config, extra_args=d.extra_args)
    d.proc = d2.start().proc
    d2.client.created = d.client.created
    assert d2.client.get(sid)["state"] == "running"
    assert d2.client.sh(sid, "cat /root/k").out == "keep\n"
    d2.client.delete(sid)
