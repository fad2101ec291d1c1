"""The peers measured in the same run: bubblewrap and gVisor runsc, one-shot starts of /bin/echo in the
bench's rootfs, timed to the first byte of output."""

import os
import shutil
import subprocess
import time


def first_byte_ms(argv, expect=b"hi"):
    """Wall time from spawning argv to the first byte on its stdout; checks the whole output."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    first = os.read(p.stdout.fileno(), 1)
    t1 = time.perf_counter()
    rest, err = p.communicate(timeout=60)
    out = first + rest
    if p.returncode != 0 or expect not in out:
        raise RuntimeError(f"{' '.join(argv)}: rc={p.returncode} out={out[:200]!r} err={err[-500:]!r}")
    return (t1 - t0) * 1000.0


class Peers:
    def __init__(self, rootfs, workdir, notes):
        self.rootfs = rootfs
        self.notes = notes
        self.bwrap = None
        self.runsc = None
        bw = shutil.which("bwrap")
        if bw:
            argv = [bw, "--unshare-all", "--die-with-parent", "--ro-bind", rootfs, "/", "--proc", "/proc",
                    "--dev", "/dev", "/bin/echo", "hi"]
            try:
                first_byte_ms(argv)
                self.bwrap = argv
                notes["peer.bwrap.oneshot"] = {"cmd": " ".join(argv)}
            except Exception as e:  # noqa: BLE001 - recorded, not hidden
                notes["peer.bwrap.oneshot"] = {"error": str(e)}
        else:
            notes["peer.bwrap.oneshot"] = {"error": "bwrap not installed"}
        rs = shutil.which("runsc")
        if rs:
            state = os.path.join(workdir, "runsc-state")
            os.makedirs(state, exist_ok=True)
            errors = []
            for extra in ([], ["--platform=ptrace"]):
                argv = [rs, f"--root={state}", *extra, "--network=none", "do", "-root", rootfs, "-cwd", "/",
                        "/bin/echo", "hi"]
                try:
                    first_byte_ms(argv)
                    self.runsc = argv
                    ver = subprocess.run([rs, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
                    notes["peer.runsc.oneshot"] = {"cmd": " ".join(argv), "version": ver,
                                                   "platform": "default (ptrace in this version)" if not extra
                                                   else "ptrace"}
                    break
                except Exception as e:  # noqa: BLE001
                    errors.append(str(e))
            if not self.runsc:
                notes["peer.runsc.oneshot"] = {"error": errors}
        else:
            notes["peer.runsc.oneshot"] = {"error": "runsc not installed"}
