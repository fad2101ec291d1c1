"""The space CLI against the real daemon."""

import json
import os
import re

import pytest

import spacelib

ID_RE = re.compile(r"^sb-[0-9a-f]{12}$")


@pytest.fixture
def cli(daemon):
    made = []

    def run(*args, **kw):
        r = spacelib.run_cli(daemon.sock, *args, **kw)
        for sid in spacelib.SANDBOX_ID_RE.findall(r.stdout.decode(errors="replace")):
            if args and args[0] in ("create", "run"):
                made.append(sid)
                daemon.client.created.add(sid)
        return r

    run.made = made
    yield run
    for sid in made:
        daemon.client.delete(sid, missing_ok=True)


def out(r):
    return r.stdout.decode(errors="replace")


def err(r):
    return r.stderr.decode(errors="replace")


def test_create_prints_only_an_id(cli, client):
    r = cli("create", "--template", "busybox", "--label", "via=cli")
    assert r.returncode == 0, err(r)
    sid = out(r).strip()
    assert ID_RE.match(sid), repr(out(r))
    assert out(r) == sid + "\n"
    cli.made.append(sid)
    sb = client.get(sid)
    assert sb["labels"] == {"via": "cli"}
    assert sb["state"] == "running"


def test_create_with_options(cli, client):
    r = cli("create", "--template", "busybox", "--cpus", "0.5", "--memory", "256M", "--pids", "128",
            "--disk", "128M", "--env", "GREETING=hi there", "--ttl", "300s")
    assert r.returncode == 0, err(r)
    sid = out(r).strip()
    cli.made.append(sid)
    sb = client.get(sid)
    assert sb["limits"]["memory_mib"] == 256
    assert sb["limits"]["pids"] == 128
    assert sb["limits"]["disk_mib"] == 128
    assert sb["limits"]["cpus"] == pytest.approx(0.5)
    assert sb.get("expires_at")
    assert client.sh(sid, "echo $GREETING").out == "hi there\n"


def test_exec_output_and_exit_code(cli, sandbox):
    r = cli("exec", sandbox, "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 7")
    assert r.returncode == 7, (r.returncode, err(r))
    assert out(r) == "to-out\n"
    assert "to-err\n" in err(r)
    r = cli("exec", sandbox, "--", "true")
    assert r.returncode == 0
    r = cli("exec", sandbox, "--", "sh", "-c", "kill -9 $$")
    assert r.returncode == 128 + 9, r.returncode


def test_exec_options(cli, sandbox):
    r = cli("exec", "--env", "A=1", "--cwd", "/tmp", "--user", "user", sandbox, "--", "sh", "-c",
            'echo "$A $(pwd) $(id -u)"')
    if r.returncode != 0:
        # options after the id
        r = cli("exec", sandbox, "--env", "A=1", "--cwd", "/tmp", "--user", "user", "--", "sh", "-c",
                'echo "$A $(pwd) $(id -u)"')
    assert r.returncode == 0, err(r)
    assert out(r) == "1 /tmp 1000\n"


def test_exec_timeout_is_124(cli, sandbox):
    r = cli("exec", sandbox, "--timeout", "1s", "--", "sleep", "60")
    if r.returncode not in (124,):
        r = cli("exec", sandbox, "--timeout", "1", "--", "sleep", "60")
    assert r.returncode == 124, (r.returncode, err(r))


def test_exec_stdin_is_forwarded(cli, sandbox):
    r = cli("exec", "-i", sandbox, "--", "cat", input=b"piped in\n")
    assert r.returncode == 0, err(r)
    assert out(r) == "piped in\n"


def test_run(cli, client):
    before = {s["id"] for s in client.list()}
    r = cli("run", "--template", "busybox", "--", "sh", "-c", "echo from-run; exit 3")
    assert r.returncode == 3, err(r)
    assert "from-run\n" in out(r)
    # run is one-shot: the sandbox is gone afterwards
    after = {s["id"] for s in client.list()}
    assert not (after - before), f"run left sandboxes behind: {after - before}"


