"""pytest fixtures shared by tests/integration and tests/security (both conftest.py files star-import
this module). The session daemon is a process-wide singleton, so that running both directories in one
pytest session starts exactly one spaced, and it is stopped (with its leak check) when the last user of
it is torn down."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lib import spacelib
from lib.spacelib import Client, Daemon

POOL_SIZE = 2
PYTHON_ROOTFS = Path(os.environ.get("SPACE_PYTHON_ROOTFS", "/var/cache/space/rootfs-python"))

_session = {"daemon": None, "users": 0, "rootfs": None, "error": None, "baseline_uid_procs": None}
_current_daemons: list[Daemon] = []  # every live daemon of this process, for log tails on failure


def _skip_if_no_binaries():
    missing = spacelib.missing_binaries()
    if missing:
        reason = (f"SPACE binaries missing in {spacelib.bin_dir()}: {', '.join(missing)} "
                  f"(build failure? run scripts/build, or set SPACE_BIN_DIR)")
        print("\n" + reason, file=sys.stderr)
        pytest.skip(reason)
    if os.geteuid() != 0:
        pytest.skip("the integration suite needs root (spaced creates namespaces, cgroups and mounts)")


def busybox_rootfs_dir() -> Path:
    if _session["rootfs"] is None:
        d = Path(tempfile.mkdtemp(prefix="space-test-rootfs-", dir="/var/tmp"))
        atexit.register(shutil.rmtree, d, True)  # also when only own_daemon tests ran
        spacelib.make_busybox_rootfs(d / "rootfs")
        _session["rootfs"] = d
    return _session["rootfs"] / "rootfs"


def start_daemon_with_busybox(config=None, extra_args=(), build_template=True) -> Daemon:
    d = Daemon(config=config, extra_args=extra_args)
    _current_daemons.append(d)
    try:
        d.start()
        if build_template:
            d.client.build_template("busybox", str(busybox_rootfs_dir()))
    except Exception:
        print(f"\n--- spaced log ({d.log_path}):\n{d.log_tail()}", file=sys.stderr)
        d.stop(signal.SIGKILL) if d.alive() else None
        d.force_cleanup()
        _current_daemons.remove(d)
        raise
    return d


def leak_report(d: Daemon, pool_ids: set[str], baseline_uid_procs: set[tuple[int, str]]) -> list[str]:
    """Everything of this daemon's sandboxes that still exists on the host, except the pool's (polled for a
    few seconds: killed tasks take a moment to leave the kernel)."""
    deadline = time.monotonic() + 5
    while True:
        problems = _leak_report_now(d, pool_ids, baseline_uid_procs)
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(0.2)


def _leak_report_now(d: Daemon, pool_ids: set[str], baseline_uid_procs: set[tuple[int, str]]) -> list[str]:
    problems = []
    seen = d.seen_ids()
    ours = seen - pool_ids
    for sid in sorted(ours):
        for c in spacelib.cgroup_dirs(sid):
            problems.append(f"cgroup left behind: {c}")
        for p in spacelib.sandbox_pids(sid):
            problems.append(f"process left behind: pid {p} ({spacelib.read(f'/proc/{p}/comm').strip()}) of {sid}")
        for m in spacelib.mounts_naming(sid, ["self"] + ([d.pid] if d.alive() else [])):
            problems.append(f"mount left behind: {m}")
        for lo in spacelib.loop_devices_naming(sid):
            problems.append(f"loop device left behind: {lo}")
    for pid, uid in spacelib.processes_in_uid_range().items():
        if (pid, spacelib.pid_start_time(pid)) in baseline_uid_procs:
            continue
        ids = spacelib.pid_cgroup_ids(pid)
        if ids and ids <= pool_ids:
            continue
        if ids and not (ids & seen):
            continue  # another spaced's sandbox on this machine
        problems.append(f"process in the sandbox uid range left behind: pid {pid} uid {uid:#x} "
                        f"comm={spacelib.read(f'/proc/{pid}/comm').strip()} cgroups={sorted(ids)}")
    for mp in spacelib.all_mountpoints():
        if not mp.startswith(str(d.state) + "/"):
            continue
        if mp == str(d.state / "sandboxes") or any(pid in mp for pid in pool_ids):
            continue
        if mp == str(d.state / "volume"):
            continue  # the layer volume (snapshots) stays mounted across restarts; force_cleanup unmounts it
        problems.append(f"mount under the state dir left behind: {mp}")
    return problems


def baseline_uid_procs() -> set[tuple[int, str]]:
    return {(p, spacelib.pid_start_time(p)) for p in spacelib.processes_in_uid_range()}


def stop_and_check(d: Daemon, baseline: set, expected_pool: int) -> list[str]:
    problems = []
    if not d.alive():
        problems.append(f"spaced died during the session (exit {d.proc.returncode})")
    else:
        problems += [f"delete at teardown failed: {e}" for e in d.delete_all_sandboxes()]
    # The pool may be starting a sandbox right now; give it a moment to settle.
    time.sleep(1.0)
    pool_ids = set()
    if d.alive():
        listed = {sb["id"] for sb in d.client.list()}
        if listed:
            problems.append(f"sandboxes still listed after deleting all: {sorted(listed)}")
        try:
            rc = d.stop(signal.SIGTERM, timeout=30)
            if rc not in (0, -signal.SIGTERM):
                problems.append(f"spaced exited with {rc} on SIGTERM")
        except AssertionError as e:
            problems.append(str(e))
    # What is left in the state dir and was never handed out through the API is the pool's.
    pool_ids = d.sandbox_dir_ids() - d.client.created
    if len(pool_ids) > expected_pool:
        problems.append(f"{len(pool_ids)} sandbox directories remain, but the pool holds at most "
                        f"{expected_pool}: {sorted(pool_ids)}")
    problems += leak_report(d, pool_ids, baseline)
    return problems


def _release_session_daemon():
    _session["users"] -= 1
    if _session["users"] > 0 or _session["daemon"] is None:
        return
    d = _session["daemon"]
    _session["daemon"] = None
    try:
        problems = stop_and_check(d, _session["baseline_uid_procs"], POOL_SIZE)
        if problems:
            print(f"\n--- spaced log tail:\n{d.log_tail()}", file=sys.stderr)
            raise AssertionError("leaks or errors at daemon teardown:\n  " + "\n  ".join(problems))
    finally:
        if d.alive():
            d.stop(signal.SIGKILL)
        d.force_cleanup()
        if d in _current_daemons:
            _current_daemons.remove(d)
        if _session["rootfs"] is not None:
            shutil.rmtree(_session["rootfs"], ignore_errors=True)
            _session["rootfs"] = None


@pytest.fixture(scope="session")
def binaries():
    _skip_if_no_binaries()
    return spacelib.bin_dir()


@pytest.fixture(scope="session")
def daemon():
    _skip_if_no_binaries()
    if _session["error"]:
        pytest.fail(f"the session daemon failed to start earlier: {_session['error']}")
    if _session["daemon"] is None:
        _session["baseline_uid_procs"] = baseline_uid_procs()
        try:
            # VMs are restored fresh for each test (no VM pool: the teardown's pool accounting stays the
            # jail pool's); the VM pool has its own tests with their own daemon.
            _session["daemon"] = start_daemon_with_busybox(
                {"pool_size": POOL_SIZE, "default_template": "busybox", "pool_templates": "busybox",
                 "vm_pool_size": 0})
        except Exception as e:  # noqa: BLE001
            _session["error"] = str(e)
            raise
    _session["users"] += 1
    yield _session["daemon"]
    _release_session_daemon()


@pytest.fixture(scope="session")
def client(daemon) -> Client:
    return daemon.client


@pytest.fixture
def make_sandbox(client):
    """Factory: make_sandbox(**create_args) -> sandbox dict; every sandbox is deleted after the test."""
    made = []

    def make(**kw):
        kw.setdefault("template", "busybox")
        sb = client.create(**kw)
        made.append(sb["id"])
        return sb

    yield make
    for sid in made:
        try:
            client.delete(sid, missing_ok=True)
        except Exception as e:  # noqa: BLE001
            print(f"cleanup: delete {sid}: {e}", file=sys.stderr)


@pytest.fixture
def sandbox(make_sandbox) -> str:
    return make_sandbox()["id"]


# Isolation tiers the tier-independent tests (exec, files, processes, PTY) run on. A test module opts in
# by defining its `sandbox` fixture with params=TIERS and returning tier_sandbox(...).
TIERS = ["jail", "vm"]


def vm_unavailable_reason(client) -> str | None:
    node = client.call("GET", "/v1/node")
    vm = node.get("isolation", {}).get("vm", {})
    if vm.get("available"):
        return None
    return f"the vm tier is not available on this node: {vm.get('reason', 'unknown')} " \
           f"(scripts/vm/build-guest makes the guest)"


@pytest.fixture(scope="module")
def vm(client):
    """The busybox template's VM artifacts, made once per module (a boot under emulation); skips with the
    reason where the vm tier is unavailable."""
    reason = vm_unavailable_reason(client)
    if reason:
        print("\n" + reason)
        pytest.skip(reason)
    return client.call("POST", "/v1/templates/busybox/warm", {})


@pytest.fixture
def make_vm(make_sandbox, vm):
    def make(**kw):
        return make_sandbox(isolation="vm", **kw)["id"]
    return make


def own_vm_daemon(own_daemon, **config):
    """A daemon of the test's own with no pools and busybox warmed for VMs; skips where the tier is missing."""
    d = own_daemon({"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox", **config})
    reason = vm_unavailable_reason(d.client)
    if reason:
        pytest.skip(reason)
    d.client.call("POST", "/v1/templates/busybox/warm", {})
    return d


