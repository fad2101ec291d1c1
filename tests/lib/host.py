"""Host-side oracles: which processes, cgroups, mounts and loop devices a sandbox owns, read from the host's
/proc and /sys rather than from inside the sandbox."""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

UID_BASE = 0x10000000
UID_RANGE = 65536
SANDBOX_ID_RE = re.compile(r"sb-[0-9a-f]{12}")

def read(path, default=""):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return default


def proc_status(pid: int) -> dict:
    out = {}
    for line in read(f"/proc/{pid}/status").splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def pid_cgroup_ids(pid: int) -> set[str]:
    return set(SANDBOX_ID_RE.findall(read(f"/proc/{pid}/cgroup")))


def sandbox_pids(ids) -> list[int]:
    """Host pids of every process whose cgroup path names one of the sandbox ids."""
    if isinstance(ids, str):
        ids = {ids}
    ids = set(ids)
    return [p for p in all_pids() if pid_cgroup_ids(p) & ids]


def uids_of(pid: int) -> list[int]:
    st = proc_status(pid)
    return [int(x) for x in st.get("Uid", "").split()] if st.get("Uid") else []


def nspid(pid: int) -> list[int]:
    v = proc_status(pid).get("NSpid", "")
    return [int(x) for x in v.split()] if v else []


def agent_host_pid(sid: str) -> int | None:
    """The sandbox's pid 1 (space-agent) as seen from the host."""
    for p in sandbox_pids(sid):
        ns = nspid(p)
        if len(ns) >= 2 and ns[-1] == 1:
            return p
    return None


def is_zombie(pid: int) -> bool:
    s = read(f"/proc/{pid}/stat")
    return bool(s) and s.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def pid_start_time(pid: int) -> str | None:
    s = read(f"/proc/{pid}/stat")
    if not s:
        return None
    return s.rsplit(")", 1)[1].split()[19]


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_dirs(sid: str) -> list[Path]:
    """Every cgroup directory named after the sandbox, in any hierarchy (v1 controllers or v2)."""
    found = []
    roots = [CGROUP_ROOT] + [p for p in CGROUP_ROOT.iterdir() if p.is_dir()] if CGROUP_ROOT.is_dir() else []
    for root in roots:
        # Typical layouts: <root>/space/<id>, <root>/space.slice/<id>, <root>/space/sandboxes/<id>.
        for pat in (f"*/{sid}", f"*/*/{sid}", f"*/{sid}.*", f"*/*/{sid}.*"):
            try:
                matches = list(root.glob(pat))
            except FileNotFoundError:
                # A cgroup removed while the glob walks it (a sandbox being deleted right now): look again.
                matches = list(root.glob(pat))
            for p in matches:
                if p.is_dir() and "space" in str(p.relative_to(root)).split("/")[0]:
                    found.append(p)
    return sorted(set(found))


def space_cgroup_ids() -> set[str]:
    """Ids of every sandbox that has a cgroup directory under some space hierarchy."""
    ids = set()
    for root in [CGROUP_ROOT] + [p for p in CGROUP_ROOT.iterdir() if p.is_dir()]:
        for top in root.glob("space*"):
            if top.is_dir():
                for dirpath, dirnames, _ in os.walk(top):
                    for d in dirnames:
                        ids.update(SANDBOX_ID_RE.findall(d))
    return ids


def cgroup_file(sid: str, controller: str, name: str) -> str | None:
    """Reads a cgroup file of the sandbox, v1 (<controller> hierarchy) first, then v2."""
    for d in cgroup_dirs(sid):
        rel = str(d.relative_to(CGROUP_ROOT))
        if rel.startswith(controller + "/") or rel.startswith(f"{controller},") or "," + controller in rel.split("/")[0]:
            v = read(d / name, None)
            if v is not None:
                return v
    for d in cgroup_dirs(sid):
        v = read(d / name, None)
        if v is not None:
            return v
    return None


def frozen_state(sid: str) -> bool | None:
    """Whether the kernel holds the sandbox's cgroup frozen: its cgroup2 group (cgroup.freeze; on a hybrid
    host its twin on the unified hierarchy) or else its v1 freezer. None: no freezer found."""
    for d in cgroup_dirs(sid):
        events = read(d / "cgroup.events", None)
        if events is not None and (d / "cgroup.freeze").exists():
            return "frozen 1" in events.splitlines()
    state = cgroup_file(sid, "freezer", "freezer.state")
    return None if state is None else state.strip() == "FROZEN"


def all_mountpoints(pid: int | str = "self") -> list[str]:
    out = []
    for line in read(f"/proc/{pid}/mountinfo").splitlines():
        parts = line.split()
        if len(parts) > 4:
            out.append(parts[4].replace("\\040", " "))
    return out


