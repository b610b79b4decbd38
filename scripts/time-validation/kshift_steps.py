#!/usr/bin/env python3
"""Decode steps after a context shift, timed call by call by tv-decode-timer, as llama-bench rows kvsim calibrate reads.

  kshift_steps.py ops OUT.csv --depths 512,2048 --steps 8 [--n-batch 2048]
  kshift_steps.py bench STEPS.csv MODEL_FROM.json OUT.json --depths 512,2048 --steps 8 \\
                  --n-batch 2048 --n-ubatch 512 --ctx 8192 [--kvu] [--fa 0|1]

llama-server's context shift removes n_discard cells of a slot and moves the later ones down (llama_memory_seq_rm, then
seq_add); the next llama_decode first ropes the K of every cell of the cache, used or not, to their new positions
(llama_kv_cache::update, build_graph_shift). llama-bench never shifts, so nothing else measures that cost.

`ops` writes, per depth D: a cleared cache, a prompt of D tokens (calls of --n-batch tokens), then --steps times: the
oldest cell out and the others one position down (rm [0, 1), add [1, end) -1: n_keep 0, n_discard 1), and one token
decoded at position D - 1, so every step holds D cells and follows a K-shift. `bench` turns the timer's step times of
that trace (merge_rounds.py's minimum over the rounds) into one row per depth: n_gen steps - 1 at n_depth D with
kvsim's field k_shift (kvsim calibrate replays the same rm, add and decode before each step), the first step after the
prompt left out as batched_steps.py leaves it out (a transient kvsim's step terms do not model).
"""
import json

import merge_rounds
from batched_steps import check_settings, die, dispatch, ints, parser, prompt_calls, read_model_from, read_steps
from batched_to_bench import bench_rows


def write_ops(a):
    depths = ints(a.depths, "--depths", 1 << 20)
    if min(depths) < 2:
        die("--depths: each at least 2 (a step removes a cell)")
    lines = ["batch,op,seq,n_tokens,p0,p1,delta,seq_dst"]
    for d in depths:
        lines.append(",clear,,,,,,")
        done = 0
        for c, k in enumerate(prompt_calls(a, d, 1)):
            lines.append("k%d_p%d,decode,0,%d,%d,,," % (d, c, k, done))
            done += k
        for t in range(a.steps):
            lines += [",rm,0,,0,1,,", ",add,0,,1,-1,-1,", "k%d_s%d,decode,0,1,%d,,," % (d, t, d - 1)]
    merge_rounds.write_atomic(a.out, lambda f: f.write("\n".join(lines) + "\n"))


def write_bench(a):
    depths = ints(a.depths, "--depths", 1 << 20)
    check_settings(a, (a.steps_csv, a.model_from), a.out)
    ref, steps = read_model_from(a.model_from), read_steps(a.steps_csv)
    # a K-shift ropes the whole context: the depths and their steps must fit in it
    if max(depths) + a.steps > a.ctx:
        die("--ctx %d: smaller than the largest depth %d plus --steps %d" % (a.ctx, max(depths), a.steps))
    want = []
    for d in depths:
        want += prompt_calls(a, d, 1) + [1] * a.steps
    if len(steps) != len(want):
        die("%s: %d steps, the trace of --depths %s --steps %d --n-batch %d has %d decodes" %
            (a.steps_csv, len(steps), a.depths, a.steps, a.n_batch, len(want)))
    for i, (r, n) in enumerate(zip(steps, want)):
        if r["step"].strip() != str(i) or not r["n_tokens"].strip().isdigit() or int(r["n_tokens"]) != n:
            die("%s: row %d (step %r, n_tokens %r): this trace's decode %d has %d tokens" % (a.steps_csv, i + 2, r["step"], r["n_tokens"], i, n))
    if any(r["rc"] != 0 for r in steps):
        die("%s: a decode failed" % a.steps_csv)
    out, i = [], 0
    settings = dict(n_batch=a.n_batch, n_ubatch=a.n_ubatch, flash_attn=a.fa, n_seq=1, kv_unified=a.kvu, n_ctx=a.ctx)
    for d in depths:
        i += len(prompt_calls(a, d, 1))
        ms = [r["ms"] for r in steps[i:i + a.steps]]
        i += a.steps
        out += [dict(r, n_depth=d, k_shift=True) for r in bench_rows(ref, settings, 0, a.steps - 1, 0, sum(ms[1:]) / 1e3)]
    merge_rounds.write_atomic(a.out, lambda f: json.dump(out, f, indent=1))


def main():
    ap = parser()
    ap.add_argument("--depths", required=True)
    ap.add_argument("--steps", type=int, required=True)
    a = ap.parse_args()
    if not 2 <= a.steps <= 4096:
        die("--steps %d: not in [2, 4096]" % a.steps)
    if not 1 <= a.n_batch <= 1 << 20:
        die("--n-batch %d: not in [1, %d]" % (a.n_batch, 1 << 20))
    dispatch(a, "--depths ... --steps N", "steps_csv", write_ops, write_bench)


if __name__ == "__main__":
    main()
