"""What every phase shares: the run's constants, its log line and the statistics the results hold (every
metric is one sample set's p50 <= p90 <= p99; validate_result refuses anything else)."""

import math
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = "bench"
POOL_SIZE = 8
VM_POOL_SIZE = 2
VM_MEMORY_MIB = 256
MiB = 1 << 20
LAST_LOG = "/var/tmp/space-bench-last-spaced.log"
REJECTED = "/var/tmp/space-bench-rejected.json"  # a result validate_result() refused, for a post-mortem


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def percentile(sorted_values, q):
    """Nearest-rank percentile of an already sorted list."""
    n = len(sorted_values)
    rank = max(1, math.ceil(q / 100.0 * n))
    return sorted_values[min(n, rank) - 1]


def summarize(values, unit="ms"):
    s = sorted(values)
    return {"p50": round(percentile(s, 50), 3), "p90": round(percentile(s, 90), 3),
            "p99": round(percentile(s, 99), 3), "n": len(s), "unit": unit}


def summarize_paired(values, baseline, unit="ms"):
    """Percentiles of the pairwise differences values[i] - baseline[i], for samples taken in pairs (same
    moment, same target): one sample set, so p50 <= p90 <= p99. A percentile of one set minus the same
    percentile of another is not a percentile of anything and need not be monotone."""
    if len(values) != len(baseline):
        raise ValueError(f"paired samples: {len(values)} against {len(baseline)}")
    return summarize([v - b for v, b in zip(values, baseline)], unit)


def summarize_over_median(values, baseline, unit="ms"):
    """Percentiles of each sample minus the baseline's median, for samples not taken in pairs: one sample
    set shifted by one constant, so p50 <= p90 <= p99; the baseline's own spread is not subtracted."""
    if not baseline:
        raise ValueError("no baseline samples")
    m = percentile(sorted(baseline), 50)
    return summarize([v - m for v in values], unit)


def aggregate(value, n, unit, how):
    """One reading over n things (a host-wide difference divided by n), not n samples: p50 = p90 = p99 =
    the value, and the metric says so in "aggregate"."""
    v = round(value, 3)
    return {"p50": v, "p90": v, "p99": v, "n": n, "unit": unit, "aggregate": how}


def validate_result(result):
    """Raises ValueError naming every metric whose figures are not numbers with p50 <= p90 <= p99: such
    figures do not come from one sample set, and the bench does not write them."""
    bad = []
    for name, m in sorted(result.get("metrics", {}).items()):
        figures = [m.get(k) if isinstance(m, dict) else None for k in ("p50", "p90", "p99")]
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in figures)
        if not numbers or not figures[0] <= figures[1] <= figures[2]:
            bad.append(f"{name}: p50 {figures[0]!r}, p90 {figures[1]!r}, p99 {figures[2]!r}")
    if bad:
        raise ValueError("p50 <= p90 <= p99 does not hold for " + "; ".join(bad))