def test_cp_both_directions(cli, sandbox, tmp_path):
    src = tmp_path / "in.bin"
    data = os.urandom(300_000)
    src.write_bytes(data)
    r = cli("cp", str(src), f"{sandbox}:/tmp/in.bin")
    assert r.returncode == 0, err(r)
    import hashlib
    dst = tmp_path / "out.bin"
    r = cli("cp", f"{sandbox}:/tmp/in.bin", str(dst))
    assert r.returncode == 0, err(r)
    assert dst.read_bytes() == data
    r = cli("exec", sandbox, "--", "sha256sum", "/tmp/in.bin")
    assert out(r).split()[0] == hashlib.sha256(data).hexdigest()


def test_cp_missing_file_fails(cli, sandbox, tmp_path):
    r = cli("cp", f"{sandbox}:/no/such/file", str(tmp_path / "x"))
    assert r.returncode != 0
    assert err(r).strip(), "an error message is expected on stderr"
    assert not (tmp_path / "x").exists() or (tmp_path / "x").stat().st_size == 0


def test_ls_json_and_inspect_and_rm(cli, client):
    r = cli("create", "--template", "busybox", "--label", "k=v")
    sid = out(r).strip()
    cli.made.append(sid)
    r = cli("ls", "--json")
    assert r.returncode == 0, err(r)
    data = json.loads(out(r))
    items = data["sandboxes"] if isinstance(data, dict) else data
    assert sid in {s["id"] for s in items}
    r = cli("ls")
    assert r.returncode == 0 and sid in out(r)
    r = cli("inspect", sid)
    assert r.returncode == 0, err(r)
    assert sid in out(r)
    r = cli("rm", sid)
    assert r.returncode == 0, err(r)
    assert sid not in {s["id"] for s in client.list()}
    r = cli("inspect", sid)
    assert r.returncode != 0
    assert "not found" in err(r).lower() or "no sandbox" in err(r).lower(), err(r)


def test_background_processes_via_cli(cli, sandbox):
    r = cli("start", sandbox, "--", "sh", "-c", "echo bg-out; exec sleep 1000")
    assert r.returncode == 0, err(r)
    proc = out(r).strip().split()[0]
    r = cli("ps", sandbox)
    assert r.returncode == 0 and "sleep" in out(r), out(r)
    r = spacelib.wait_for(lambda: (lambda x: x if "bg-out" in out(x) else None)(cli("logs", sandbox, proc)),
                          timeout=20, what="logs via cli")
    assert out(r) == "bg-out\n"
    r = cli("kill", sandbox, proc, "TERM")
    assert r.returncode == 0, err(r)
    r = cli("logs", sandbox, proc, "-f", timeout=60)
    assert r.returncode in (0, 128 + 15), (r.returncode, err(r))


def test_rollback_and_fork_take_restore_options_and_state_the_hazard(cli, sandbox):
    snap = out(cli("snapshot", sandbox)).strip()
    r = cli("rollback", sandbox, snap, "--on-restore", "kill")
    assert r.returncode == 0, err(r)
    r = cli("rollback", sandbox, snap, "--on-restore", "signal", "--restore-signal", "USR2")
    assert r.returncode == 0, err(r)
    # The daemon judges the combination: a signal for kill is refused with the field's name.
    r = cli("rollback", sandbox, snap, "--on-restore", "kill", "--restore-signal", "URG")
    assert r.returncode != 0 and "restore_signal" in err(r), err(r)
    r = cli("fork", sandbox, "--on-restore", "restart")
    assert r.returncode != 0 and "on-restore" in err(r), err(r)
    for command in ("fork", "rollback"):
        text = out(cli(command, "--help"))
        assert "/run/space/generation" in text and "--on-restore" in text and "ECDSA" in text, text


def test_templates_and_keys_via_cli(cli):
    r = cli("template", "ls")
    assert r.returncode == 0 and "busybox" in out(r), out(r)
    r = cli("key", "create", "cli-test-key")
    assert r.returncode == 0, err(r)
    r = cli("key", "ls")
    assert r.returncode == 0 and "cli-test-key" in out(r), out(r)
    r = cli("key", "revoke", "cli-test-key")
    assert r.returncode == 0, err(r)


