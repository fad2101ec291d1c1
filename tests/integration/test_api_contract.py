"""api/openapi.yaml against a real spaced: every operation of the contract is driven (its success and the
errors it documents), and every answer's status, media type and body are validated against the contract
with a JSON Schema validator (Debian's python3-jsonschema, draft 2020-12, the dialect of OpenAPI 3.1).
The last test fails when an operation of the contract was not exercised, so a route added to the file
without a test here does not go unchecked. (The route list itself is compared with the server's by
tests/unit/api/openapi_test.cc.)"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import spacelib
from spacefixtures import baseline_uid_procs, busybox_rootfs_dir, start_daemon_with_busybox, stop_and_check
from spacelib import Client

jsonschema = pytest.importorskip("jsonschema", reason="python3-jsonschema is missing (scripts/setup installs it)")
yaml = pytest.importorskip("yaml", reason="python3-yaml is missing (scripts/setup installs it)")

SPEC_PATH = Path(__file__).resolve().parents[2] / "api" / "openapi.yaml"
METHODS = ("get", "put", "post", "delete")


class Contract:
    """The OpenAPI document and a record of what the tests exercised."""

    def __init__(self, path: Path):
        self.spec = yaml.safe_load(path.read_text())
        self.resolver = jsonschema.RefResolver(base_uri="", referrer=self.spec)
        self.exercised: dict[tuple[str, str], set[int]] = {}

    def operations(self):
        for template, item in self.spec["paths"].items():
            for method in METHODS:
                if method in item:
                    yield method.upper(), template, item[method]

    def operation(self, method: str, template: str) -> dict:
        item = self.spec["paths"].get(template)
        assert item is not None, f"{template} is not in api/openapi.yaml"
        op = item.get(method.lower())
        assert op is not None, f"{method} {template} is not in api/openapi.yaml"
        return op

    def deref(self, obj: dict) -> dict:
        while "$ref" in obj:
            _, obj = self.resolver.resolve(obj["$ref"])
        return obj

    def validate(self, schema: dict, instance, what: str):
        validator = jsonschema.Draft202012Validator(schema, resolver=self.resolver)
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        assert not errors, f"{what} does not match api/openapi.yaml:\n" + "\n".join(
            f"  at {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:8]) + \
            f"\n  instance: {json.dumps(instance)[:1500]}"

    def check_request_body(self, method: str, template: str, body):
        """A request the server accepted must be one the contract allows."""
        op = self.operation(method, template)
        rb = op.get("requestBody")
        if rb is None or not isinstance(body, (dict, list)):
            return
        schema = self.deref(rb)["content"].get("application/json", {}).get("schema")
        if schema is not None:
            self.validate(schema, body, f"the request body of {method} {template}")

    def check_response(self, method: str, template: str, status: int, headers: dict, body: bytes):
        op = self.operation(method, template)
        what = f"{method} {template} -> {status}"
        responses = op.get("responses", {})
        assert str(status) in responses, \
            f"{what}: status {status} is not documented (documented: {sorted(responses)}); body {body[:300]!r}"
        self.exercised.setdefault((method, template), set()).add(status)
        resp = self.deref(responses[str(status)])
        content = resp.get("content")
        if not content:
            assert status in (101, 204) or not body, f"{what}: documented without a body, got {body[:200]!r}"
            return None
        ctype = headers.get("content-type", "").split(";")[0].strip()
        assert ctype in content, f"{what}: content-type {ctype!r}, documented {sorted(content)}"
        schema = content[ctype].get("schema")
        if ctype == "application/json":
            parsed = json.loads(body)
            if schema is not None:
                self.validate(schema, parsed, what)
            return parsed
        if ctype == "application/x-ndjson":
            lines = [json.loads(x) for x in body.decode().split("\n") if x.strip()]
            for i, line in enumerate(lines):
                if schema is not None:
                    self.validate(schema, line, f"{what} line {i + 1}")
            return lines
        if schema is not None and schema.get("type") == "string" and ctype.startswith("text/"):
            return body.decode()
        return body


@pytest.fixture(scope="module")
def contract() -> Contract:
    return Contract(SPEC_PATH)


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """A spaced of this module's own: egress on (the network routes), a TCP listener (401/403), and
    snapshot keys (archives, rotation)."""
    if os.geteuid() != 0:
        pytest.skip("needs root (spaced)")
    if spacelib.missing_binaries():
        pytest.skip(f"SPACE binaries missing in {spacelib.bin_dir()}")
    if subprocess.run(["pgrep", "-x", "space-egress"], capture_output=True).stdout.split():
        pytest.skip("another SPACE egress gateway runs on this host; the network routes need their own")
    keys = tmp_path_factory.mktemp("keks")
    kek = []
    for name in ("a", "b"):
        p = keys / name
        p.write_bytes(os.urandom(32))
        p.chmod(0o600)
        kek.append(f"file:{p}")
    port = spacelib.free_port()
    config = {"pool_size": 0, "vm_pool_size": 0, "default_template": "busybox", "egress": True,
              "listen": f"127.0.0.1:{port}", "snapshot_kek": kek[1], "snapshot_kek_previous": kek[0]}
    baseline = baseline_uid_procs()
    d = start_daemon_with_busybox(config)
    d.tcp_port = port
    if "egress: on" not in d.log_path.read_text(errors="replace"):
        d.stop()
        d.force_cleanup()
        pytest.skip(f"spaced did not turn egress on:\n{d.log_tail()}")
    yield d
    problems = stop_and_check(d, baseline, 0)
    if not subprocess.run(["pgrep", "-x", "space-egress"], capture_output=True).stdout.split():
        subprocess.run(["nft", "delete", "table", "inet", "space"], capture_output=True)
    d.force_cleanup()
    assert not problems, "\n".join(problems)


class Caller:
    """Requests by (method, path template); every answer is checked against the contract."""

    def __init__(self, contract: Contract, client: Client):
        self.contract = contract
        self.client = client

    def __call__(self, method, template, expect, body=None, query="", headers=None, timeout=120, **params):
        path = template.format(**params) + (("?" + query) if query else "")
        status, hdrs, data = self.client.raw(method, path, body, headers, timeout)
        parsed = self.contract.check_response(method, template, status, hdrs, data)
        assert status == expect, f"{method} {path}: {status}, expected {expect}: {data[:500]!r}"
        if 200 <= status < 300:
            self.contract.check_request_body(method, template, body)
        return parsed


@pytest.fixture(scope="module")
def call(api, contract) -> Caller:
    return Caller(contract, api.client)


@pytest.fixture(scope="module")
def tcp(api, contract):
    """(anonymous caller, caller with a key) over the TCP listener."""
    key = api.client.call("POST", "/v1/keys", {"name": "contract-tcp"})
    anon = Caller(contract, Client(tcp=("127.0.0.1", api.tcp_port)))
    keyed = Caller(contract, Client(tcp=("127.0.0.1", api.tcp_port), api_key=key["secret"]))
    return anon, keyed


@pytest.fixture(scope="module")
def sb(api, call):
    made = call("POST", "/v1/sandboxes", 201, {"template": "busybox",
                                               "labels": {"suite": "contract"},
                                               "network": {"mode": "allow-list",
                                                           "rules": [{"action": "allow", "domain": "example.com"}]}})
    api.client.created.add(made["id"])
    yield made["id"]
    api.client.delete(made["id"], missing_ok=True)


MISSING = "sb-000000000000"


def test_system(call, tcp):
    anon, keyed = tcp
    call("GET", "/healthz", 200)
    anon("GET", "/healthz", 200)
    text = call("GET", "/metrics", 200)
    assert "space_sandboxes" in text
    anon("GET", "/metrics", 401)
    node = call("GET", "/v1/node", 200)
    assert node["egress"]["on"] is True, node
    anon("GET", "/v1/node", 401)
    keyed("GET", "/v1/node", 200)


def test_sandbox_lifecycle(api, call, tcp, sb):
    anon, _ = tcp
    call("POST", "/v1/sandboxes", 400, {"memory_mib": 1})
    call("POST", "/v1/sandboxes", 400, {"no_such_field": 1})
    call("POST", "/v1/sandboxes", 404, {"template": "no-such-template"})
    call("POST", "/v1/sandboxes", 413, {"labels": {"k": "v" * (1 << 20)}})
    anon("POST", "/v1/sandboxes", 401, {})
    listed = call("GET", "/v1/sandboxes", 200, query="label=suite%3Dcontract")
    assert [s["id"] for s in listed["sandboxes"]] == [sb]
    call("GET", "/v1/sandboxes", 400, query="state=sleeping")
    got = call("GET", "/v1/sandboxes/{id}", 200, id=sb)
    assert got["usage"]["oom_kills"] == 0, got
    call("GET", "/v1/sandboxes/{id}", 404, id=MISSING)
    call("GET", "/v1/sandboxes/{id}", 400, id="bad%20id")
    paused = call("POST", "/v1/sandboxes/{id}/pause", 200, id=sb)
    assert paused["state"] == "paused" and paused["auto_paused"] is False, paused
    call("POST", "/v1/sandboxes/{id}/exec", 409, {"cmd": ["true"]}, id=sb)
    call("POST", "/v1/sandboxes/{id}/pause", 404, id=MISSING)
    assert call("POST", "/v1/sandboxes/{id}/resume", 200, id=sb)["state"] == "running"
    call("POST", "/v1/sandboxes/{id}/resume", 404, id=MISSING)
    ttl = call("POST", "/v1/sandboxes/{id}/ttl", 200, {"ttl_s": 3600}, id=sb)
    assert ttl["ttl_s"] == 3600 and ttl["ttl_remaining_s"] > 3500, ttl
    assert call("POST", "/v1/sandboxes/{id}/ttl", 200, {"ttl_s": 0}, id=sb)["expires_at"] is None
    call("POST", "/v1/sandboxes/{id}/ttl", 400, {"add_s": 60}, id=sb)
    call("POST", "/v1/sandboxes/{id}/ttl", 404, {"ttl_s": 60}, id=MISSING)
    idle = call("POST", "/v1/sandboxes", 201, {"idle_pause_s": 3600})
    api.client.created.add(idle["id"])
    assert idle["idle_pause_s"] == 3600, idle
    assert call("DELETE", "/v1/sandboxes/{id}", 204, id=idle["id"]) is None
    call("DELETE", "/v1/sandboxes/{id}", 404, id=idle["id"])
    # progress=1 with nothing to report (a jail): the plain answer.
    quiet = call("POST", "/v1/sandboxes", 201, {"isolation": "jail"}, query="progress=1")
    api.client.created.add(quiet["id"])
    assert call("DELETE", "/v1/sandboxes/{id}", 204, id=quiet["id"]) is None
    call("POST", "/v1/sandboxes", 400, {}, query="progress=yes")


def test_exec_and_its_failures(call, sb):
    lines = call("POST", "/v1/sandboxes/{id}/exec", 200, {"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]},
                 id=sb)
    assert [x["type"] for x in lines][0] == "started" and lines[-1]["type"] == "exit", lines
    assert lines[-1]["exit_code"] == 3
    out = b"".join(base64.b64decode(x["data"]) for x in lines if x["type"] == "stdout")
    assert out == b"out\n"
    call("POST", "/v1/sandboxes/{id}/exec", 400, {"cmd": []}, id=sb)
    call("POST", "/v1/sandboxes/{id}/exec", 404, {"cmd": ["true"]}, id=MISSING)
    missing = call("POST", "/v1/sandboxes/{id}/exec", 404, {"cmd": ["/no/such/program"]}, id=sb)
    assert missing["error"]["reason"] == "executable_not_found", missing
    call("POST", "/v1/sandboxes/{id}/exec", 200, {"shell": "printf 'echo x' > /tmp/noexec; chmod 644 /tmp/noexec"},
         id=sb)
    denied = call("POST", "/v1/sandboxes/{id}/exec", 400, {"cmd": ["/tmp/noexec"]}, id=sb)
    assert denied["error"]["reason"] == "not_executable", denied
    # A missing cwd is also "not found", but not a missing program.
    cwd = call("POST", "/v1/sandboxes/{id}/exec", 404, {"cmd": ["true"], "cwd": "/no/such/dir"}, id=sb)
    assert "reason" not in cwd["error"], cwd


def test_exec_killed_for_memory(api, call):
    sb = call("POST", "/v1/sandboxes", 201, {"template": "busybox", "memory_mib": 64})["id"]
    api.client.created.add(sb)
    # dd's 200 MiB buffer is filled from /dev/zero, so its pages are really charged to the 64 MiB group.
    lines = call("POST", "/v1/sandboxes/{id}/exec", 200,
                 {"cmd": ["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"], "timeout_s": 120}, id=sb)
    exit_line = lines[-1]
    assert exit_line["type"] == "exit" and exit_line["signal"] == 9, lines[-3:]
    assert exit_line.get("oom_killed") is True and exit_line.get("memory_limit_mib") == 64, exit_line
    got = spacelib.wait_for(lambda: (lambda s: s if s.get("usage") else None)(api.client.get(sb)), 20, what="usage")
    assert got["usage"]["oom_kills"] >= 1, got
    api.client.delete(sb)


def test_processes(call, sb):
    proc = call("POST", "/v1/sandboxes/{id}/processes", 201, {"shell": "echo bg; exec sleep 1000"}, id=sb)
    call("POST", "/v1/sandboxes/{id}/processes", 400, {"cmd": ["true"], "timeout_s": 1}, id=sb)
    call("POST", "/v1/sandboxes/{id}/processes", 404, {"cmd": ["true"]}, id=MISSING)
    listed = call("GET", "/v1/sandboxes/{id}/processes", 200, id=sb)
    assert proc["id"] in {p["id"] for p in listed["processes"]}
    call("GET", "/v1/sandboxes/{id}/processes", 404, id=MISSING)
    spacelib.wait_for(lambda: any(x["type"] == "stdout" for x in call(
        "GET", "/v1/sandboxes/{id}/processes/{pid}/logs", 200, id=sb, pid=proc["id"])), 20, what="bg output")
    call("GET", "/v1/sandboxes/{id}/processes/{pid}/logs", 404, id=sb, pid="p999")
    assert call("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", 200, {"signal": "KILL"},
                id=sb, pid=proc["id"]) == {"signal": 9}
    lines = call("GET", "/v1/sandboxes/{id}/processes/{pid}/logs", 200, query="follow=1", id=sb, pid=proc["id"])
    assert lines[-1]["type"] == "exit" and lines[-1]["signal"] == 9, lines
    listed = call("GET", "/v1/sandboxes/{id}/processes", 200, id=sb)
    assert any(p["id"] == proc["id"] and not p["running"] and p["exit"]["signal"] == 9 for p in listed["processes"])
    call("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", 409, {"signal": "TERM"}, id=sb, pid=proc["id"])
    call("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", 404, {}, id=sb, pid="p999")
    call("POST", "/v1/sandboxes/{id}/processes/{pid}/signal", 400, {"signal": "NOPE"}, id=sb, pid=proc["id"])


def _upgrade(sock_path: str, target: str):
    """Sends a WebSocket upgrade request; returns the socket, the status, the headers and what followed them."""
    key = base64.b64encode(os.urandom(16)).decode()
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(sock_path)
    s.sendall((f"GET {target} HTTP/1.1\r\nHost: spaced\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
    return s, int(lines[0].split(" ", 2)[1]), headers, rest


def websocket_upgrade(sock_path: str, target: str) -> tuple[int, dict, bytes]:
    """The status, headers and body (for a refusal) of a WebSocket upgrade request."""
    s, status, headers, body = _upgrade(sock_path, target)
    while status != 101 and len(body) < int(headers.get("content-length", 0)):
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    # A terminal's client stays until the server has sent the exit (its last text message).
    while status == 101 and b'"type":"exit"' not in body:
        chunk = s.recv(4096)
        if not chunk:
            break
        body += chunk
    s.close()
    return status, headers, body if status != 101 else b""


def test_pty(api, call, contract, sb):
    status, headers, body = websocket_upgrade(api.sock, f"/v1/sandboxes/{sb}/pty?cmd=/bin/true")
    contract.check_response("GET", "/v1/sandboxes/{id}/pty", status, headers, body)
    assert status == 101, (headers, body)
    call("GET", "/v1/sandboxes/{id}/pty", 400, id=sb)  # not an upgrade
    status, headers, body = websocket_upgrade(api.sock, f"/v1/sandboxes/{MISSING}/pty")
    contract.check_response("GET", "/v1/sandboxes/{id}/pty", status, headers, body)
    assert status == 404, (headers, body)


def test_files(call, sb):
    assert call("POST", "/v1/sandboxes/{id}/files/mkdir", 201, {"path": "/tmp/contract/d/e", "parents": True},
                id=sb) == {"path": "/tmp/contract/d/e"}
    up = call("PUT", "/v1/sandboxes/{id}/files", 201, b"hello\n", query="path=/tmp/contract/a.txt&mode=0600", id=sb)
    assert up == {"path": "/tmp/contract/a.txt", "bytes": 6}
    call("PUT", "/v1/sandboxes/{id}/files", 400, b"x", query="path=relative", id=sb)
    assert call("GET", "/v1/sandboxes/{id}/files", 200, query="path=/tmp/contract/a.txt", id=sb) == b"hello\n"
    call("GET", "/v1/sandboxes/{id}/files", 404, query="path=/tmp/contract/none", id=sb)
    st = call("GET", "/v1/sandboxes/{id}/files/stat", 200, query="path=/tmp/contract/a.txt", id=sb)
    assert st["type"] == "file" and st["size"] == 6 and st["mode"] & 0o777 == 0o600, st
    call("GET", "/v1/sandboxes/{id}/files/stat", 404, query="path=/tmp/contract/none", id=sb)
    call("POST", "/v1/sandboxes/{id}/files/mkdir", 400, {"path": "/tmp/contract/d", "bogus": 1}, id=sb)
    moved = call("POST", "/v1/sandboxes/{id}/files/move", 200, {"from": "/tmp/contract/a.txt", "to": "/tmp/contract/b.txt"},
                 id=sb)
    assert moved == {"from": "/tmp/contract/a.txt", "to": "/tmp/contract/b.txt"}
    call("POST", "/v1/sandboxes/{id}/files/move", 404, {"from": "/tmp/contract/a.txt", "to": "/tmp/contract/c"}, id=sb)
    listing = call("GET", "/v1/sandboxes/{id}/files/list", 200, query="path=/tmp/contract", id=sb)
    assert sorted(e["name"] for e in listing["entries"]) == ["b.txt", "d"], listing
    call("GET", "/v1/sandboxes/{id}/files/list", 404, query="path=/tmp/none", id=sb)
    assert call("DELETE", "/v1/sandboxes/{id}/files", 204, query="path=/tmp/contract&recursive=1", id=sb) is None
    call("DELETE", "/v1/sandboxes/{id}/files", 404, query="path=/tmp/contract", id=sb)


def test_snapshots(api, call, sb, tmp_path):
    call("POST", "/v1/sandboxes/{id}/exec", 200, {"shell": "echo one > /root/state"}, id=sb)
    snap = call("POST", "/v1/sandboxes/{id}/snapshots", 201, {"name": "contract-one"}, id=sb)
    call("POST", "/v1/sandboxes/{id}/snapshots", 409, {"name": "contract-one"}, id=sb)
    call("POST", "/v1/sandboxes/{id}/snapshots", 404, {}, id=MISSING)
    history = call("GET", "/v1/sandboxes/{id}/snapshots", 200, id=sb)
    assert [s["id"] for s in history["snapshots"]] == [snap["id"]]
    call("GET", "/v1/sandboxes/{id}/snapshots", 404, id=MISSING)
    assert call("GET", "/v1/snapshots/{snap}", 200, snap=snap["id"])["name"] == "contract-one"
    call("GET", "/v1/snapshots/{snap}", 404, snap="snap-0000000000000000")
    archive = call("GET", "/v1/snapshots/{snap}/archive", 200, snap=snap["id"], timeout=300)
    assert len(archive) > 0
    call("GET", "/v1/snapshots/{snap}/archive", 404, snap="snap-0000000000000000")
    imported = call("POST", "/v1/sandboxes/{id}/snapshots/import", 201, archive, id=sb, timeout=300)
    assert imported["origin"] == "import", imported
    call("POST", "/v1/sandboxes/{id}/snapshots/import", 400, b"not an archive", id=sb)
    call("POST", "/v1/sandboxes/{id}/exec", 200, {"shell": "echo two > /root/state"}, id=sb)
    rolled = call("POST", "/v1/sandboxes/{id}/rollback", 200, {"snapshot": "contract-one"}, id=sb, timeout=300)
    assert rolled["id"] == sb and rolled["capabilities"]["rollback"] is True
    assert api.client.sh(sb, "cat /root/state").out == "one\n"
    call("POST", "/v1/sandboxes/{id}/rollback", 400, {}, id=sb)
    call("POST", "/v1/sandboxes/{id}/rollback", 404, {"snapshot": "no-such-snapshot"}, id=sb)
    forked = call("POST", "/v1/sandboxes/{id}/fork", 201, {"count": 1, "snapshot": snap["id"]}, id=sb, timeout=300)
    for child in forked["sandboxes"]:
        api.client.created.add(child["id"])
        api.client.delete(child["id"])
    call("POST", "/v1/sandboxes/{id}/fork", 400, {"count": 0}, id=sb)
    call("POST", "/v1/sandboxes/{id}/fork", 404, {}, id=MISSING)
    assert call("DELETE", "/v1/snapshots/{snap}", 204, snap=imported["id"]) is None
    call("DELETE", "/v1/snapshots/{snap}", 404, snap=imported["id"])


def test_templates(api, call, tmp_path):
    listed = call("GET", "/v1/templates", 200)
    assert "busybox" in {t["name"] for t in listed["templates"]}
    # Its own content: templates are content-addressed, and busybox's tree is in use by the module's sandbox.
    root = tmp_path / "rootfs"
    shutil.copytree(busybox_rootfs_dir(), root, symlinks=True)
    (root / "etc" / "contract-template").write_text("distinct\n")
    root.chmod(0o755)
    lines = call("POST", "/v1/templates", 200, {"name": "contract-tpl", "kind": "dir", "path": str(root)}, timeout=600)
    assert lines[-1]["type"] == "done" and lines[-1]["template"]["name"] == "contract-tpl", lines[-3:]
    call("POST", "/v1/templates", 400, {"name": "contract-bad", "kind": "zip"})
    # The same tree uploaded: the same content-addressed id.
    tarball = tmp_path / "rootfs.tar.gz"
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-czf", str(tarball), "."], check=True)
    uploaded = call("PUT", "/v1/templates/{name}/archive", 200, tarball.read_bytes(), name="contract-up",
                    headers={"Content-Type": "application/x-tar"}, timeout=600)
    assert uploaded[-1]["type"] == "done" and uploaded[-1]["template"]["id"] == lines[-1]["template"]["id"], uploaded[-3:]
    call("PUT", "/v1/templates/{name}/archive", 400, b"not a tar stream" * 64, name="contract-up-bad",
         headers={"Content-Type": "application/x-tar"})
    assert call("DELETE", "/v1/templates/{name}", 204, name="contract-up") is None
    vm = api.client.call("GET", "/v1/node")["isolation"].get("vm", {})
    if vm.get("available"):
        assert call("POST", "/v1/templates/{name}/warm", 200, name="contract-tpl", timeout=600)["template"] == "contract-tpl"
    else:
        call("POST", "/v1/templates/{name}/warm", 501, name="contract-tpl")
    call("POST", "/v1/templates/{name}/warm", 404, name="no-such-template")
    call("DELETE", "/v1/templates/{name}", 409, name="busybox")  # the module's sandbox uses it
    assert call("DELETE", "/v1/templates/{name}", 204, name="contract-tpl") is None
    call("DELETE", "/v1/templates/{name}", 404, name="contract-tpl")


def test_keys(call, tcp):
    anon, keyed = tcp
    made = call("POST", "/v1/keys", 201, {"name": "contract-key"})
    assert made["secret"] and made["revoked_ms"] == 0
    call("POST", "/v1/keys", 400, {"name": ""})
    keyed("POST", "/v1/keys", 403, {"name": "escalate"})
    keyed("POST", "/v1/templates", 403, {"name": "remote-path", "kind": "dir", "path": "/etc"})
    anon("PUT", "/v1/templates/{name}/archive", 401, b"", name="remote-up", headers={"Content-Type": "application/x-tar"})
    assert "contract-key" in {k["name"] for k in call("GET", "/v1/keys", 200)["keys"]}
    keyed("GET", "/v1/keys", 403)
    assert call("POST", "/v1/keys/rotate", 200, {})["rewrapped"] >= 0
    call("POST", "/v1/keys/rotate", 400, {"extra": 1})
    keyed("POST", "/v1/keys/rotate", 403, {})
    keyed("DELETE", "/v1/keys/{key}", 403, key=made["id"])
    assert call("DELETE", "/v1/keys/{key}", 204, key=made["id"]) is None
    call("DELETE", "/v1/keys/{key}", 404, key="key-does-not-exist")
    keyed("POST", "/v1/keys/purge", 403, {})
    call("POST", "/v1/keys/purge", 400, {"older_than_s": -1})
    assert call("POST", "/v1/keys/purge", 200, {"older_than_s": 3600})["purged"] == 0
    assert call("POST", "/v1/keys/purge", 200, {})["purged"] >= 1
    assert made["id"] not in {k["id"] for k in call("GET", "/v1/keys", 200)["keys"]}


def test_network_and_secrets(api, call, sb):
    view = call("GET", "/v1/sandboxes/{id}/network", 200, id=sb)
    assert view["mode"] == "allow-list" and view["subnet"] and view["secrets"] == [], view
    call("GET", "/v1/sandboxes/{id}/network", 404, id=MISSING)
    put = call("PUT", "/v1/sandboxes/{id}/network", 200, {"mode": "deny-all", "rules": []}, id=sb)
    assert put["mode"] == "deny-all" and put["rules"] == []
    call("PUT", "/v1/sandboxes/{id}/network", 400, {"mode": "everything"}, id=sb)
    call("PUT", "/v1/sandboxes/{id}/network", 404, {"mode": "deny-all"}, id=MISSING)
    # A denied lookup gives the audit something to say.
    api.client.sh(sb, "nslookup contract.example.com >/dev/null 2>&1; true", timeout_s=30)
    lines = spacelib.wait_for(lambda: call("GET", "/v1/sandboxes/{id}/network/log", 200, id=sb) or None, 20,
                              what="an audit line")
    assert all(line.get("sandbox") in (sb, None) for line in lines), lines[:3]
    call("GET", "/v1/sandboxes/{id}/network/log", 404, id=MISSING)
    call("GET", "/v1/sandboxes/{id}/network/log", 400, query="tail=5", id=sb)
    stored = call("POST", "/v1/secrets", 201, {"name": "CONTRACT_TOKEN", "value": "s3cret", "hosts": ["api.example.com"],
                                               "format": "Bearer {}"})
    assert stored["name"] == "CONTRACT_TOKEN" and "value" not in stored
    call("POST", "/v1/secrets", 400, {"name": "CONTRACT_TOKEN", "value": "x"})
    assert "CONTRACT_TOKEN" in {s["name"] for s in call("GET", "/v1/secrets", 200)["secrets"]}
    assert call("DELETE", "/v1/secrets/{name}", 204, name="CONTRACT_TOKEN") is None
    call("DELETE", "/v1/secrets/{name}", 404, name="CONTRACT_TOKEN")


def exec_session(sock_path: str, sid: str, request: dict) -> tuple[int, dict, list]:
    """Upgrades GET .../exec, sends the request as one masked text frame, and returns the status, the
    headers and the server's text messages (parsed) up to its close."""
    s, status, headers, rest = _upgrade(sock_path, f"/v1/sandboxes/{sid}/exec")
    if status != 101:
        s.close()
        return status, headers, []
    payload = json.dumps(request).encode()
    mask = os.urandom(4)
    assert len(payload) < 126
    s.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    messages, buf = [], rest
    while True:
        while len(buf) < 2 or len(buf) < 2 + (buf[1] & 0x7F if buf[1] & 0x7F < 126 else 0):
            chunk = s.recv(65536)
            if not chunk:
                s.close()
                return status, headers, messages
            buf += chunk
        opcode, n, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if n == 126:
            while len(buf) < 4:
                buf += s.recv(65536)
            n, at = int.from_bytes(buf[2:4], "big"), 4
        while len(buf) < at + n:
            buf += s.recv(65536)
        frame, buf = buf[at:at + n], buf[at + n:]
        if opcode == 8:
            s.close()
            return status, headers, messages
        if opcode == 1:
            messages.append(json.loads(frame))


