"""TTLs a user can live with: `space ttl` shows, extends and shortens one; a paused sandbox's TTL stands
still (a node bounds the pause with max_paused_s); a fork gets its parent's TTL afresh or its own."""

import json
import time

import pytest

import spacelib


def cli(d, *args):
    r = spacelib.run_cli(d.sock, *args)
    return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")


def request(client, method, path, body=None):
    status, _, data = client.raw(method, path, body)
    return status, (json.loads(data) if data else None)


def wait_gone(client, sid, within_s=30):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        status, _ = request(client, "GET", f"/v1/sandboxes/{sid}")
        if status == 404:
            return True
        time.sleep(0.2)
    return False


def test_space_ttl_shows_sets_extends_shortens_and_removes(daemon, make_sandbox):
    sid = make_sandbox()["id"]
    rc, out, err = cli(daemon, "ttl", sid)
    assert rc == 0, err
    assert out.strip() == f"{sid}: no TTL"

    rc, out, err = cli(daemon, "ttl", sid, "30m")
    assert rc == 0, err
    assert out.startswith(f"{sid}: 29m") or out.startswith(f"{sid}: 30m"), out
    sb = daemon.client.get(sid)
    assert 1790 <= sb["ttl_remaining_s"] <= 1800 and sb["ttl_s"] == 1800, sb
    assert sb["expires_at"]

    rc, out, err = cli(daemon, "--json", "ttl", sid, "+10m")
    assert rc == 0, err
    view = json.loads(out)
    assert 2390 <= view["ttl_remaining_s"] <= 2400, view

    rc, out, err = cli(daemon, "ttl", sid, "5m")  # shorter than what is left: a TTL is set, not added
    assert rc == 0, err
    assert 290 <= daemon.client.get(sid)["ttl_remaining_s"] <= 300

    rc, out, err = cli(daemon, "ttl", sid, "none")
    assert rc == 0, err
    sb = daemon.client.get(sid)
    assert "ttl_remaining_s" not in sb and sb["expires_at"] is None, sb


def test_ttl_errors_name_what_to_change(daemon, make_sandbox):
    sid = make_sandbox()["id"]
    rc, _, err = cli(daemon, "ttl", sid, "+5m")
    assert rc != 0 and "no TTL to add to" in err, err
    rc, _, err = cli(daemon, "ttl", sid, "20d")
    assert rc != 0 and "max_ttl_s" in err, err
    rc, _, err = cli(daemon, "ttl", sid, "soon")
    assert rc != 0 and "DURATION" in err, err
    status, body = request(daemon.client, "POST", f"/v1/sandboxes/{sid}/ttl", {"ttl_s": 60, "add_s": 60})
    assert status == 400 and "exactly one" in body["error"]["message"], body
    status, body = request(daemon.client, "POST", "/v1/sandboxes/sb-000000000000/ttl", {"ttl_s": 60})
    assert status == 404, body


def test_a_paused_sandboxs_ttl_stands_still_and_runs_on_after_resume(daemon, make_sandbox):
    sid = make_sandbox(ttl_s=3)["id"]
    daemon.client.call("POST", f"/v1/sandboxes/{sid}/pause", {})
    paused = daemon.client.get(sid)
    assert paused["expires_at"] is None, paused
    left = paused["ttl_remaining_s"]
    assert 1 <= left <= 3, paused
    time.sleep(4.5)  # past the TTL, and the reaper looks every second
    still = daemon.client.get(sid)
    assert still["state"] == "paused" and still["ttl_remaining_s"] == left, still
    rc, out, _ = cli(daemon, "ttl", sid)
    assert "counting from its resume (paused)" in out, out

    # Set while paused: the new TTL counts from the resume too.
    daemon.client.call("POST", f"/v1/sandboxes/{sid}/ttl", {"ttl_s": 2})
    assert daemon.client.get(sid)["ttl_remaining_s"] == 2
    daemon.client.call("POST", f"/v1/sandboxes/{sid}/resume", {})
    assert daemon.client.get(sid)["expires_at"] is not None
    assert wait_gone(daemon.client, sid), "a resumed sandbox's TTL ran on and the reaper deleted it"


def test_a_node_deletes_sandboxes_paused_longer_than_max_paused_s(own_daemon):
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox", "max_paused_s": 2})
    sid = d.client.create(template="busybox")["id"]
    kept = d.client.create(template="busybox")["id"]
    d.client.call("POST", f"/v1/sandboxes/{sid}/pause", {})
    assert wait_gone(d.client, sid), "paused past max_paused_s, the sandbox was not deleted"
    assert d.client.get(kept)["state"] == "running"
    assert "space_sandbox_paused_reaped_total 1" in d.client.metrics()
    d.client.delete(kept)


def test_forks_get_the_parents_ttl_afresh_or_their_own(daemon, make_sandbox):
    parent = make_sandbox(ttl_s=3600)["id"]
    time.sleep(1.2)
    status, out = request(daemon.client, "POST", f"/v1/sandboxes/{parent}/fork", {"count": 1})
    assert status == 201, out
    child = out["sandboxes"][0]
    daemon.client.created.add(child["id"])
    try:
        assert child["ttl_s"] == 3600 and child["ttl_remaining_s"] >= 3599, child
        rc, o, err = cli(daemon, "fork", parent, "--ttl", "10m")
        assert rc == 0, err
        other = o.strip()
        daemon.client.created.add(other)
        sb = daemon.client.get(other)
        assert sb["ttl_s"] == 600 and 590 <= sb["ttl_remaining_s"] <= 600, sb
        daemon.client.delete(other)
    finally:
        daemon.client.delete(child["id"], missing_ok=True)


if __name__ == "__main__":
    pytest.main([__file__])