def test_unreachable_daemon(binaries, tmp_path):
    r = spacelib.run_cli(str(tmp_path / "nonexistent.sock"), "ls")
    assert r.returncode != 0
    msg = err(r).lower()
    assert "nonexistent" in msg or "connect" in msg or "reach" in msg, err(r)
    assert "spaced" in msg or "daemon" in msg or "connect" in msg, err(r)
    r = spacelib.run_cli("/nonexistent", "ls", env={"SPACE_HOST": "unix:///nonexistent"})
    assert r.returncode != 0
    assert err(r).strip()


def test_unknown_sandbox_and_bad_usage(cli):
    r = cli("exec", "sb-000000000000", "--", "true")
    assert r.returncode != 0 and ("not found" in err(r).lower() or "no sandbox" in err(r).lower()), err(r)
    r = cli("no-such-command")
    assert r.returncode != 0 and err(r).strip()
    r = cli("create", "--memory", "lots")
    assert r.returncode != 0 and err(r).strip()


def test_node(cli):
    r = cli("node", "--json")
    assert r.returncode == 0, err(r)
    node = json.loads(out(r))
    assert node["isolation"]["jail"]["available"] is True, node
    r = cli("node")
    assert r.returncode == 0, err(r)
    lines = out(r).splitlines()
    assert lines[0].split() == ["TIER", "AVAILABLE", "ACCEL", "NOTES"], out(r)
    assert any(line.split()[:2] == ["jail", "yes"] for line in lines), out(r)
    assert f"auto isolation: {node['isolation']['auto']}" in lines, out(r)
    vm = node["isolation"].get("vm", {})
    if vm.get("available") is False:
        # a tier that is not there says why on its own line
        assert any(line.split()[:2] == ["vm", "no"] and vm.get("reason", "") in line for line in lines), out(r)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_exec_json_is_ndjson_events_and_a_final_exit(cli, sandbox):
    r = cli("--json", "exec", sandbox, "--", "sh", "-c", "echo out; echo err >&2; exit 5")
    assert r.returncode == 5, err(r)
    events = json_lines(out(r))
    assert events[0]["type"] == "started" and isinstance(events[0]["pid"], int), events
    import base64
    assert b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout") == b"out\n"
    assert b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stderr") == b"err\n"
    assert events[-1] == {"type": "exit", "exit_code": 5, "signal": 0, "timed_out": False, "exit_status": 5}, events
    assert err(r) == "", "with --json the output is all on stdout as events"


def test_run_json_names_its_sandbox_first(cli, client):
    r = cli("--json", "run", "--template", "busybox", "--", "true")
    assert r.returncode == 0, err(r)
    events = json_lines(out(r))
    assert events[0]["type"] == "sandbox" and ID_RE.match(events[0]["id"]), events
    assert events[-1]["type"] == "exit" and events[-1]["exit_status"] == 0, events
    assert events[0]["id"] not in {s["id"] for s in client.list()}


def test_missing_and_non_executable_programs_exit_127_and_126(cli, client, sandbox):
    r = cli("exec", sandbox, "--", "/no/such/program")
    assert r.returncode == 127, (r.returncode, err(r))
    assert "/no/such/program" in err(r) and "not found" in err(r), err(r)
    r = cli("exec", sandbox, "--", "no-such-program-on-path")
    assert r.returncode == 127, (r.returncode, err(r))
    client.sh(sandbox, "echo 'echo hi' > /tmp/plain; chmod 644 /tmp/plain")
    r = cli("exec", sandbox, "--", "/tmp/plain")
    assert r.returncode == 126, (r.returncode, err(r))
    assert "cannot execute" in err(r), err(r)
    # A program that runs and exits 127 itself is still its own exit code, and a missing sandbox is not 127.
    assert cli("exec", sandbox, "--", "sh", "-c", "exit 127").returncode == 127
    assert cli("exec", "sb-000000000000", "--", "true").returncode == 1
    r = cli("--json", "exec", sandbox, "--", "/no/such/program")
    assert r.returncode == 127 and out(r) == "", (r.returncode, out(r))
    e = json.loads(err(r))["error"]
    assert e["code"] == "not_found" and e["reason"] == "executable_not_found", e


