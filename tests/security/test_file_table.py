"""SECURITY.md J26: the host's file table. Every process of a sandbox may hold nofile descriptors; spaced
sizes fs.file-max for max_sandboxes such sandboxes plus a reserve for the host, and refuses a create whose
pids × nofile exceed a sandbox's share. Checked from the host: a sandbox whose every process opens files
until EMFILE leaves the table room for every other admitted sandbox, and the host keeps opening files."""

import os
import time

from lib import spacelib

PIDS, NOFILE, RESERVE = 256, 4096, 1 << 20  # the session daemon's defaults (max_sandboxes 1000)


def file_nr() -> int:
    return int(open("/proc/sys/fs/file-nr").read().split()[0])


def file_max() -> int:
    return int(open("/proc/sys/fs/file-max").read())


def test_j26_fs_file_max_holds_every_admitted_sandbox(daemon):
    assert file_max() >= 1000 * PIDS * NOFILE + RESERVE, file_max()


def test_j26_a_create_beyond_its_share_of_the_file_table_is_refused(client):
    share = (file_max() - RESERVE) // 1000
    pids = share // NOFILE + 1
    status, _, body = client.raw("POST", "/v1/sandboxes", {"pids": pids})
    assert status == 400 and b"file table" in body, (status, body)


def test_j26_a_sandbox_opening_all_it_may_leaves_room_for_the_rest(client, make_sandbox):
    sid = make_sandbox(pids=32)["id"]
    before = file_nr()
    # 24 processes, each opening /dev/null until EMFILE (`command`: a failed redirection of exec must not
    # end the shell), then holding them.
    opener = 'j=10; while eval "command exec $j</dev/null" 2>/dev/null; do j=$((j+1)); done; exec 10<&-; echo $j > /tmp/open.$$; sleep 120'
    for _ in range(24):
        client.start_process(sid, cmd=["/bin/sh", "-c", opener])
    spacelib.wait_for(lambda: int(client.sh(sid, "ls /tmp | grep -c '^open\\.' || true").out.strip() or 0) >= 24,
                      timeout=60, what="24 processes at EMFILE")
    reached = [int(x) for x in client.sh(sid, "cat /tmp/open.*").out.split()]
    assert all(r >= NOFILE - 16 for r in reached), reached  # each got (about) its nofile, then EMFILE
    held = file_nr() - before
    print(f"\n24 processes hold {held} more open files on the host; fs.file-max {file_max()}")
    assert held >= 24 * (NOFILE - 64), held  # really open on the host, not refused early
    # Room for every other admitted sandbox doing the same with all its pids.
    assert file_max() - file_nr() >= 999 * PIDS * NOFILE, (file_max(), file_nr())
    # The host keeps opening files, and spaced keeps answering.
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(1000)]
    for fd in fds:
        os.close(fd)
    assert client.healthy()
    client.delete(sid)
    time.sleep(0.5)
    assert file_nr() - before < held // 2, "the sandbox's files outlived it"
