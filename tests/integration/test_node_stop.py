"""Taking a node out of service: `space node drain`, a clean stop that leaves nothing once no sandbox is left,
and `spaced --cleanup`. Everything is checked from the host: mounts, loop devices, cgroup directories,
processes and the nftables table."""
import json
import os
import signal
import subprocess
import uuid

import spacelib
from spacelib import ApiError, CGROUP_ROOT, all_mountpoints, bin_dir


def node_footprint(d) -> list[str]:
    """What of the daemon's node-wide resources the host still shows."""
    state = str(d.state)
    left = [f"mount {m}" for m in all_mountpoints() if m == state or m.startswith(state + "/")]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    left += [f"loop {line.split(':')[0]}" for line in loops.splitlines() if state + "/" in line]
    parent = d.config["cgroup_parent"]
    roots = [CGROUP_ROOT] + [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]
    left += [f"cgroup {r / parent}" for r in roots if (r / parent).is_dir()]
    return left


def config_with_own_cgroup_parent(**extra) -> dict:
    return {"pool_size": 2, "vm_pool_size": 0, "default_template": "busybox", "pool_templates": "busybox",
            "cgroup_parent": f"space-test-stop-{uuid.uuid4().hex[:8]}", **extra}


def wait_pool(d, n: int):
    spacelib.wait_for(lambda: len(d.sandbox_dir_ids() - d.client.created) >= n, 30, what="the pool filled")


def test_drain_refuses_new_work_empties_the_pool_and_a_stop_then_leaves_nothing(own_daemon):
    d = own_daemon(config_with_own_cgroup_parent())
    wait_pool(d, 2)
    sid = d.client.create(template="busybox")["id"]
    assert node_footprint(d), "a running node shows its volume and cgroups"
    out = subprocess.run([str(bin_dir() / "space"), "node", "drain", "--json"], capture_output=True, text=True,
                         env={**os.environ, "SPACE_HOST": f"unix://{d.sock}"}, timeout=60)
    assert out.returncode == 0, out.stderr
    drained = json.loads(out.stdout)
    assert drained["draining"] is True and drained["pooled_removed"] >= 1, drained  # the create took one of the two
    assert drained["sandboxes_left"] == 1 and drained["sandboxes_removed"] == 0, drained
    try:
        d.client.create(template="busybox")
        raise AssertionError("a draining node created a sandbox")
    except ApiError as e:
        assert e.status == 503 and "draining" in str(e), e
    # The pool stays empty while draining.
    assert d.sandbox_dir_ids() - d.client.created == set()
    # With a sandbox left, a stop keeps what it runs on.
    d.client.call("POST", "/v1/node/drain", {"delete_sandboxes": True})
    assert d.client.list() == []
    assert d.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    assert node_footprint(d) == [], node_footprint(d)
    assert "released" in d.log_tail(5), d.log_tail(5)
    # Killed; the host's init reaps what a stopped spaced no longer can.
    spacelib.wait_for(lambda: not spacelib.sandbox_pids({sid}), 10, what=f"the processes of {sid} gone")


def test_a_stop_with_sandboxes_keeps_them_and_cleanup_then_removes_everything(own_daemon):
    d = own_daemon(config_with_own_cgroup_parent(pool_size=1))
    wait_pool(d, 1)
    sid = d.client.create(template="busybox")["id"]
    assert d.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    assert spacelib.sandbox_pids({sid}), "sandboxes outlive a stop of spaced by design"
    assert node_footprint(d), "a stop with sandboxes keeps their volume and cgroups"
    r = subprocess.run(d.argv() + ["--cleanup"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr, d.log_tail())
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["drain"]["sandboxes_removed"] == 1 and report["drain"]["pooled_removed"] >= 1, report
    assert report["drain"]["sandboxes_left"] == 0, report
    assert report["released"]["jail"] == "released", report
    assert node_footprint(d) == [], node_footprint(d)
    # Killed; the host's init reaps what a stopped spaced no longer can.
    spacelib.wait_for(lambda: not spacelib.sandbox_pids({sid}), 10, what=f"the processes of {sid} gone")
    # The state dir still works: the next start makes the volume anew and knows no sandbox.
    d.start()
    assert d.client.list() == []
    assert d.client.sh(d.client.create(template="busybox")["id"], "echo again").out == "again\n"


def test_drain_refuses_bad_input(own_daemon):
    d = own_daemon(config_with_own_cgroup_parent(pool_size=0))
    try:
        d.client.call("POST", "/v1/node/drain", {"delete_sandboxes": "yes"})
        raise AssertionError("a non-boolean delete_sandboxes was taken")
    except ApiError as e:
        assert e.status == 400, e