def test_memory_limit_kill_is_137_with_its_reason(cli, client):
    r = cli("create", "--template", "busybox", "--memory", "64M")
    assert r.returncode == 0, err(r)
    sid = out(r).strip()
    cli.made.append(sid)
    # dd fills a 200 MiB buffer from /dev/zero: its pages are really charged to the 64 MiB group.
    r = cli("exec", sid, "--", "dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1", timeout=180)
    assert r.returncode == 137, (r.returncode, err(r))
    assert "killed: memory limit 64 MiB" in err(r), err(r)
    r = cli("--json", "inspect", sid)
    assert r.returncode == 0, err(r)
    assert json.loads(out(r))["usage"]["oom_kills"] >= 1, out(r)
    # An ordinary SIGKILL is not reported as the memory limit's.
    r = cli("exec", sid, "--", "sh", "-c", "kill -9 $$")
    assert r.returncode == 137 and "memory limit" not in err(r), err(r)


def test_json_result_objects(cli, client, sandbox, tmp_path):
    src = tmp_path / "f.txt"
    src.write_bytes(b"12345")
    r = cli("--json", "cp", str(src), f"{sandbox}:/tmp/f.txt")
    assert r.returncode == 0, err(r)
    assert json.loads(out(r)) == {"from": str(src), "to": f"{sandbox}:/tmp/f.txt", "bytes": 5}
    r = cli("--json", "cp", f"{sandbox}:/tmp/f.txt", str(tmp_path / "back.txt"))
    assert r.returncode == 0, err(r)
    assert json.loads(out(r)) == {"from": f"{sandbox}:/tmp/f.txt", "to": str(tmp_path / "back.txt"), "bytes": 5}

    proc = json.loads(out(cli("--json", "start", sandbox, "--", "sleep", "1000")))["id"]
    r = cli("--json", "kill", sandbox, proc, "KILL")
    assert r.returncode == 0, err(r)
    assert json.loads(out(r)) == {"sandbox": sandbox, "process": proc, "signal": 9}

    r = cli("--json", "pause", sandbox)
    assert r.returncode == 0, err(r)
    paused = json.loads(out(r))
    assert paused["id"] == sandbox and paused["state"] == "paused", paused
    r = cli("--json", "resume", sandbox)
    assert r.returncode == 0, err(r)
    assert json.loads(out(r))["state"] == "running"

    r = cli("--json", "rm", sandbox, "sb-000000000000")
    assert r.returncode == 1
    assert json_lines(out(r)) == [{"id": sandbox, "deleted": True}], out(r)
    e = json.loads(err(r))["error"]
    assert e["code"] == "not_found" and "sb-000000000000" in e["message"] and e["hint"], e


def test_json_lists_are_the_daemons_objects(cli, sandbox):
    for args, key in ((("ls",), "sandboxes"), (("template", "ls"), "templates"), (("key", "ls"), "keys"),
                      (("ps", sandbox), "processes"), (("history", sandbox), "snapshots")):
        r = cli("--json", *args)
        assert r.returncode == 0, (args, err(r))
        j = json.loads(out(r))
        assert isinstance(j, dict) and isinstance(j[key], list), (args, j)


def test_json_errors_go_to_stderr(cli):
    r = cli("--json", "inspect", "sb-000000000000")
    assert r.returncode == 1 and out(r) == ""
    e = json.loads(err(r))["error"]
    assert e["code"] == "not_found" and e["message"], e
    # The session daemon runs without egress: secret rm is refused, as one JSON error.
    r = cli("--json", "secret", "rm", "NOPE")
    assert r.returncode == 1 and out(r) == ""
    assert json.loads(err(r))["error"]["code"] in ("unsupported", "not_found"), err(r)
