"""The vm tier's isolation cases (SECURITY.md V1-V6) against real VMs (TCG where /dev/kvm is missing),
checked from inside the guest and from the host: what the guest sees, how the VMM is confined, what a
guest's writes leave in the template and in a sibling, each restored VM's identity, the guest's interfaces
and its limits. The tier's functional behaviour is tests/integration/test_vm.py."""

import os
import time

from lib import spacelib
from lib.host import file_sha256 as sha256, qemu_pid


def test_v01_guest_sees_only_virtio_devices_and_its_own_processes(client, daemon, make_vm):
    sid = make_vm()
    # virtio device ids: 1 = network, 2 = block, 3 = console. Nothing else (no 9p share, no balloon).
    ids = client.sh(sid, "cat /sys/bus/virtio/devices/*/device").out.split()
    assert sorted(ids) == ["0x0001", "0x0002", "0x0003"], ids
    assert client.sh(sid, "cat /proc/1/cmdline | tr '\\0' ' '").out.strip() == "/sbin/space-agent --vm-init"
    pids = [p for p in client.sh(sid, "ls /proc").out.split() if p.isdigit()]
    assert len(pids) < 100, f"{len(pids)} processes visible: host pids leak in?"
    # The host's files are not there: no host hostname, no SPACE state dir.
    assert client.sh(sid, f"test -e {daemon.state} || echo absent").out.strip() == "absent"
    assert client.sh(sid, "hostname").out.strip() == sid
    assert client.sh(sid, "ls /sys/class/net").out.split() == ["eth0", "lo"]


