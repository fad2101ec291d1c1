"""Sandbox start: a pooled create to the first byte of a command's output (jail.create_to_first_output),
interleaved with the same one-shot start of the peers (bubblewrap, gVisor runsc), and the peers alone."""

import time

from lib.client import ApiError

from phases.common import POOL_SIZE, TEMPLATE, log, summarize
from phases.peers import first_byte_ms


def phase_create(d, peers, n, runsc_every, res, notes):
    """jail.create_to_first_output interleaved with peer.bwrap.oneshot (every sample) and
    peer.runsc.oneshot (every runsc_every-th sample)."""
    c = d.client
    create_ms, first_ms, delete_ms, bwrap_ms, runsc_ms = [], [], [], [], []
    misses = 0
    unrefilled = 0
    errors = []
    # warm-up, not recorded
    for _ in range(2):
        sb = d.create({"template": TEMPLATE})
        try:
            c.exec(sb["id"], ["/bin/echo", "hi"])
        except ApiError as e:
            errors.append(f"warm-up: {str(e)[:300]}")
        d.delete(sb["id"])
        if peers.bwrap:
            first_byte_ms(peers.bwrap)
    for i in range(n):
        # Pace: let the pool refill completely so the refill does not run during the measurement.
        m = d.wait_pool(POOL_SIZE, 10)
        if m is None:
            unrefilled += 1
            m = d.wait_pool(1, 20)
            if m is None:
                raise RuntimeError("pool did not refill within 30 s")
        pool_before = m.get('space_sandbox_creates_total{source="pool"}', 0)
        fresh_before = m.get('space_sandbox_creates_total{source="fresh"}', 0)
        t0 = time.perf_counter()
        sb = c.create({"template": TEMPLATE})
        t1 = time.perf_counter()
        d.ids.add(sb["id"])
        create_ms.append((t1 - t0) * 1000)
        try:
            t_first, _, code, out = c.exec(sb["id"], ["/bin/echo", "hi"])
            if t_first is None or code != 0 or b"hi" not in out:
                errors.append(f"sample {i}: exit={code} out={out[:100]!r}")
            else:
                first_ms.append((t_first - t0) * 1000)
        except (ApiError, ValueError) as e:
            errors.append(f"sample {i}: {str(e)[:300]}")
        t2 = time.perf_counter()
        d.delete(sb["id"])
        delete_ms.append((time.perf_counter() - t2) * 1000)
        m2 = c.metrics()
        src = sb.get("source")
        if src is not None:
            misses += src != "pool"
        elif m2.get('space_sandbox_creates_total{source="fresh"}', 0) > fresh_before or \
                m2.get('space_sandbox_creates_total{source="pool"}', 0) == pool_before:
            misses += 1
        # peers, same loop so the same background noise hits both
        if peers.bwrap:
            bwrap_ms.append(first_byte_ms(peers.bwrap))
        if peers.runsc and i % runsc_every == 0:
            runsc_ms.append(first_byte_ms(peers.runsc))
        if (i + 1) % 25 == 0:
            log(f"create: {i + 1}/{n}")
    if first_ms:
        res["jail.create_to_first_output"] = summarize(first_ms)
    if create_ms:
        res["jail.create"] = summarize(create_ms)
    res["jail.delete"] = summarize(delete_ms)
    notes["jail.create_to_first_output"] = {
        "n": len(first_ms), "pool_misses": misses,
        "samples_where_pool_was_not_full_after_10s": unrefilled,
        "pacing": f"waits until space_pool_ready=={POOL_SIZE} before each sample; delete is untimed",
        "errors": errors[:10], "error_count": len(errors)}
    if not first_ms:
        notes["jail.create_to_first_output"]["error"] = f"no sample succeeded: {errors[:1]}"
    notes["jail.create"] = {"what": "POST /v1/sandboxes until its 201 answer (part of create_to_first_output)"}
    if bwrap_ms:
        res["peer.bwrap.oneshot"] = summarize(bwrap_ms)
        notes["peer.bwrap.oneshot"]["n"] = len(bwrap_ms)
    if runsc_ms:
        res["peer.runsc.oneshot"] = summarize(runsc_ms)
        notes["peer.runsc.oneshot"]["n"] = len(runsc_ms)


def phase_peers_only(peers, n, runsc_every, res, notes):
    bwrap_ms, runsc_ms = [], []
    for i in range(n):
        if peers.bwrap:
            bwrap_ms.append(first_byte_ms(peers.bwrap))
        if peers.runsc and i % runsc_every == 0:
            runsc_ms.append(first_byte_ms(peers.runsc))
    if bwrap_ms:
        res["peer.bwrap.oneshot"] = summarize(bwrap_ms)
        notes["peer.bwrap.oneshot"]["n"] = len(bwrap_ms)
    if runsc_ms:
        res["peer.runsc.oneshot"] = summarize(runsc_ms)
        notes["peer.runsc.oneshot"]["n"] = len(runsc_ms)
