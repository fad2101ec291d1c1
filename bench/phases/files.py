"""File transfer through the API: upload and download throughput of one large file."""

import os
import time

from lib.client import ApiError

from phases.common import TEMPLATE, MiB, summarize


def phase_files(d, size_mib, runs, res, notes):
    c = d.client
    # Room for both files and the temporary copy an upload writes before it replaces one.
    sb = d.create({"template": TEMPLATE, "disk_mib": size_mib * 3 + 256})
    sid = sb["id"]
    block = os.urandom(MiB)
    up, down = [], []
    try:
        for r in range(runs):
            path = f"/v1/sandboxes/{sid}/files?path=/tmp/bench-{r % 2}"

            def body():
                for _ in range(size_mib):
                    yield block

            t0 = time.perf_counter()
            c.conn.request("PUT", path, body=body(),
                           headers={"Content-Length": str(size_mib * MiB),
                                    "Content-Type": "application/octet-stream"})
            resp = c.conn.getresponse()
            data = resp.read()
            t1 = time.perf_counter()
            if resp.status not in (200, 201, 204):
                raise ApiError(resp.status, data, "PUT", path)
            up.append(size_mib / (t1 - t0))

            t0 = time.perf_counter()
            c.conn.request("GET", path)
            resp = c.conn.getresponse()
            got = 0
            if resp.status != 200:
                raise ApiError(resp.status, resp.read(), "GET", path)
            while True:
                chunk = resp.read(MiB)
                if not chunk:
                    break
                got += len(chunk)
            t1 = time.perf_counter()
            if got != size_mib * MiB:
                raise RuntimeError(f"download: got {got} bytes, want {size_mib * MiB}")
            down.append(size_mib / (t1 - t0))
        res["files.upload_mib_s"] = summarize(up, "MiB/s")
        res["files.download_mib_s"] = summarize(down, "MiB/s")
        note = {"runs": runs, "size_mib": size_mib, "upload": "PUT with Content-Length, 1 MiB writes",
                "download": "GET, 1 MiB reads; size verified"}
        notes["files.upload_mib_s"] = note
        notes["files.download_mib_s"] = note
    finally:
        d.delete(sid)
