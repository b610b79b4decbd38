#!/usr/bin/env python3
"""llama-batched-bench's runs, timed call by call by tv-decode-timer, as llama-bench rows kvsim calibrate reads.

  batched_steps.py ops OUT.csv --npp 128,512 --ntg 16 --npl 2,4 [--gen-seqs 1]
  batched_steps.py bench STEPS.csv MODEL_FROM.json OUT.json --npp 128,512 --ntg 16 --npl 2,4 \\
                   --n-batch 2048 --n-ubatch 512 --ctx 8192 [--kvu] [--fa 0|1] [--gen-seqs 1]

`ops` writes the op trace of batched-bench's runs (tools/batched-bench/batched-bench.cpp): for each -npp, -npl
(in that order), a cleared cache, one batch of npl prompts of npp tokens (sequence 0's, then 1's, ...; cut into calls of
--n-batch tokens, as batched-bench's decode_helper does), then ntg
steps of one token per sequence. `bench` turns tv-decode-timer's step times of that trace (one row per decode, in
order; merge_rounds.py's minimum over the rounds) into the rows batched_to_bench.py makes of batched-bench's own
JSONL: the prompt (n_prompt npp, n_seq npl) and the generation (n_gen ntg at n_depth npp), each the sum of its
decodes' times.

--gen-seqs N: only the first N sequences of each run take the ntg steps (the others keep their prompts' cells), rows
with kvsim's n_seq_gen N: a step then reads the same cells of its own sequences beside more cells of the others,
which ggml's CPU flash attention skips one by one (what kvsim's per-scanned-cell term prices, and what runs where
every sequence decodes cannot tell from the K/V reads).

The first generation step after a prompt is left out of the generation row (it becomes n_gen ntg - 1 at n_depth
npp + 1): llama.cpp de3ff815 took it 1.1-10x as long as the steps after it, the minimum over 4 rounds too (one Zen 5
core: 78 ms then 16 ms per step after 128-token prompts, 150 then 18 after 512; docs/benchmarks.md), a transient
kvsim's step terms do not model; in the validated replay such steps stay, and count against kvsim.

Why not batched-bench's own times: its generation time is the mean over the ntg steps, stalls included, while the
validated steps (and llama-bench's -r samples) take each decode's minimum over the rounds; on the shared 2-vCPU VM
batched-bench's 2-sequence steps measured 76 ms where the same steps of the replay took 50 (docs/benchmarks.md).
"""
import argparse
import json
import os
import sys

import merge_rounds
from batched_to_bench import bench_rows


def die(msg):
    # the running script's name: kshift_steps.py reuses these readers
    print(os.path.basename(sys.argv[0]) + ": " + msg, file=sys.stderr)
    sys.exit(2)


def ints(s, name, hi):
    try:
        v = [int(x) for x in s.split(",") if x.strip() == x and x.isdigit()]
    except ValueError:
        v = []
    if not v or len(v) != len(s.split(",")) or min(v) <= 0 or max(v) > hi:
        die("%s %r: not a list of whole numbers in [1, %d]" % (name, s, hi))
    return v


def runs(a):
    # llama-batched-bench's limits: kvsim calibrate reads n_seq in [1, 256]; the runs are every npp x npl pair, so the
    # lists' lengths are checked before the pairs are made
    if (a.npp.count(",") + 1) * (a.npl.count(",") + 1) > 10000:
        die("--npp x --npl: more than 10,000 runs")
    return [(pp, pl) for pp in ints(a.npp, "--npp", 65536) for pl in ints(a.npl, "--npl", 256)]


def n_gen(a, least):
    v = ints(a.ntg, "--ntg", 4096)
    if len(v) != 1 or v[0] < least:
        die("--ntg %r: one number of steps, at least %d" % (a.ntg, least))
    return v[0]


def gen_seqs(a, pl):
    """The sequences of a run of npl pl that take the generation steps (--gen-seqs, at most pl)."""
    return pl if a.gen_seqs is None else min(a.gen_seqs, pl)


