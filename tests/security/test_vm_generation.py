"""The generation signal (SECURITY.md V9) in real VMs (TCG where /dev/kvm is missing): after a fork or a
rollback, processes that were running learn of it, a userspace DRBG that reseeds on the signal does not
repeat its output across children, and the documented restore options (signal, none, kill) do what they
say. VM snapshots' functional behaviour is tests/integration/test_vm_snapshots.py."""

import re

import pytest

from lib.spacelib import ApiError, wait_for


# A userspace DRBG in the shell's own memory (SECURITY.md V9): seeded once from the kernel, then a 31-bit
# LCG, one value per line of its log, "i value generation-counter" (read with a builtin: no process, no
# reseed). Only a reseed from the kernel changes its course, as with OpenSSL's DRBG or Python's random.
DRBG = ("seed() {{ x=$(od -An -N4 -tu4 /dev/urandom | tr -d ' '); }}; seed; {trap}"
        "i=0; while true; do i=$((i+1)); x=$(( (x * 1103515245 + 12345) % 2147483648 )); "
        "g=-; read -r g rest < /run/space/generation; echo \"$i $x $g\" >> {log}; sleep 0.2; done")
# Subscribed: reseeds on the default restore signal and notes the generation it saw then.
SUBSCRIBED = DRBG.format(log="/root/sub.log",
                         trap="trap 'seed; echo \"reseed $(cat /run/space/generation)\" >> /root/sub.log' URG; ")
UNSUBSCRIBED = DRBG.format(log="/root/plain.log", trap="")


class DrbgLog:
    def __init__(self, client, sid, path):
        self.values, self.gens, self.reseeds = {}, {}, []
        for line in client.sh(sid, f"cat {path} 2>/dev/null").out.splitlines():
            parts = line.split(" ")
            if parts[0] == "reseed":  # after the step it follows
                self.reseeds.append((max(self.values, default=0), " ".join(parts[1:])))
            elif len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
                self.values[int(parts[0])] = int(parts[1])
                self.gens[int(parts[0])] = int(parts[2]) if parts[2].isdigit() else None

    def last(self) -> int:
        return max(self.values, default=0)


def generation(client, sid):
    """(counter, id) from the guest's /run/space/generation."""
    line = client.sh(sid, "cat /run/space/generation 2>&1").out
    m = re.fullmatch(r"([0-9]+) ([0-9a-f]{32})\n", line)
    assert m, f"{sid}: /run/space/generation: {line!r}"
    return int(m[1]), m[2]


def wait_drbg(client, sid, path, beyond, what):
    wait_for(lambda: DrbgLog(client, sid, path).last() > beyond, timeout=120, what=what)


