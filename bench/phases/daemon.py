"""The bench's spaced: the test kit's daemon harness (tests/lib/daemon.py) with the bench's pools and
template, one keep-alive API connection, and a cleanup that leaves nothing of the run on the host."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from lib.client import ApiError, KeepAliveClient
from lib.daemon import Daemon, make_busybox_rootfs
from lib.host import descendants, mounts_under

from phases.common import LAST_LOG, POOL_SIZE, ROOT, TEMPLATE, VM_MEMORY_MIB, VM_POOL_SIZE, log


def kvm_state(node):
    """isolation.vm.kvm.state of a GET /v1/node answer, or None."""
    vm = ((node if isinstance(node, dict) else {}).get("isolation") or {}).get("vm") or {}
    kvm = vm.get("kvm")
    return kvm.get("state") if isinstance(kvm, dict) else None


class BenchDaemon(Daemon):
    def __init__(self, bin_dir, quick, egress=None, vm_guest_dir=None):
        config = {"pool_size": POOL_SIZE, "default_template": TEMPLATE, "pool_templates": TEMPLATE,
                  "vm_pool_size": VM_POOL_SIZE, "vm_default_memory_mib": VM_MEMORY_MIB}
        super().__init__(tempfile.mkdtemp(prefix="space-bench-", dir="/var/tmp"), config)
        if egress is None:
            self.config.pop("egress")  # spaced's own default ("auto"), not the tests' "off"
        else:
            self.config["egress"] = egress
        if vm_guest_dir:
            self.config["vm_kernel"] = os.path.join(vm_guest_dir, "vmlinuz")
            self.config["vm_initrd"] = os.path.join(vm_guest_dir, "initramfs.cpio")
        self.bin_dir = bin_dir
        self.quick = quick
        self.client = KeepAliveClient(self.sock)
        self.ids = set()
        self.extra_config = {}

    def argv(self):
        argv = super().argv()
        argv[0] = os.path.join(self.bin_dir, "spaced")
        return argv

    def start(self):
        spaced = os.path.join(self.bin_dir, "spaced")
        if not os.access(spaced, os.X_OK):
            raise RuntimeError(f"{spaced} not found (build first, or pass --bin-dir)")
        self.config.update(self.extra_config)
        log(f"starting {' '.join(self.argv())}")
        return super().start(timeout=30)

    def node(self, settle_s=30):
        """GET /v1/node; while its KVM probe is running (isolation.vm.kvm.state "probing": spaced proves KVM
        by running a guest under it after start-up), polled every 0.5 s for at most settle_s."""
        deadline = time.time() + settle_s
        while True:
            _, node = self.client.json("GET", "/v1/node")
            if kvm_state(node) != "probing" or time.time() >= deadline:
                return node
            time.sleep(0.5)

    def build_template(self, rootfs):
        t0 = time.perf_counter()
        status, _, data = self.client.raw(
            "POST", "/v1/templates", json.dumps({"name": TEMPLATE, "kind": "dir", "path": rootfs}).encode(),
            {"Content-Type": "application/json"})
        ms = (time.perf_counter() - t0) * 1000
        text = data.decode(errors="replace")
        if status not in (200, 201, 202):
            raise ApiError(status, data, "POST", "/v1/templates")
        # 200 NDJSON stream: {"type":"progress",...}* then {"type":"done"|"error",...}
        last = None
        for line in text.splitlines():
            line = line.strip()
            if line:
                try:
                    last = json.loads(line)
                except ValueError:
                    pass
        if isinstance(last, dict) and last.get("type") == "error":
            raise ApiError(500, json.dumps(last).encode(), "POST", "/v1/templates (build failed)")
        return ms

    def sandbox_ids(self):
        """Every sandbox with a directory in the state dir: handed out or pooled."""
        return self.sandbox_dir_ids()

    def pool_ready(self, m=None):
        m = m if m is not None else self.client.metrics()
        return int(m.get(f'space_pool_ready{{template="{TEMPLATE}"}}', 0))

    def pool_failures(self):
        try:
            with open(self.log_path, "rb") as f:
                lines = [ln.decode(errors="replace") for ln in f.read().splitlines() if b"pool: start sandbox" in ln]
        except OSError:
            return 0, ""
        return len(lines), (lines[-1] if lines else "")

    def wait_pool(self, want, timeout, fail_after=None):
        """Polls /metrics until space_pool_ready >= want; None on timeout. Raises when spaced died or,
        with fail_after, when the pool logged that many start failures while still short."""
        deadline = time.time() + timeout
        while True:
            m = self.client.metrics()
            if self.pool_ready(m) >= want:
                return m
            if self.proc.poll() is not None:
                raise RuntimeError(f"spaced died; log:\n{self.log_tail(10)}")
            if fail_after:
                n, last = self.pool_failures()
                if n >= fail_after:
                    raise RuntimeError(f"pool cannot start sandboxes ({n} failures); last: {last}")
            if time.time() > deadline:
                return None
            time.sleep(0.02)

    def create(self, spec):
        body = self.client.create(spec)
        self.ids.add(body["id"])
        return body

    def delete(self, sid):
        self.client.delete(sid)
        self.ids.discard(sid)

    def stop(self):
        """Deletes every sandbox, stops spaced (SIGTERM), unmounts and removes the state dir."""
        state = str(self.state)
        if self.client and self.proc and self.proc.poll() is None:
            try:
                _, lst = self.client.json("GET", "/v1/sandboxes")
                items = lst.get("sandboxes", lst.get("items", [])) if isinstance(lst, dict) else (lst or [])
                for sb in items:
                    if isinstance(sb, dict) and "id" in sb:
                        self.ids.add(sb["id"])
            except Exception as e:  # noqa: BLE001
                log(f"cleanup: list sandboxes: {e}")
            for sid in list(self.ids):
                try:
                    self.delete(sid)
                except Exception as e:  # noqa: BLE001
                    log(f"cleanup: delete {sid}: {e}")
        if self.client:
            self.client.close()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log("cleanup: spaced ignored SIGTERM for 30 s; SIGKILL")
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            log(f"spaced exited with {self.proc.returncode}")
        # space-egress outlives spaced by design (live connections survive a daemon restart): the bench's
        # own gateway goes with the bench, and the nftables table with the last gateway on the host.
        stop_outliving_processes_of(state)
        # So do the pool's jail sandboxes (a restarted spaced would reattach them); the bench's go with it.
        stop_sandboxes(self.sandbox_ids())
        # Whatever is still mounted under the state dir (the XFS volume at <state>/sandboxes, overlays).
        for mp in sorted(mounts_under(state), key=len, reverse=True):
            if subprocess.run(["umount", mp], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", mp], capture_output=True)
        # Loop devices still backed by files in the state dir.
        r = subprocess.run(["losetup", "-a", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and parts[1].strip().startswith(state + "/"):
                subprocess.run(["losetup", "-d", parts[0]], capture_output=True)
        try:  # keep the daemon's log for a post-mortem; the state dir goes away
            shutil.copyfile(self.log_path, LAST_LOG)
        except OSError:
            pass
        left = mounts_under(state)
        if left:
            log(f"cleanup: still mounted: {left}; keeping {state}")
            return
        shutil.rmtree(state, ignore_errors=True)


def make_rootfs(dest):
    """The busybox rootfs of the tests (scripts/make-busybox-rootfs, or the kit's equivalent when it is
    missing); returns which one made it, for the results' notes."""
    script = os.path.join(ROOT, "scripts", "make-busybox-rootfs")
    how = "scripts/make-busybox-rootfs" if os.path.isfile(script) else "built-in (scripts/make-busybox-rootfs missing)"
    make_busybox_rootfs(Path(dest))
    return how