def test_exec_session(api, call, contract, sb):
    status, headers, messages = exec_session(api.sock, sb, {"cmd": ["sh", "-c", "echo hi; exit 3"], "stdin": False})
    contract.check_response("GET", "/v1/sandboxes/{id}/exec", status, headers, b"")
    assert status == 101, headers
    assert messages[0]["type"] == "started" and messages[-1]["type"] == "exit", messages
    assert messages[-1]["exit_code"] == 3, messages
    for m in messages:  # the text messages are the POST stream's events
        contract.validate({"$ref": "#/components/schemas/ExecEvent"}, m, "an exec session message")
    call("GET", "/v1/sandboxes/{id}/exec", 400, id=sb)  # not an upgrade
    status, headers, _ = exec_session(api.sock, MISSING, {"cmd": ["true"]})
    assert status == 404, headers


def test_file_trees(call, sb):
    import io
    import tarfile
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in (("tree/a.txt", b"alpha\n"), ("tree/sub/b.txt", b"beta\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    done = call("PUT", "/v1/sandboxes/{id}/files/archive", 201, packed.getvalue(), query="path=/tmp/trees",
                headers={"Content-Type": "application/x-tar"}, id=sb)
    assert done["files"] == 2 and done["skipped"] == 0, done
    got = call("GET", "/v1/sandboxes/{id}/files/archive", 200, query="path=/tmp/trees/tree", id=sb)
    with tarfile.open(fileobj=io.BytesIO(got)) as tar:
        names = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert names == ["tree/a.txt", "tree/sub/b.txt"], names
    call("GET", "/v1/sandboxes/{id}/files/archive", 404, query="path=/tmp/none", id=sb)


def test_drain_last(call, tcp):
    """Last but one: a drained node takes no new sandboxes, so nothing after this creates any."""
    anon, keyed = tcp
    keyed("POST", "/v1/node/drain", 403, {})
    call("POST", "/v1/node/drain", 400, {"delete_sandboxes": "yes"})
    out = call("POST", "/v1/node/drain", 200, {})
    assert out["draining"] is True and out["sandboxes_left"] >= 1, out
    call("POST", "/v1/sandboxes", 503, {"template": "busybox"})


def test_every_operation_was_exercised(request, contract):
    """Last: every operation of the contract was driven to a success answer above."""
    module_tests = [i for i in request.session.items if i.module is request.module]
    if len(module_tests) != len([n for n in dir(request.module) if n.startswith("test_")]):
        pytest.skip("only part of this module ran; coverage is judged when all of it runs")
    failed = request.session.testsfailed
    if failed:
        pytest.skip(f"{failed} test(s) failed before this one; coverage would be misleading")
    missing, no_success = [], []
    for method, template, _ in contract.operations():
        statuses = contract.exercised.get((method, template))
        if not statuses:
            missing.append(f"{method} {template}")
        elif not any(s < 300 for s in statuses):
            no_success.append(f"{method} {template} (only {sorted(statuses)})")
    assert not missing, "operations of api/openapi.yaml no test drove:\n  " + "\n  ".join(missing)
    assert not no_success, "operations never answered with success:\n  " + "\n  ".join(no_success)
