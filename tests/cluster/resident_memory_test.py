#!/usr/bin/env python3
"""A worker's resident memory is its shard.

A random-weight model of a few GiB (`strata synth --shape llama-3-70b
--blocks 4`: four 70B-shaped blocks, Llama 3's embedding and head; made once
and kept at --model, so a rerun does not write it again) is loaded by one
`strata-worker` process as the last stage (blocks [2, 4), the output norm
and head) with a LoadShard call; the call returns when the shard is loaded,
and the pages are then read from /proc:

  - per tensor, the pages of the GGUF mapping present in the worker's page
    table (/proc/PID/pagemap, bit 63): the shard's tensors may be resident,
    the other stage's (token_embd, blocks 0 and 1) must be untouched;
  - the mapping's resident set (/proc/PID/smaps Rss) is at most the shard's
    bytes;
  - the process's resident set (VmRSS, RssAnon, RssFile of
    /proc/PID/status) is about the shard: its weights once (the generated
    kernels' packed copies, anonymous memory, replace the file's pages,
    which the worker drops once packed), well under the whole file.

The figures are printed. Exit status: 0 passed, 1 failed, 77 skipped (not
Linux, grpcio or gguf absent, or not enough free memory or disk).
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster_test as ct  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20
SYNTH = ["--shape", "llama-3-70b", "--type", "Q4_0", "--blocks", "4"]
FIRST, LAST, N_LAYER = 2, 4, 4


def status_fields(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                out[k] = int(v.split()[0]) * 1024
    return out


def mappings(pid, path):
    """[(start, end, file offset, Rss bytes)] of the mappings of `path`."""
    real = os.path.realpath(path)
    maps, cur = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:
                cur = None
                if len(fields) >= 6 and os.path.realpath(fields[5]) == real:
                    a, b = (int(x, 16) for x in fields[0].split("-"))
                    cur = [a, b, int(fields[2], 16), 0]
                    maps.append(cur)
            elif cur is not None and fields[0] == "Rss:":
                cur[3] = int(fields[1]) * 1024
    return [tuple(m) for m in maps]


def present_pages(pid, start, end):
    """A bytes object, one byte per page of [start, end): 1 when the page is
    present in the process's page table (pagemap bit 63)."""
    page = os.sysconf("SC_PAGE_SIZE")
    n = (end - start) // page
    out = bytearray(n)
    with open(f"/proc/{pid}/pagemap", "rb") as f:
        f.seek(start // page * 8)
        chunk = 1 << 16
        for i in range(0, n, chunk):
            data = f.read(8 * min(chunk, n - i))
            for j, (e,) in enumerate(struct.iter_unpack("<Q", data)):
                out[i + j] = e >> 63
    return bytes(out)


def tensor_ranges(path):
    """{name: (file offset, bytes)} of the GGUF's tensors."""
    import gguf
    r = gguf.GGUFReader(path)
    return {t.name: (int(t.data_offset), int(t.n_bytes)) for t in r.tensors}


def in_shard(name):
    if name.startswith("blk."):
        return FIRST <= int(name.split(".")[1]) < LAST
    return name in ("output_norm.weight", "output.weight")


def main():
    ap = argparse.ArgumentParser()
    for a in ("--strata", "--worker", "--model", "--proto-dir"):
        ap.add_argument(a, required=True)
    args = ap.parse_args()
    if not os.path.exists("/proc/self/pagemap"):
        ct.skip("no /proc/PID/pagemap (Linux only)")
    try:
        import gguf  # noqa: F401
    except ImportError:
        ct.skip("the gguf Python package is absent (scripts/install-test-tools.sh)")
    avail = status_meminfo("MemAvailable")
    if avail < 8 * GiB:
        ct.skip(f"{avail / GiB:.1f} GiB of memory available; the test needs 8")
    if not os.path.exists(args.model):
        os.makedirs(os.path.dirname(args.model), exist_ok=True)
        st = os.statvfs(os.path.dirname(args.model))
        if st.f_bavail * st.f_frsize < 6 * GiB:
            ct.skip(f"less than 6 GiB free under {os.path.dirname(args.model)}")
        t0 = time.time()
        subprocess.run([args.strata, "synth", *SYNTH, "-o", args.model], check=True)
        print(f"made {args.model} in {time.time() - t0:.1f} s", flush=True)
    file_bytes = os.path.getsize(args.model)
    tensors = tensor_ranges(args.model)
    shard_bytes = sum(n for name, (_, n) in tensors.items() if in_shard(name))
    other_bytes = sum(n for name, (_, n) in tensors.items() if not in_shard(name))
    print(f"model {file_bytes / GiB:.2f} GiB; shard [{FIRST},{LAST}) + head "
          f"{shard_bytes / GiB:.2f} GiB; the other stage {other_bytes / GiB:.2f} GiB", flush=True)

    f = ct.Failures()
    with tempfile.TemporaryDirectory(prefix="strata-resident-") as workdir:
        ct.load_stubs(args.proto_dir, workdir)
        import grpc
        from strata.v1 import worker_pb2, worker_pb2_grpc
        cfg = os.path.join(workdir, "worker.yaml")
        with open(cfg, "w") as out:
            out.write(f"listen: 127.0.0.1:{ct.free_port()}\nname: w0\nthreads: 2\n"
                      f"memory_budget: 64GiB\n"
                      f"model_dirs: [{ct.model_dirs(args.model)}]\ninsecure: true\n")
        w = ct.Proc("worker", [args.worker, "--config", cfg], workdir)
        try:
            pid = w.p.pid
            before = status_fields(pid)
            stub = worker_pb2_grpc.WorkerStub(grpc.insecure_channel(w.address))
            req = worker_pb2.LoadShardRequest(
                shard_id=1, model_path=args.model, first_block=FIRST, last_block=LAST,
                embedding=False, head=True, n_ctx=256, max_sequences=1, max_batch_rows=64)
            t0 = time.time()
            stub.LoadShard(req, timeout=900)  # returns once loaded
            load_s = time.time() - t0
            after = status_fields(pid)
            maps = mappings(pid, args.model)
            f.check(len(maps) >= 1, f"the worker maps {args.model} ({len(maps)} mappings)")
            if not maps:
                return 1
            map_rss = sum(m[3] for m in maps)
            # Resident bytes of each tensor from the page table.
            page = os.sysconf("SC_PAGE_SIZE")
            resident = {"shard": 0, "other": 0}
            touched_other = []
            for start, end, off, _ in maps:
                present = present_pages(pid, start, end)
                for name, (t_off, n) in tensors.items():
                    lo, hi = max(t_off, off), min(t_off + n, off + (end - start))
                    if lo >= hi:
                        continue
                    p0, p1 = (lo - off) // page, (hi - off + page - 1) // page
                    got = sum(present[p0:p1]) * page
                    key = "shard" if in_shard(name) else "other"
                    resident[key] += got
                    if key == "other" and got > 0:
                        touched_other.append((name, got))
            rss = after["VmRSS"]
            print(f"LoadShard {load_s:.1f} s", flush=True)
            print(f"process: VmRSS {rss / MiB:.0f} MiB (RssAnon {after.get('RssAnon', 0) / MiB:.0f}"
                  f", RssFile {after.get('RssFile', 0) / MiB:.0f}); before the load "
                  f"{before['VmRSS'] / MiB:.0f} MiB; VmHWM {after.get('VmHWM', 0) / MiB:.0f} MiB",
                  flush=True)
            print(f"GGUF mapping: Rss {map_rss / MiB:.0f} MiB of {file_bytes / MiB:.0f} MiB; "
                  f"page table: shard tensors {resident['shard'] / MiB:.1f} MiB resident, "
                  f"the other stage's {resident['other'] / MiB:.3f} MiB", flush=True)
            f.check(resident["other"] <= 1 * MiB,
                    f"the other stage's tensors untouched: {resident['other']} bytes resident "
                    f"{touched_other[:4]}")
            f.check(map_rss <= shard_bytes + 16 * MiB,
                    f"mapping Rss {map_rss / MiB:.0f} MiB <= the shard's "
                    f"{shard_bytes / MiB:.0f} MiB")
            # While loading: the packed weights so far, plus the matrix being
            # packed (its file pages and, for fused gate|up or q|k|v, the
            # concatenated rows) before its pages are released.
            largest = max(n for name, (_, n) in tensors.items() if in_shard(name))
            hwm = after.get("VmHWM", 0)
            f.check(hwm <= 1.15 * shard_bytes + 2 * largest + 512 * MiB,
                    f"VmHWM {hwm / MiB:.0f} MiB <= 1.15 x the shard + 2 x its largest tensor "
                    f"({largest / MiB:.0f} MiB) + 512 MiB")
            f.check(rss <= 1.15 * shard_bytes + 512 * MiB,
                    f"VmRSS {rss / MiB:.0f} MiB <= 1.15 x the shard's {shard_bytes / MiB:.0f} MiB "
                    f"+ 512 MiB (whole file {file_bytes / MiB:.0f} MiB)")
        finally:
            if f.n:
                print(w.tail())
            w.kill()
    print(f"{f.passed} passed, {f.n} failed")
    return 1 if f.n else 0


def status_meminfo(key):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    sys.exit(main())