def test_v09_fork_generation_reaches_running_processes_and_subscribed_drbgs_diverge(client, make_vm):
    parent = make_vm()
    client.start_process(parent, shell=SUBSCRIBED)
    client.start_process(parent, shell=UNSUBSCRIBED)
    for log in ("/root/sub.log", "/root/plain.log"):
        wait_drbg(client, parent, log, 2, "the parent's DRBGs to run")
    parent_gen = generation(client, parent)
    kids = [k["id"] for k in client.call("POST", f"/v1/sandboxes/{parent}/fork", {"count": 2})["sandboxes"]]

    gens = {k: generation(client, k) for k in kids}
    # Each child is one restore further than its parent, with an id of its own; the parent is untouched.
    assert all(c == parent_gen[0] + 1 for c, _ in gens.values()), (parent_gen, gens)
    assert len({parent_gen[1]} | {g for _, g in gens.values()}) == 3, (parent_gen, gens)
    assert generation(client, parent) == parent_gen
    sub, plain = {}, {}
    for k in kids:
        wait_for(lambda: DrbgLog(client, k, "/root/sub.log").reseeds, timeout=120, what=f"{k}'s DRBG to reseed")
        at = DrbgLog(client, k, "/root/sub.log").reseeds[0][0]
        wait_drbg(client, k, "/root/sub.log", at + 3, f"{k}'s reseeded DRBG to go on")
        sub[k] = DrbgLog(client, k, "/root/sub.log")
        wait_for(lambda: list(DrbgLog(client, k, "/root/plain.log").gens.values()).count(gens[k][0]) >= 3,
                 timeout=120, what=f"{k}'s plain DRBG to go on")
        plain[k] = DrbgLog(client, k, "/root/plain.log")
    last = max(max(l.last() for l in sub.values()), max(l.last() for l in plain.values()))
    for log in ("/root/sub.log", "/root/plain.log"):
        wait_drbg(client, parent, log, last, "the parent's DRBGs to pass their children's")
    parent_sub = DrbgLog(client, parent, "/root/sub.log")
    parent_plain = DrbgLog(client, parent, "/root/plain.log")
    assert parent_sub.reseeds == [], parent_sub.reseeds  # the parent was never signalled

    after = {}
    for k in kids:
        assert len(sub[k].reseeds) == 1, sub[k].reseeds
        at, seen = sub[k].reseeds[0]
        # The handler ran after the child's generation was published.
        assert seen == f"{gens[k][0]} {gens[k][1]}", (seen, gens[k])
        after[k] = {i: v for i, v in sub[k].values.items() if i > at}
        assert len(after[k]) >= 3, sub[k].values
        # Subscribed: after its reseed, nothing the parent drew at the same step.
        assert all(parent_sub.values[i] != v for i, v in after[k].items()), (k, after[k], parent_sub.values)
        # Not subscribed: the documented hazard. Steps made in the child's own generation repeat the
        # parent's output (on_restore "signal", the default, does not change a program that ignores it).
        own = [i for i, g in plain[k].gens.items() if g == gens[k][0]]
        assert len(own) >= 3 and all(plain[k].values[i] == parent_plain.values[i] for i in own), (k, own)
    a, b = (after[k] for k in kids)
    both = set(a) & set(b)
    assert not both or any(a[i] != b[i] for i in both), (a, b)
    # Both loops still run in every child: the default signal is ignored by those that do not handle it.
    for k in kids:
        assert all(p["running"] for p in client.processes(k)), client.processes(k)


def test_v09_rollback_generation_kill_ends_processes_and_none_shows_the_hazard(client, make_vm):
    sid = make_vm()
    bg = client.start_process(sid, shell=UNSUBSCRIBED)
    wait_drbg(client, sid, "/root/plain.log", 2, "the DRBG to run")
    snap = client.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "seeded"})
    at_snapshot = generation(client, sid)
    wait_drbg(client, sid, "/root/plain.log", DrbgLog(client, sid, "/root/plain.log").last() + 5, "the DRBG to go on")
    first = DrbgLog(client, sid, "/root/plain.log")

    # none: the process continues from the snapshot and draws again what it drew the first time.
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "seeded", "on_restore": "none"})
    none_gen = generation(client, sid)
    assert none_gen[0] == at_snapshot[0] + 1 and none_gen[1] != at_snapshot[1], (at_snapshot, none_gen)
    assert {p["id"]: p for p in client.processes(sid)}[bg["id"]]["running"] is True
    wait_drbg(client, sid, "/root/plain.log", first.last(), "the restored DRBG to catch up")
    again = DrbgLog(client, sid, "/root/plain.log")
    redrawn = [i for i in first.values if again.gens[i] == none_gen[0]]
    assert redrawn and all(again.values[i] == first.values[i] for i in redrawn), (first.values, again.values)

    # kill: every process is gone when the rollback answers; one started again seeds itself afresh.
    client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": snap["id"], "on_restore": "kill"})
    kill_gen = generation(client, sid)
    assert kill_gen[0] == at_snapshot[0] + 1 and kill_gen[1] not in (at_snapshot[1], none_gen[1]), kill_gen
    killed = {p["id"]: p for p in client.processes(sid)}[bg["id"]]
    assert killed["running"] is False and killed["exit"]["signal"] == 9, killed
    client.sh(sid, "rm -f /root/plain.log")
    client.start_process(sid, shell=UNSUBSCRIBED)
    wait_drbg(client, sid, "/root/plain.log", 3, "the re-run DRBG to run")
    fresh = DrbgLog(client, sid, "/root/plain.log")
    assert [fresh.values[i] for i in (1, 2, 3)] != [first.values[i] for i in (1, 2, 3)], (fresh.values, first.values)

    with pytest.raises(ApiError) as e:
        client.call("POST", f"/v1/sandboxes/{sid}/rollback", {"snapshot": "seeded", "on_restore": "restart"})
    assert e.value.status == 400 and "on_restore" in str(e.value), e.value