def daemon_and_agent_pids(spaced_pid):
    """Descendants of spaced plus any space-agent process (in case sandboxes are re-parented)."""
    pids = descendants(spaced_pid)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip().startswith("space-agent"):
                    pids.add(int(d))
        except OSError:
            pass
    return pids


def stop_outliving_processes_of(state_dir):
    """Kills what of this bench outlives spaced by design: its space-egress and its pooled VMs."""
    mine, others = [], []
    egress_mine = False
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        exe = cmd.split(b"\0")[0]
        ours = (state_dir + "/").encode() in cmd
        if b"qemu-system" in exe and ours:
            mine.append(int(d))  # a pooled VM: sandboxes outlive spaced by design, the bench's go with it
            continue
        if b"space-egress" not in exe:
            continue
        (mine if ours else others).append(int(d))
        egress_mine = egress_mine or ours
    for pid in mine:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if egress_mine and not others and shutil.which("nft"):
        subprocess.run(["nft", "delete", "table", "inet", "space"], capture_output=True)


def sandbox_cgroups(sid):
    """The sandbox's cgroup directories, in every hierarchy (v1 controllers or v2)."""
    out = []
    root = "/sys/fs/cgroup"
    for base in [root] + [os.path.join(root, d) for d in os.listdir(root)]:
        p = os.path.join(base, "space", sid)
        if os.path.isdir(p):
            out.append(p)
    return out


def stop_sandboxes(ids):
    """SIGKILLs every process in these sandboxes' cgroups and removes the cgroups; their network
    namespaces, and with them the sandboxes' links, go with the last process."""
    dirs = [p for sid in ids for p in sandbox_cgroups(sid)]
    for _ in range(50):
        pids = set()
        for p in dirs:
            try:
                with open(os.path.join(p, "cgroup.procs")) as f:
                    pids.update(int(x) for x in f.read().split())
            except OSError:
                pass
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)
    for p in sorted(dirs, key=len, reverse=True):
        try:
            os.rmdir(p)
        except OSError:
            pass