def n_prompt_calls(a, pp, pl):
    if a.n_batch < 1:
        die("--n-batch %d: not >= 1" % a.n_batch)
    return -(-pp * pl // a.n_batch)


def prompt_calls(a, pp, pl):
    """Token counts of the llama_decode calls of a run's prompt batch: pl prompts of pp tokens, sequence 0's first,
    cut every --n-batch tokens (llama-batched-bench's decode_helper; kvsim calibrate's rows cut them the same way)."""
    n = pp * pl
    return [min(a.n_batch, n - i * a.n_batch) for i in range(n_prompt_calls(a, pp, pl))]


def prompt_rows(a, pp, pl):
    """The op rows of a run's prompt calls: per call, one row per sequence range it holds."""
    lines, done = [], 0
    calls = prompt_calls(a, pp, pl)
    for c, k in enumerate(calls):
        label = "p%dx%d" % (pl, pp) + ("_%d" % c if len(calls) > 1 else "")
        for s in range(done // pp, (done + k - 1) // pp + 1):
            t0, t1 = max(done, s * pp), min(done + k, (s + 1) * pp)
            lines.append("%s,decode,%d,%d,%d,,," % (label, s, t1 - t0, t0 - s * pp))
        done += k
    return lines


def write_ops(a):
    ntg, rs = n_gen(a, 1), runs(a)
    # a prompt call holds at most one row per sequence it touches: calls + pl - 1 rows
    if sum(n_prompt_calls(a, pp, pl) + pl + gen_seqs(a, pl) * ntg for pp, pl in rs) > 1000000:
        die("these runs make more than 1,000,000 op rows (--n-batch %d cuts the prompts into calls)" % a.n_batch)
    lines = ["batch,op,seq,n_tokens,p0,p1,delta,seq_dst"]
    for pp, pl in rs:
        lines.append(",clear,,,,,,")
        lines += prompt_rows(a, pp, pl)
        for t in range(ntg):
            lines += ["g%dx%d_%d,decode,%d,1,%d,,," % (pl, pp, t, s, pp + t) for s in range(gen_seqs(a, pl))]
    merge_rounds.write_atomic(a.out, lambda f: f.write("\n".join(lines) + "\n"))


def read_steps(path):
    """The timer's rows (merge_rounds.py's reader: columns, finite ms >= 0), each also rc a whole number, ms > 0."""
    rows = merge_rounds.read_steps(path)
    for i, r in enumerate(rows):
        try:
            r["rc"] = int(r["rc"])
        except ValueError:
            die("%s: row %d: rc %r is not a whole number" % (path, i + 2, r["rc"]))
        if r["ms"] <= 0:
            die("%s: row %d: ms %r is not a time > 0" % (path, i + 2, r["ms"]))
    return rows


def read_model_from(path):
    try:
        ref = json.load(open(path))
    except (OSError, ValueError, RecursionError) as e:
        die("%s: %s" % (path, type(e).__name__ if isinstance(e, RecursionError) else e))
    if not isinstance(ref, list) or not ref or not isinstance(ref[0], dict) or "model_type" not in ref[0]:
        die("%s: not llama-bench -o json results (an array of objects with model_type)" % path)
    return ref[0]


def check_settings(a, inputs, out):
    """The rows' settings in range, and the output none of the inputs (it would replace a measurement)."""
    for v, name, lo, hi in ((a.n_batch, "--n-batch", 1, 1 << 20), (a.n_ubatch, "--n-ubatch", 1, 1 << 20),
                            (a.ctx, "--ctx", 1, 1 << 24), (a.fa, "--fa", 0, 1)):
        if not lo <= v <= hi:
            die("%s %d: not in [%d, %d]" % (name, v, lo, hi))
    for i in inputs:
        if os.path.exists(out) and os.path.samefile(i, out):
            die("%s: the output is the input %s" % (out, i))


def write_bench(a):
    ntg = n_gen(a, 2)
    check_settings(a, (a.steps, a.model_from), a.out)
    ref, steps = read_model_from(a.model_from), read_steps(a.steps)
    need = sum(n_prompt_calls(a, pp, pl) + ntg for pp, pl in runs(a))
    if len(steps) != need:
        die("%s: %d steps, the trace of these runs has %d decodes" % (a.steps, len(steps), need))
    out, i = [], 0
    for pp, pl in runs(a):
        # the steps must be this trace's: the prompt batch, then ntg steps of gen_seqs tokens (--gen-seqs as in ops)
        calls = prompt_calls(a, pp, pl)
        want = calls + [gen_seqs(a, pl)] * ntg
        got = [r["n_tokens"] for r in steps[i:i + len(want)]]
        if got != [str(n) for n in want]:
            die("%s: rows %d-%d have n_tokens %s, the run npp %d npl %d (--gen-seqs %s) decodes %s" %
                (a.steps, i + 2, i + 1 + len(want), ",".join(got[:3]) + ",...", pp, pl, a.gen_seqs, ",".join(map(str, want[:3])) + ",..."))
        run_steps = steps[i:i + len(want)]
        if any(r["rc"] != 0 for r in run_steps):
            die("%s: a decode of the run npp %d npl %d failed" % (a.steps, pp, pl))
        # the prompt: the sum of its calls; then the ntg generation steps
        ms = [sum(float(r["ms"]) for r in run_steps[:len(calls)])] + [float(r["ms"]) for r in run_steps[len(calls):]]
        i += len(want)
        settings = dict(n_batch=a.n_batch, n_ubatch=a.n_ubatch, flash_attn=a.fa, n_seq=pl, kv_unified=a.kvu,
                        n_ctx=a.ctx)
        gen = dict(n_seq_gen=gen_seqs(a, pl)) if gen_seqs(a, pl) < pl else {}
        # the generation row from the second step on (n_gen ntg - 1 at depth pp + 1): see the header
        out += bench_rows(ref, settings, pp, 0, ms[0] / 1e3, 0)
        # (with --gen-seqs the others stay at pp cells: kvsim's rows give every sequence pp + 1, one cell each more)
        out += [dict(r, n_depth=pp + 1, **gen) for r in bench_rows(ref, settings, 0, ntg - 1, 0, sum(ms[2:]) / 1e3)]
    merge_rounds.write_atomic(a.out, lambda f: json.dump(out, f, indent=1))


def parser():
    """The arguments both this script and kshift_steps.py take: the mode, its files, the rows' settings."""
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["ops", "bench"])
    ap.add_argument("files", nargs="+")
    for name, default in (("--n-batch", 2048), ("--n-ubatch", 512), ("--ctx", 8192), ("--fa", 1)):
        ap.add_argument(name, type=int, default=default)
    ap.add_argument("--kvu", action="store_true")
    return ap


def dispatch(a, run_args, steps_attr, write_ops, write_bench):
    """ops OUT.csv, or bench STEPS.csv MODEL_FROM.json OUT.json (STEPS.csv's name as a.<steps_attr>)."""
    prog = os.path.basename(sys.argv[0])
    if a.mode == "ops":
        if len(a.files) != 1:
            die("usage: %s ops OUT.csv %s" % (prog, run_args))
        a.out = a.files[0]
        write_ops(a)
    else:
        if len(a.files) != 3:
            die("usage: %s bench STEPS.csv MODEL_FROM.json OUT.json %s" % (prog, run_args))
        steps, a.model_from, a.out = a.files
        setattr(a, steps_attr, steps)
        write_bench(a)


def main():
    ap = parser()
    for o in ("--npp", "--ntg", "--npl"):
        ap.add_argument(o, required=True)
    ap.add_argument("--gen-seqs", type=int, default=None)
    a = ap.parse_args()
    if a.gen_seqs is not None and not 1 <= a.gen_seqs <= 256:
        die("--gen-seqs %d: not in [1, 256]" % a.gen_seqs)
    dispatch(a, "--npp ... --ntg ... --npl ...", "steps", write_ops, write_bench)


if __name__ == "__main__":
    main()
