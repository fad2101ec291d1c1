"""Fixtures and helpers shared by the egress tests (tests/integration, tests/security): the upstream
network namespace with its servers (egress_upstream.py) and test CA, one spaced with egress on per test
module, the python template, and readers for the upstream's log and the gateway's audit.

The daemon's config declares the upstream namespace's subnet external (egress_test_external_subnets), the
one setting that lets a private address count as public. A test module may add daemon settings with a
module-level dict EGRESS_DAEMON_CONFIG. Import the fixtures by name into the test module."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from lib import spacelib
from lib.fixtures import PYTHON_ROOTFS, baseline_uid_procs, start_daemon_with_busybox, stop_and_check

HERE = Path(__file__).resolve().parent
TAG = os.getpid() % 200 + 20
NS = f"space-egress-test-{os.getpid()}"
HOST_IF = f"sput{TAG}"         # not "spc*": SPACE's nftables table and reconciliation own those links
NET = f"10.251.{TAG}."         # the upstream side: host .1, test namespace .2
HOST_END = NET + "1"
UPSTREAM = NET + "2"
CURL = "curl -sS -f --max-time 8"  # -f: a 403 from the gateway is a failure


def skip(reason: str):
    print("\n" + reason, file=sys.stderr)
    pytest.skip(reason)


def run(*argv, check=True, **kw):
    return subprocess.run(list(argv), check=check, capture_output=True, text=True, timeout=60, **kw)


@pytest.fixture(scope="module")
def upstream():
    """The test namespace with its servers, a test CA and a leaf for the test names; torn down after."""
    if os.geteuid() != 0:
        skip("egress tests need root (network namespaces, nftables)")
    if not (spacelib.bin_dir() / "space-egress").is_file():
        skip(f"no space-egress in {spacelib.bin_dir()}")
    if not shutil.which("nft") or run("nft", "list", "tables", check=False).returncode != 0:
        skip("nftables is not usable here: the egress gateway cannot be tested")
    if not shutil.which("openssl") or not shutil.which("ip"):
        skip("openssl and iproute2 are needed for the upstream side")
    if run("pgrep", "-x", "space-egress", check=False).stdout.split():
        # Table, ports and address pool are host-wide: one gateway per host.
        skip("another SPACE egress gateway runs on this host (a spaced outside the tests); stop it to run these")
    work = Path(tempfile.mkdtemp(prefix="space-egress-test-", dir="/var/tmp"))
    os.chmod(work, 0o755)
    ca_key, ca_crt, key, csr, crt = (work / n for n in ("ca.key", "ca.crt", "leaf.key", "leaf.csr", "leaf.crt"))
    (work / "ext.cnf").write_text("subjectAltName=DNS:allowed.test,DNS:other.test,DNS:secret.test\n"
                                  "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", str(ca_key), "-out", str(ca_crt), "-days", "2", "-subj", "/CN=space egress test upstream CA")
    run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key),
        "-out", str(csr), "-subj", "/CN=allowed.test")
    run("openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key), "-CAcreateserial",
        "-out", str(crt), "-days", "2", "-extfile", str(work / "ext.cnf"))
    run("ip", "netns", "add", NS)
    server = None
    try:
        run("ip", "link", "add", HOST_IF, "type", "veth", "peer", "name", "up0", "netns", NS)
        run("ip", "addr", "add", HOST_END + "/24", "dev", HOST_IF)
        run("ip", "link", "set", HOST_IF, "up")
        run("ip", "-n", NS, "addr", "add", UPSTREAM + "/24", "dev", "up0")
        run("ip", "-n", NS, "link", "set", "up0", "up")
        run("ip", "-n", NS, "link", "set", "lo", "up")
        log = work / "upstream.jsonl"
        log.touch()
        server = subprocess.Popen(["ip", "netns", "exec", NS, sys.executable, str(HERE / "egress_upstream.py"),
                                   UPSTREAM, str(log), str(crt), str(key)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if server.stdout.readline().strip() != "ready":
            raise RuntimeError(f"upstream servers did not start: {server.stderr.read()}")
        yield {"ca": str(ca_crt), "log": log}
    finally:
        if server:
            server.kill()
            server.wait(10)
        run("ip", "link", "del", HOST_IF, check=False)
        run("ip", "netns", "del", NS, check=False)
        shutil.rmtree(work, ignore_errors=True)


def upstream_log(up) -> list[dict]:
    return [json.loads(line) for line in up["log"].read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def egress_daemon(request, upstream):
    """One spaced with egress on (module-wide: the gateway's ports and table are host-wide)."""
    config = {"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox", "egress": True,
              "egress_test_external_subnets": [NET + "0/24"],
              "egress_upstream_resolvers": UPSTREAM + ":53",
              "egress_upstream_ca_file": upstream["ca"]}
    config.update(getattr(request.module, "EGRESS_DAEMON_CONFIG", {}))
    baseline = baseline_uid_procs()
    d = start_daemon_with_busybox(config)
    if "egress: on" not in d.log_path.read_text(errors="replace"):
        d.stop()
        skip(f"spaced did not turn egress on:\n{d.log_tail()}")
    yield d
    problems = stop_and_check(d, baseline, 0)
    assert d.egress_pid() is None, "space-egress outlived the test daemon's teardown"
    leftover_links = [n for n in os.listdir("/sys/class/net") if n.startswith("spc")]
    # spaced leaves its table in place across its own restarts by design; with no gateway left on this
    # host, the test removes it (the net unit tests refuse to run next to an existing table).
    gateways = run("pgrep", "-x", "space-egress", check=False).stdout.split()
    if not gateways:
        run("nft", "delete", "table", "inet", "space", check=False)
    d.force_cleanup()  # the state dir (and its claim on a uid block) goes with the daemon
    assert not leftover_links, f"sandbox links left behind: {leftover_links}"
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def python_tpl(egress_daemon):
    if not (PYTHON_ROOTFS / "usr" / "bin" / "curl").exists():
        skip(f"no python rootfs with curl at {PYTHON_ROOTFS}")
    if not any(t.get("name") == "python" for t in egress_daemon.client.templates()):
        egress_daemon.client.build_template("python", str(PYTHON_ROOTFS))
    return "python"


def create(d, **kw) -> str:
    return d.client.create(**kw)["id"]


def sh(d, sid, script, timeout_s=30):
    return d.client.sh(sid, script, timeout_s=timeout_s, timeout=timeout_s + 30)


def audit(d, sid) -> list[dict]:
    """The gateway's audit lines for one sandbox, as spaced serves them."""
    status, _, body = d.client.raw("GET", f"/v1/sandboxes/{sid}/network/log")
    assert status == 200, body
    return [json.loads(x) for x in body.decode().splitlines() if x.strip()]

