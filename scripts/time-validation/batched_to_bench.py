#!/usr/bin/env python3
"""Turn llama-batched-bench's JSONL (--output-format jsonl) into llama-bench -o json rows kvsim calibrate reads.

  batched_to_bench.py BATCHED.jsonl MODEL_FROM.json OUT.json [--kvu]

Each JSONL line (pp, tg, pl: pl sequences, each a pp-token prompt in one batch, then tg steps of one token per
sequence; tools/batched-bench/batched-bench.cpp) becomes two rows: the prompt (n_prompt pp, n_seq pl, avg_ns t_pp)
and the generation (n_depth pp, n_gen tg, n_seq pl, avg_ns t_tg). The model fields (model_type, model_size,
model_n_params), the cache types and the threads come from the first row of MODEL_FROM.json (a llama-bench -o json
file of the same model and settings), because batched-bench's lines do not carry them; kv_unified from --kvu (the
lines do not say either); n_ctx from n_kv_max. n_seq, kv_unified and n_ctx are kvsim's extension of the format.
"""
import json
import math
import sys

import merge_rounds


def die(msg):
    print("batched_to_bench.py: " + msg, file=sys.stderr)
    sys.exit(2)


def main():
    args = [a for a in sys.argv[1:] if a != "--kvu"]
    if len(args) != 3:
        die("usage: batched_to_bench.py BATCHED.jsonl MODEL_FROM.json OUT.json [--kvu]")
    try:
        ref = json.load(open(args[1]))
        lines = [json.loads(l) for l in open(args[0]) if l.strip().startswith("{")]
    except (OSError, ValueError) as e:
        die("%s" % e)
    if not isinstance(ref, list) or not ref or not isinstance(ref[0], dict) or "model_type" not in ref[0]:
        die("%s: not llama-bench -o json results (an array of objects with model_type)" % args[1])
    if not lines:
        die("%s: no JSONL result lines (run llama-batched-bench with --output-format jsonl)" % args[0])
    out = []
    for i, l in enumerate(lines):
        ints = ("n_batch", "n_ubatch", "flash_attn", "pl", "n_kv_max", "pp", "tg")
        if not isinstance(l, dict) or any(not isinstance(l.get(k), int) or isinstance(l.get(k), bool) for k in ints) or \
                any(not isinstance(l.get(k), (int, float)) or not math.isfinite(l[k]) or l[k] < 0 for k in ("t_pp", "t_tg")):
            die("%s: result line %d: needs whole numbers %s and finite times t_pp, t_tg >= 0" % (args[0], i + 1, ", ".join(ints)))
        out += bench_rows(ref[0], dict(n_batch=l["n_batch"], n_ubatch=l["n_ubatch"], flash_attn=l["flash_attn"], n_seq=l["pl"],
                                       kv_unified="--kvu" in sys.argv, n_ctx=l["n_kv_max"]), l["pp"], l["tg"], l["t_pp"], l["t_tg"])
    merge_rounds.write_atomic(args[2], lambda f: json.dump(out, f, indent=1))


def bench_rows(ref, settings, pp, tg, t_pp, t_tg):
    """The prompt row (pp tokens per sequence, t_pp seconds) and the generation row (tg steps at depth pp, t_tg
    seconds) of one batched run, with the model fields of the llama-bench row `ref` and `settings` (n_batch,
    n_ubatch, flash_attn, n_seq, kv_unified, n_ctx)."""
    keep = ("model_type", "model_size", "model_n_params", "type_k", "type_v", "n_threads", "cpu_info", "gpu_info",
            "build_commit", "backends")
    base = {k: ref[k] for k in keep if k in ref}
    base.update(settings, stddev_ns=0)
    out = []
    if pp > 0:
        out.append(dict(base, n_prompt=pp, n_gen=0, n_depth=0, avg_ns=int(t_pp * 1e9)))
    if tg > 0:
        out.append(dict(base, n_prompt=0, n_gen=tg, n_depth=pp, avg_ns=int(t_tg * 1e9)))
    return out


if __name__ == "__main__":
    main()
