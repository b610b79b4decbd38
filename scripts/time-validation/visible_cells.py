#!/usr/bin/env python3
"""What-if for the generation-only steps of a run.sh result: kvsim's attention term on the cells
each token SEES instead of n_kv.

  visible_cells.py RUN_DIR --preset qwen2.5-0.5b|llama-3.2-1b

Why: ggml's CPU flash attention skips masked cells (ggml-cpu/ops.cpp,
ggml_compute_forward_flash_attn_ext_f16_one_chunk: `if (mv == -INFINITY) continue;`, and the
tiled path skips all-masked tiles), so in a unified cache holding several sequences a token
pays for its own sequence's cells, not for n_kv. kvsim's step time (steps.csv) charges n_kv.
For each generation-only step this replaces the profile's linear attention term at n_kv
(kv_bytes * attn_s_per_kv_byte + attn_flops * attn_s_per_flop, docs/time-model.md) by the same
per-cell cost times the cells the step's tokens see (position + 1 each: no shifts, no holes),
and prints the per-step error of both against the real times (joined.csv), by tokens per step.
f16 K/V only (bytes per cell = 2 * n_head_kv * head_dim * 2 per layer).
"""
import argparse
import csv
import json

SHAPES = {"qwen2.5-0.5b": (24, 14, 2, 64), "llama-3.2-1b": (16, 32, 8, 64)}  # n_layer, n_head, n_head_kv, head_dim


def q(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1))] if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--preset", required=True, choices=sorted(SHAPES))
    a = ap.parse_args()
    L, H, HKV, D = SHAPES[a.preset]
    cell_bytes = 2 * HKV * D * 2 * L          # K and V, f16, all layers
    cell_flops = 4 * H * D * L                # per token per cell
    prof = json.load(open(a.run_dir + "/profile.json"))
    sb, sf = prof["attn_s_per_kv_byte"], prof["attn_s_per_flop"]

    groups, prev = [], None
    for r in csv.DictReader(open(a.run_dir + "/ops.csv")):
        if r["op"] == "decode":
            if not (prev and prev["op"] == "decode" and prev["batch"] == r["batch"]):
                groups.append([])
            groups[-1].append(r)
        prev = r
    vis = [sum(int(r["n_tokens"]) * (int(r["p0"]) + 1) + int(r["n_tokens"]) * (int(r["n_tokens"]) - 1) // 2 for r in g)
           for g in groups]
    joined = list(csv.DictReader(open(a.run_dir + "/joined.csv")))
    steps = list(csv.DictReader(open(a.run_dir + "/sim/steps.csv")))
    old, new, by = [], [], {}
    for i, (j, s) in enumerate(zip(joined, steps)):
        if int(s["n_prompt_tokens"]) > 0 or int(j["rc"]) != 0 or s["kind"] != "decode":
            continue
        nt, kv = int(s["n_tokens"]), int(s["n_kv"])
        pred, real = float(j["predicted_ms"]), float(j["real_ms"])
        attn_nkv = (kv * cell_bytes * sb + nt * kv * cell_flops * sf) * 1e3
        attn_vis = vis[i] * (cell_bytes * sb + cell_flops * sf) * 1e3
        p2 = pred - attn_nkv + attn_vis
        old.append(abs(pred - real) / real)
        new.append(abs(p2 - real) / real)
        by.setdefault(nt, []).append(((pred - real) / real, (p2 - real) / real))
    print("%d generation-only steps: |err| with n_kv (kvsim) median %.1f %% p90 %.1f %%; with visible cells median %.1f %% p90 %.1f %%"
          % (len(old), 100 * q(old, .5), 100 * q(old, .9), 100 * q(new, .5), 100 * q(new, .9)))
    for nt, v in sorted(by.items()):
        print("  %d token(s) per step: %4d steps, signed median %+6.1f %% (n_kv) %+6.1f %% (visible)"
              % (nt, len(v), 100 * q([x for x, _ in v], .5), 100 * q([y for _, y in v], .5)))


if __name__ == "__main__":
    main()
