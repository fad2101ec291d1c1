"""Unit tests of bench/run's statistics, its result check and its machine header (no daemon, no sandboxes).

bench/run has no .py extension; it is loaded as a module with SourceFileLoader (its main() runs only as a
script)."""

import importlib.machinery
import importlib.util
import json
import math
import os
import random
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def load_bench():
    path = os.path.join(ROOT, "bench", "run")
    loader = importlib.machinery.SourceFileLoader("bench_run", path)
    spec = importlib.util.spec_from_loader("bench_run", loader)
    module = importlib.util.module_from_spec(spec)
    saved, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no bench/__pycache__ in the tree
    try:
        loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = saved
    return module


bench = load_bench()


def monotone(m):
    return m["p50"] <= m["p90"] <= m["p99"]


def old_difference(values, baseline):
    """What bench/run did before: percentile of one set minus the same percentile of the other."""
    vs, bs = sorted(values), sorted(baseline)
    return {f"p{q}": round(bench.percentile(vs, q) - bench.percentile(bs, q), 3) for q in (50, 90, 99)}


# ------------------------------------------------------------------------------------------ summarizers

# A direct path whose slowest tenth is slow while the gateway path is steady: per-percentile subtraction
# gives p50 1.0 > p90 -8.0.
ADVERSARIAL_BASE = [1.0] * 89 + [10.0] * 11
ADVERSARIAL_VALUES = [2.0] * 100


def test_old_method_is_not_monotone_on_the_adversarial_data():
    assert not monotone(old_difference(ADVERSARIAL_VALUES, ADVERSARIAL_BASE))


def test_paired_differences_are_monotone_on_the_adversarial_data():
    m = bench.summarize_paired(ADVERSARIAL_VALUES, ADVERSARIAL_BASE)
    assert monotone(m)
    assert m["n"] == 100 and m["unit"] == "ms"
    assert m["p50"] == 1.0  # the differences: 89 x 1.0, 11 x -8.0


def test_over_median_is_monotone_on_the_adversarial_data():
    m = bench.summarize_over_median(ADVERSARIAL_VALUES, ADVERSARIAL_BASE)
    assert monotone(m)
    assert (m["p50"], m["p90"], m["p99"]) == (1.0, 1.0, 1.0)  # every value 2.0, baseline median 1.0


def test_summarizers_are_monotone_where_percentile_minus_percentile_is_not():
    rng = random.Random(1234)
    broken = 0
    for _ in range(500):
        n = rng.randint(5, 300)
        base = [rng.lognormvariate(0, rng.uniform(0.1, 1.5)) for _ in range(n)]
        values = [rng.lognormvariate(0.3, rng.uniform(0.1, 1.5)) for _ in range(n)]
        broken += not monotone(old_difference(values, base))
        assert monotone(bench.summarize_paired(values, base))
        assert monotone(bench.summarize_over_median(values, base))
    assert broken > 0  # the data does exercise the fault


def test_paired_differences_need_pairs():
    with pytest.raises(ValueError):
        bench.summarize_paired([1.0, 2.0], [1.0])


def test_aggregate_says_it_is_one_reading():
    m = bench.aggregate(1.23456, 200, "MiB", "one reading over 200 sandboxes, divided by 200")
    assert (m["p50"], m["p90"], m["p99"], m["n"], m["unit"]) == (1.235, 1.235, 1.235, 200, "MiB")
    assert "one reading" in m["aggregate"]


# -------------------------------------------------------------------------------------- validate_result

GOOD = {"p50": 7.916, "p90": 10.141, "p99": 13.364, "n": 200, "unit": "ms"}


def test_validate_result_accepts_monotone_metrics():
    result = {"machine": {}, "metrics": {"jail.create_to_first_output": GOOD,
                                         "jail.idle_host_mib_per_sandbox": bench.aggregate(0.2, 200, "MiB", "x"),
                                         "egress.added_latency": bench.summarize_paired([3.0, 2.0], [1.0, 1.0])},
              "ratios": {}, "notes": {}}
    assert bench.validate_result(result) is None
    assert bench.validate_result({"metrics": {}}) is None


def test_validate_result_rejects_a_non_monotone_metric_by_name_and_figures():
    bad = {"p50": 0.043, "p90": 0.085, "p99": 0.068, "n": 3000, "unit": "ms"}  # the latest.json
    result = {"metrics": {"jail.create_to_first_output": GOOD, "egress.added_latency": bad}}
    with pytest.raises(ValueError) as e:
        bench.validate_result(result)
    msg = str(e.value)
    assert "egress.added_latency" in msg and "0.085" in msg and "0.068" in msg
    assert "jail.create_to_first_output" not in msg


