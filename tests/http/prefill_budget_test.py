#!/usr/bin/env python3
"""Prompt chunks beside decoding sequences, end to end: `strata serve
--prefill-chunk 256 --prefill-chunk-beside-decode 32` (--setup serve) or a
coordinator with `prefill_chunk: 256` and `prefill_chunk_beside_decode: 32`
and 2 workers (--setup cluster), SmolLM2, on 127.0.0.1.

A long prompt completed alone goes 256 rows a micro-batch; the same prompt
sent while another request streams (decodes) goes at most 32 rows a
micro-batch, read from the histogram `strata:iteration_tokens_total` on
/metrics (every micro-batch of the window holds at most 32 prompt rows and
the one decode row; there are at least prompt / 32 of them); and its
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

CHUNK = 256
BESIDE = 32
MAX_SEQUENCES = 4  # http_test's servers
# Buckets of strata:iteration_tokens_total (coordinator/metrics.cc).
SMALL = 64   # BESIDE + MAX_SEQUENCES rows fit under it
LARGE = 256  # a whole chunk


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


def check(f, host, label):
    # About 600 tokens of text: more than two whole chunks.
    prompt = " ".join(f"item{i} is placed on shelf {i % 7} beside a jar;" for i in range(60))
    before = iteration_buckets(host)
    alone = complete(host, prompt, "alone")
    after = iteration_buckets(host)
    n = alone["usage"]["prompt_tokens"]
    f.check(n > 2 * CHUNK, f"{label}: the prompt has {n} tokens (> {2 * CHUNK})")
    whole = above(after, SMALL) - above(before, SMALL)
    f.check(whole >= n // CHUNK,
            f"{label}: alone, the prompt went in whole chunks ({whole} micro-batches over "
            f"{SMALL} rows, want >= {n // CHUNK})")

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
    over = above(after, SMALL) - above(before, SMALL)
    f.check(over == 0 and count >= n // BESIDE,
            f"{label}: beside a decoding stream, {count} micro-batches (want >= "
            f"{n // BESIDE}), {over} of them over {SMALL} rows (want 0)")
    a, b = alone["choices"][0], beside["choices"][0]
    f.check(a["text"] == b["text"] and a["logprobs"] == b["logprobs"],
            f"{label}: the same completion and log-probabilities alone and beside the "
            f"stream ({a['text']!r}, {b['text']!r})")
    f.check(beside["usage"]["prompt_tokens_details"]["cached_tokens"] == 0,
            f"{label}: nothing came from the prefix cache (another cache_salt)")


def main():
    args = ht.parse_args_or_skip()
    with tempfile.TemporaryDirectory(prefix="strata-prefill-budget-") as workdir:
        stubs = load_stubs(args.proto_dir, workdir)
        f = Failures()
        return ht.run_setup(
            args, workdir, stubs, f, lambda procs, host, grpc_address, label: check(f, host, label),
            serve_extra=("--prefill-chunk", str(CHUNK),
                         "--prefill-chunk-beside-decode", str(BESIDE)),
            cluster_config=f"prefill_chunk: {CHUNK}\nprefill_chunk_beside_decode: {BESIDE}\n")


if __name__ == "__main__":
    sys.exit(main())
