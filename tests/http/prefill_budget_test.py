#!/usr/bin/env python3
"""Prompt chunks beside decoding sequences, end to end: `strata serve
--prefill-chunk 256 --prefill-chunk-beside-decode 32` (--setup serve) or a
coordinator with `prefill_chunk: 256` and `prefill_chunk_beside_decode: 32`
and 2 workers (--setup cluster), SmolLM2, on 127.0.0.1; then the same with
neither set (512-row chunks, and auto: 128 rows beside decodes, every stage
being on the cpu backend).

A long prompt completed alone goes a whole chunk a micro-batch; the same
prompt sent while another request streams (decodes) goes at most 32 (128)
rows a micro-batch, read from the histogram `strata:iteration_tokens_total`
on /metrics (every micro-batch of the window holds at most that many prompt
rows and the one decode row; there are at least prompt / 32 (128) of
them); and its
greedy completion and log-probabilities are the same both times (a row's
result does not depend on the chunk it travels in). The stream is
cancelled once the prompt is done, so it decodes throughout: nothing here
waits on the clock.

Exit status: 0 passed, 1 failed, 77 skipped (model or grpcio absent).
"""
import http.client
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import http_test as ht  # noqa: E402
from cluster_test import Failures, load_stubs  # noqa: E402

MAX_SEQUENCES = 4  # http_test's servers
# (prefill_chunk, prompt rows beside decodes, the least bucket of
# strata:iteration_tokens_total (coordinator/metrics.cc) that holds them
# and MAX_SEQUENCES decode rows; a whole chunk is above it).
EXPLICIT = (256, 32, 64)
DEFAULT = (512, 128, 256)  # kDefaultPrefillChunkBesideDecode


def iteration_buckets(host):
    """{le: cumulative count} of strata:iteration_tokens_total."""
    _, _, body = ht.raw(host, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("strata:iteration_tokens_total_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[le] = float(line.split()[-1])
    return out


def above(buckets, le):
    """Micro-batches with more rows than `le` (a bucket bound)."""
    return buckets["+Inf"] - buckets[str(le)]


def complete(host, prompt, salt):
    st, _, body = ht.raw(host, "POST", "/v1/completions", {
        "prompt": prompt, "max_tokens": 4, "temperature": 0, "logprobs": 5,
        "cache_salt": salt}, timeout=600)
    assert st == 200, (st, body[:300])
    return json.loads(body)


def check(f, host, label, sizes):
    chunk, rows_beside, small = sizes
    label = f"{label} (prefill_chunk {chunk}, {rows_beside} beside decodes)"
    # About 770 tokens of text: more than a 512-row chunk.
    prompt = " ".join(f"item{i} is placed on shelf {i % 7} beside a jar;" for i in range(60))
    before = iteration_buckets(host)
    alone = complete(host, prompt, "alone")
    after = iteration_buckets(host)
    n = alone["usage"]["prompt_tokens"]
    f.check(n > 512, f"{label}: the prompt has {n} tokens (> 512)")
    whole = above(after, small) - above(before, small)
    f.check(whole >= n // chunk,
            f"{label}: alone, the prompt went in whole chunks ({whole} micro-batches over "
            f"{small} rows, want >= {n // chunk})")

    # A stream that decodes until we close it.
    h, p = host.rsplit(":", 1)
    stream = http.client.HTTPConnection(h, int(p), timeout=600)
    stream.request("POST", "/v1/completions", body=json.dumps({
        "prompt": "Count from one to a thousand:", "max_tokens": 900, "temperature": 0,
        "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
    r = stream.getresponse()
    f.check(r.status == 200, f"{label}: the stream started ({r.status})")
    first = b""
    while b"data: " not in first:  # its first token: it decodes now
        line = r.readline()
        if not line:
            break
        first += line
    before = iteration_buckets(host)
    beside = complete(host, prompt, "beside")
    after = iteration_buckets(host)
    # Still decoding: more tokens come.
    more = r.readline() + r.readline()
    stream.close()
    f.check(b"data: " in more, f"{label}: the stream still decoded after the prompt")
    count = after["+Inf"] - before["+Inf"]
    over = above(after, small) - above(before, small)
    f.check(over == 0 and count >= n // rows_beside,
            f"{label}: beside a decoding stream, {count} micro-batches (want >= "
            f"{n // rows_beside}), {over} of them over {small} rows (want 0)")
    a, b = alone["choices"][0], beside["choices"][0]
    f.check(a["text"] == b["text"] and a["logprobs"] == b["logprobs"],
            f"{label}: the same completion and log-probabilities alone and beside the "
            f"stream ({a['text']!r}, {b['text']!r})")
    f.check(beside["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
            f"{label}: nothing came from the prefix cache (another cache_salt)")


def main():
    args = ht.parse_args_or_skip()
    rc = 0
    for sizes, given in ((EXPLICIT, True), (DEFAULT, False)):
        chunk, beside, _ = sizes
        with tempfile.TemporaryDirectory(prefix="strata-prefill-budget-") as workdir:
            stubs = load_stubs(args.proto_dir, workdir)
            f = Failures()
            rc |= ht.run_setup(
                args, workdir, stubs, f,
                lambda procs, host, grpc_address, label: check(f, host, label, sizes),
                serve_extra=("--prefill-chunk", str(chunk),
                             "--prefill-chunk-beside-decode", str(beside)) if given else (),
                cluster_config=(f"prefill_chunk: {chunk}\n"
                                f"prefill_chunk_beside_decode: {beside}\n") if given else "")
    return rc


if __name__ == "__main__":
    sys.exit(main())
