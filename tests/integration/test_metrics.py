"""/healthz and /metrics (Prometheus text format)."""

import re

LINE_RE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? -?[0-9.eE+-]+(?: [0-9]+)?$|^-?(?:NaN|[+-]Inf)$')


def metric_values(text, name):
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def test_healthz(client):
    status, _, body = client.raw("GET", "/healthz")
    assert status == 200, body


def test_metrics_format_and_content(client, make_sandbox):
    text = client.metrics()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_part = line.split("{")[0].split(" ")[0]
            assert re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", name_part), line
            float(line.rsplit(" ", 1)[1])
    assert "space_sandboxes" in text
    running_before = metric_values(text, "space_sandboxes").get('space_sandboxes{state="running"}')
    request_metrics = [l for l in text.splitlines() if not l.startswith("#") and "request" in l.split("{")[0]]
    assert request_metrics, "no request counter in /metrics"

    sb = make_sandbox()
    text2 = client.metrics()
    running_after = metric_values(text2, "space_sandboxes").get('space_sandboxes{state="running"}')
    assert running_before is not None and running_after is not None
    assert running_after == running_before + 1, (running_before, running_after)

    def total_requests(t):
        return sum(v for l in t.splitlines() if not l.startswith("#") and "request" in l.split("{")[0]
                   and "_total" in l.split("{")[0]
                   for v in [float(l.rsplit(" ", 1)[1])])

    assert total_requests(text2) > total_requests(text), "request counters did not move"
    client.delete(sb["id"])


def test_rejected_requests_are_counted(client):
    client.raw("POST", "/v1/sandboxes", b"{garbage", {"Content-Type": "application/json"})
    text = client.metrics()
    errs = [l for l in text.splitlines()
            if not l.startswith("#") and ('code="400"' in l or 'status="400"' in l or "invalid" in l)]
    assert errs, "a 400 answer is not visible in /metrics"
