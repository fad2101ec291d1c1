"""SECURITY.md J28: two daemons on one host never give two sandboxes the same host uid. Each state
directory claims a block of uid ranges in a host-wide registry (/run/space/uid-blocks), records it and
keeps it across restarts; a second spaced on a block that a running one holds does not start."""

from pathlib import Path

import pytest

from lib import spacelib

UID_BASE, UID_RANGE, SLOTS_PER_BLOCK = 0x10000000, 65536, 4096


def host_uids(sid: str) -> set[int]:
    pids = spacelib.sandbox_pids(sid)
    assert pids, f"no processes of {sid} on the host"
    return {int(spacelib.proc_status(p)["Uid"].split()[0]) for p in pids}


def block_of(d) -> int:
    return int((Path(d.state) / "uid-block").read_text())


def test_j28_two_daemons_run_their_sandboxes_as_disjoint_host_uid_ranges(own_daemon):
    a, b = own_daemon(), own_daemon()
    assert block_of(a) != block_of(b), "two state directories hold the same uid block"
    owners = {int(p.name.split(".")[0]): p.read_text().strip() for p in Path("/run/space/uid-blocks").glob("*.owner")}
    assert owners.get(block_of(a)) == str(Path(a.state).resolve()), owners
    assert owners.get(block_of(b)) == str(Path(b.state).resolve()), owners
    sa, sb = a.client.create()["id"], b.client.create()["id"]
    ua, ub = host_uids(sa), host_uids(sb)
    for d, uids in ((a, ua), (b, ub)):
        for u in uids:
            assert u >= UID_BASE and (u - UID_BASE) // UID_RANGE // SLOTS_PER_BLOCK == block_of(d), (hex(u), block_of(d))
    ranges_a = {(u - UID_BASE) // UID_RANGE for u in ua}
    ranges_b = {(u - UID_BASE) // UID_RANGE for u in ub}
    assert not ranges_a & ranges_b, (ranges_a, ranges_b)
    a.client.delete(sa)
    b.client.delete(sb)


def test_j28_a_restart_keeps_the_block_and_a_second_spaced_on_it_is_refused(own_daemon):
    a = own_daemon()
    block = block_of(a)
    sid = a.client.create()["id"]
    uids = host_uids(sid)
    twin = spacelib.Daemon(state_dir=a.state, config=dict(a.config))
    twin.sock = str(Path(a.state) / "twin.sock")
    twin.client = spacelib.Client(twin.sock)
    twin.log_path = Path(a.state) / "twin.log"
    with pytest.raises(RuntimeError):
        twin.start(timeout=30)
    assert "held by a running spaced" in twin.log_tail(), twin.log_tail()
    a.stop()
    a.start()
    assert block_of(a) == block, "the block moved across a restart"
    assert host_uids(sid) == uids, "the reattached sandbox changed uids"
    a.client.delete(sid)