def mounts_naming(sid: str, pids=("self",)) -> list[str]:
    res = set()
    for p in pids:
        for line in read(f"/proc/{p}/mountinfo").splitlines():
            if sid in line:
                res.add(line)
    return sorted(res)


def loop_devices_naming(text: str) -> list[str]:
    """Loop devices whose backing file path contains text (e.g. a sandbox id or a state dir)."""
    out = []
    for bf in Path("/sys/block").glob("loop*/loop/backing_file"):
        target = read(bf).strip()
        if text in target:
            out.append(f"{bf.parts[3]} -> {target}")
    return out


def processes_in_uid_range() -> dict[int, int]:
    """pid -> real uid of every host process whose real uid is in the sandbox uid space."""
    out = {}
    for p in all_pids():
        u = uids_of(p)
        if u and UID_BASE <= u[0] < 0xFFFFFFFF and not is_zombie(p):
            out[p] = u[0]
    return out


@dataclass
class SandboxFootprint:
    sid: str
    pids: list[tuple[int, str | None]]
    cgroups: list[Path]
    mounts: list[str]
    dir: Path | None
    loops: list[str] = field(default_factory=list)

    def remaining(self, daemon_pid: int | None = None, grace: float = 5.0) -> list[str]:
        """What is still there; polls for up to `grace` seconds because the kernel finishes tearing down
        killed tasks (and their parent reaps them) shortly after destroy returns."""
        deadline = time.monotonic() + grace
        while True:
            left = self._remaining_now(daemon_pid)
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.1)

    def _remaining_now(self, daemon_pid: int | None = None) -> list[str]:
        left = []
        for pid, start in self.pids:
            if start is not None and pid_start_time(pid) == start and not is_zombie(pid):
                left.append(f"process {pid} ({read(f'/proc/{pid}/comm').strip()}) still runs")
        old = {p for p, _ in self.pids}
        for pid in sandbox_pids(self.sid):
            if pid not in old:
                left.append(f"process {pid} ({read(f'/proc/{pid}/comm').strip()}) still in the sandbox's cgroup")
        for d in self.cgroups:
            if d.exists():
                left.append(f"cgroup {d} still exists")
        for d in cgroup_dirs(self.sid):
            if d not in self.cgroups:
                left.append(f"cgroup {d} exists")
        pids = ["self"] + ([daemon_pid] if daemon_pid else [])
        for m in mounts_naming(self.sid, pids):
            left.append(f"mount: {m}")
        if self.dir is not None and self.dir.exists():
            left.append(f"directory {self.dir} still exists")
        for lo in loop_devices_naming(self.sid):
            left.append(f"loop device {lo}")
        return left


def footprint(sid: str, state_dir: Path | None = None, daemon_pid: int | None = None) -> SandboxFootprint:
    pids = [(p, pid_start_time(p)) for p in sandbox_pids(sid)]
    pidlist = ["self"] + ([daemon_pid] if daemon_pid else [])
    return SandboxFootprint(sid, pids, cgroup_dirs(sid), mounts_naming(sid, pidlist),
                            (state_dir / "sandboxes" / sid) if state_dir else None, loop_devices_naming(sid))


def vm_hwm_kib(pid: int) -> int:
    v = proc_status(pid).get("VmHWM", "0 kB").split()[0]
    return int(v)


def vm_rss_kib(pid: int) -> int:
    v = proc_status(pid).get("VmRSS", "0 kB").split()[0]
    return int(v)



def pids_with_cmdline(needle: bytes) -> list[int]:
    out = []
    for pid in all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if needle in f.read():
                    out.append(pid)
        except OSError:
            continue
    return out


def qemu_pid(sid: str) -> int:
    """The VMM of a vm-tier sandbox, found by its QMP socket under the sandbox's directory."""
    pids = pids_with_cmdline(f"/sandboxes/{sid}/qmp.sock".encode())
    assert pids, f"no QEMU process for {sid}"
    return pids[0]


def file_sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def meminfo() -> dict[str, int]:
    """/proc/meminfo in kB."""
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0])  # kB
    return out


def descendants(root_pid: int) -> set[int]:
    children = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            ppid = int(st[st.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = set(), [root_pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.add(c)
            todo.append(c)
    return out


def pss_kb(pids) -> int:
    """The processes' summed proportional set size (smaps_rollup), in kB."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def mounts_under(path: str) -> list[str]:
    res = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), mp)
            if mp == path or mp.startswith(path + "/"):
                res.append(mp)
    return res