def test_v02_the_vmm_is_confined(client, make_vm):
    sid = make_vm()
    pid = qemu_pid(sid)
    st = spacelib.proc_status(pid)
    uids = [int(x) for x in st["Uid"].split()]
    assert all(u == uids[0] for u in uids) and uids[0] >= 0x10000000, uids
    assert st["NoNewPrivs"] == "1" and st["Seccomp"] == "2", st
    assert int(st["CapEff"], 16) == 0 and int(st["CapPrm"], 16) == 0, st
    for ns in ("mnt", "pid", "net", "ipc"):
        assert os.readlink(f"/proc/{pid}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
    # Its root: /usr, its kernel and images, its own directory, three device nodes, its own /proc.
    root = f"/proc/{pid}/root"
    assert os.path.isdir(f"{root}/usr/bin")
    for absent in ("/etc/passwd", "/root", "/home", "/var/lib/space", "/dev/sda", "/dev/mem", "/sys/kernel"):
        assert not os.path.exists(root + absent), absent
    assert sorted(os.listdir(f"{root}/dev")) in (["null", "urandom"], ["kvm", "null", "urandom"])
    assert sorted(p for p in os.listdir(f"{root}/proc") if p.isdigit()) == ["1"], "QEMU sees other processes"
    # The template's RAM is a descriptor, not a file in its root.
    assert not any("memory" == name for _, _, files in os.walk(root + "/var") for name in files)
    # A cgroup of its own with memory and pids limits.
    mem = spacelib.cgroup_file(sid, "memory", "memory.limit_in_bytes") or spacelib.cgroup_file(sid, "memory", "memory.max")
    pids = spacelib.cgroup_file(sid, "pids", "pids.max")
    assert mem and int(mem) <= (512 + 384) << 20, mem  # guest RAM (the default 512 MiB) + the VMM's own
    assert pids and int(pids) <= 256, pids
    assert sid in spacelib.pid_cgroup_ids(pid)


def test_v03_guest_writes_change_nothing_in_the_template_or_a_sibling(client, vm, make_vm):
    files = [os.path.join(vm["dir"], f) for f in ("memory", "state", "disk.qcow2")] + [vm["base_image"]]
    before = {f: sha256(f) for f in files}
    a, b = make_vm(), make_vm()
    client.sh(b, "echo mine > /root/marker")
    r = client.sh(a, "echo changed > /etc/passwd; rm -rf /usr /bin/ls; "
                     "head -c 100000000 /dev/zero > /dev/shm/fill && echo filled")
    assert "filled" in r.out, r
    assert client.sh(b, "cat /root/marker; ls /dev/shm | wc -l; grep -c root /etc/passwd").out.split() == ["mine", "0", "1"]
    assert client.sh(b, "test -x /bin/ls && echo ok").out.strip() == "ok"
    client.delete(a)
    after = {f: sha256(f) for f in files}
    assert after == before
    for f in files:
        assert os.stat(f).st_mode & 0o222 == 0, f"{f} is writable"


def test_v04_restored_vms_have_their_own_identity(client, make_vm):
    a, b = make_vm(), make_vm()
    out_a = client.sh(a, "head -c 32 /dev/urandom | od -An -tx1").out
    out_b = client.sh(b, "head -c 32 /dev/urandom | od -An -tx1").out
    assert out_a.strip() and out_a != out_b
    assert client.sh(a, "hostname").out.strip() == a
    assert client.sh(b, "hostname").out.strip() == b
    ma = client.sh(a, "cat /etc/machine-id").out.strip()
    mb = client.sh(b, "cat /etc/machine-id").out.strip()
    assert len(ma) == 32 and len(mb) == 32 and ma != mb
    # The clock is the host's, not the snapshot's.
    guest = int(client.sh(a, "date +%s").out.strip())
    assert abs(guest - time.time()) < 30, (guest, time.time())


def test_v05_the_guest_reaches_only_its_agent_port_disk_and_one_nic(client, make_vm):
    sid = make_vm()
    ports = client.sh(sid, "for p in /sys/class/virtio-ports/*; do cat $p/name; done").out.split()
    assert ports == ["space.agent"], ports
    # No monitor, no QMP, no host sockets; one disk and exactly one NIC. This daemon runs without egress:
    # the NIC hangs off an empty hub in QEMU (no tap, no address). With egress it is the sandbox's tap into
    # the gateway (test_vm_egress.py checks that side).
    assert client.sh(sid, "ls /sys/class/net").out.split() == ["eth0", "lo"]
    assert client.sh(sid, "ls /sys/bus/virtio/drivers/virtio_net | grep -c virtio").out.strip() == "1"
    assert "inet " not in client.sh(sid, "ip -4 addr show eth0").out
    assert client.sh(sid, "ls /dev/vd* /dev/hvc* 2>/dev/null | sort").out.split() == ["/dev/vda"]
    qemu = qemu_pid(sid)
    tuns = [f for f in os.listdir(f"/proc/{qemu}/fdinfo") if "iff:" in spacelib.read(f"/proc/{qemu}/fdinfo/{f}")]
    assert not tuns, "a VM of a node without egress holds a tap"


def test_v06_memory_and_disk_exhaustion_stay_inside_the_vm(client, daemon, make_vm):
    sid = make_vm(disk_mib=64)
    # Memory: a process that wants more than the guest has fails inside the guest (its allocation is
    # refused or the guest's OOM killer ends it); the VMM stays within its cgroup.
    r = client.sh(sid, "head -c 600000000 /dev/zero | tail -c 600000000 | wc -c", timeout=300)
    assert r.out.strip() != "600000000", r
    assert client.sh(sid, "echo alive").out.strip() == "alive"
    pid = qemu_pid(sid)
    rss_kb = int(spacelib.proc_status(pid)["VmRSS"].split()[0])
    assert rss_kb < (256 + 512) * 1024, rss_kb
    # Disk: the guest's filesystem fills at its size; the host's overlay stays near it.
    r = client.sh(sid, "dd if=/dev/zero of=/root/fill bs=1M 2>&1; echo rc=$?", timeout=600)
    assert "No space left" in r.out and "rc=0" not in r.out, r
    # The overlay lives on the layer volume (SPACE's XFS mount, or the state dir where it can reflink).
    overlay = next(p for p in (os.path.join(str(daemon.state), "volume", "layers", sid + ".qcow2"),
                               os.path.join(str(daemon.state), "layers", sid + ".qcow2")) if os.path.exists(p))
    assert os.path.getsize(overlay) < 200 << 20, os.path.getsize(overlay)
    assert client.sh(sid, "rm /root/fill && echo freed").out.strip() == "freed"