def tier_sandbox(tier: str, client, make_sandbox) -> str:
    if tier == "vm":
        reason = vm_unavailable_reason(client)
        if reason:
            print("\n" + reason, file=sys.stderr)
            pytest.skip(reason)
    return make_sandbox(isolation=tier)["id"]


@pytest.fixture(scope="session")
def python_template(client):
    if not (PYTHON_ROOTFS / "usr" / "bin" / "python3").exists():
        reason = f"no python rootfs at {PYTHON_ROOTFS} (scripts/test prepares it with debootstrap)"
        print("\n" + reason, file=sys.stderr)
        pytest.skip(reason)
    if not any(t.get("name") == "python" for t in client.templates()):
        client.build_template("python", str(PYTHON_ROOTFS))
    return "python"


@pytest.fixture
def own_daemon():
    """Factory for extra spaced instances (own state dir) that a test may kill and restart; each is
    stopped, checked for leaks and removed at teardown."""
    _skip_if_no_binaries()
    started: list[tuple[Daemon, set]] = []

    def start(config=None, extra_args=(), build_template=True) -> Daemon:
        baseline = baseline_uid_procs()
        d = start_daemon_with_busybox(config if config is not None else {"pool_size": 0, "vm_pool_size": 0,
                                                                       "default_template": "busybox"},
                                      extra_args, build_template)
        started.append((d, baseline))
        return d

    yield start
    problems = []
    for d, baseline in started:
        try:
            if d.alive():
                pool = (int(d.config.get("pool_size", 0)) + int(d.config.get("vm_pool_size", 0))) * \
                    max(1, len(str(d.config.get("pool_templates", "x")).split(",")))
                problems += stop_and_check(d, baseline, pool)
        finally:
            if d.alive():
                d.stop(signal.SIGKILL)
            d.force_cleanup()
            if d in _current_daemons:
                _current_daemons.remove(d)
    if problems:
        raise AssertionError("own daemon teardown:\n  " + "\n  ".join(problems))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and _current_daemons:
        for d in _current_daemons:
            report.sections.append((f"spaced log tail ({d.log_path})", d.log_tail(60)))