@pytest.mark.parametrize("metric", [
    {"p50": 4.758, "p90": 3.896, "p99": 7.892, "n": 30, "unit": "ms"},
    {"p50": 1.0, "p90": 2.0, "n": 3, "unit": "ms"},
    {"p50": 1.0, "p90": math.nan, "p99": 3.0, "n": 3, "unit": "ms"},
    {"p50": 1.0, "p90": "2", "p99": 3.0, "n": 3, "unit": "ms"},
    None,
])
def test_validate_result_rejects_figures_that_are_not_ordered_numbers(metric):
    with pytest.raises(ValueError, match="egress.intercepted_first_request"):
        bench.validate_result({"metrics": {"egress.intercepted_first_request": metric}})


def test_main_refuses_to_write_and_leaves_the_old_result(tmp_path, monkeypatch):
    out = tmp_path / "latest.json"
    out.write_text('{"old": true}\n')
    rejected = tmp_path / "rejected.json"

    class NoPeers:
        def __init__(self, rootfs, workdir, notes):
            self.bwrap = self.runsc = None

    def bad_phase(peers, n, runsc_every, res, notes):
        res["peer.bwrap.oneshot"] = {"p50": 3.0, "p90": 2.0, "p99": 4.0, "n": n, "unit": "ms"}

    monkeypatch.setattr(bench, "make_rootfs", lambda dest: "none (test)")
    monkeypatch.setattr(bench, "Peers", NoPeers)
    monkeypatch.setattr(bench, "phase_peers_only", bad_phase)
    monkeypatch.setattr(bench, "REJECTED", str(rejected))
    monkeypatch.setattr(sys, "argv", ["bench/run", "--peers-only", "--n", "3", "--out", str(out)])
    assert bench.main() != 0
    assert out.read_text() == '{"old": true}\n'
    assert not os.path.exists(str(out) + ".tmp")
    kept = json.loads(rejected.read_text())
    assert kept["metrics"]["peer.bwrap.oneshot"]["p90"] == 2.0
    assert kept["machine"]["kvm"] is None


# ---------------------------------------------------------------------------------------- machine / kvm

def node(vm):
    return {"isolation": {"jail": {"available": True, "capabilities": {}}, "vm": vm, "auto": "jail"}}


def test_kvm_proven():
    m = bench.machine(node({"available": True, "accel": "kvm",
                            "kvm": {"state": "proven", "usable": True}}))
    assert m["kvm"] is True
    assert "kvm_reason" not in m
    assert set(m) >= {"cores", "kernel", "when"}


def test_kvm_failed_gives_the_daemons_reason():
    m = bench.machine(node({"available": True, "accel": "tcg",
                            "kvm": {"state": "failed", "usable": False,
                                    "reason": "guest did not answer in 20 s under KVM"}}))
    assert m["kvm"] is False
    assert m["kvm_reason"] == "guest did not answer in 20 s under KVM"


@pytest.mark.parametrize("state", ["absent", "off", "probing", "failed"])
def test_kvm_is_false_unless_proven(state):
    m = bench.machine(node({"available": True, "accel": "tcg", "kvm": {"state": state, "usable": False}}))
    assert m["kvm"] is False
    assert m["kvm_reason"]


def test_kvm_accel_without_a_proven_probe_is_not_proof():
    # A daemon from before the probe: /dev/kvm opened, no guest known to have run under it.
    m = bench.machine(node({"available": True, "accel": "kvm"}))
    assert m["kvm"] is False and "kvm" in m["kvm_reason"]
    m = bench.machine(node({"available": True, "accel": "kvm", "kvm": {"state": "probing"}}))
    assert m["kvm"] is False and "probe" in m["kvm_reason"]


def test_kvm_when_the_vm_tier_is_unavailable():
    m = bench.machine(node({"available": False, "reason": "qemu-system-x86_64 not found",
                            "kvm": {"state": "absent", "usable": False}}))
    assert m["kvm"] is False
    assert m["kvm_reason"] == "vm tier unavailable: qemu-system-x86_64 not found"


def test_kvm_without_a_daemon_is_null():
    m = bench.machine()
    assert m["kvm"] is None
    assert m["kvm_reason"] == "not measured (no daemon)"
    assert bench.machine(None, "not measured (x)")["kvm_reason"] == "not measured (x)"


def test_node_waits_while_the_probe_is_running():
    answers = [node({"available": True, "accel": "tcg", "kvm": {"state": "probing"}}),
               node({"available": True, "accel": "kvm", "kvm": {"state": "proven"}})]

    class FakeClient:
        calls = 0

        def json(self, method, path):
            assert (method, path) == ("GET", "/v1/node")
            FakeClient.calls += 1
            return 200, answers[min(FakeClient.calls, len(answers)) - 1]

    class FakeDaemon:
        client = FakeClient()

    got = bench.Daemon.node(FakeDaemon(), 10)
    assert FakeClient.calls == 2
    assert bench.kvm_proof(got) == {"kvm": True}
