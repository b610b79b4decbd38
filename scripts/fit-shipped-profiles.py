#!/usr/bin/env python3
"""Regenerate lib/time/shipped_profiles.json: the calibrated and derived GPU profiles kvsim ships.

Every fitted profile comes from llama-bench results kept verbatim in tests/data/llama-bench/: published tables
(docs/data/published-llama-bench-gpu.md names each source), and for the H200 the results this project measured on a
lent card (scripts/gpu-llama.sh, "MEASURED" below). For each published card this script runs, with the kvsim binary
given:
  1. the held-out test: fit on pp512/pp4096/tg512/tg4096, predict pp1024/pp8192/tg1024/tg8192;
  2. the shipped fit on every usable result (kvsim calibrate also reports leave-one-out over them).
A measured card is fitted on its depth-0 results to predict its -d runs, then on all of them; the fit also predicts
another model and llama-batched-bench runs of several sequences (fit_measured). A card with neither (H100 SXM) is
derived from the H100 PCIe fit, as "derived" below says. The output is deterministic: this script measures nothing.

Usage: scripts/fit-shipped-profiles.py KVSIM [OUT]   (OUT default: lib/time/shipped_profiles.json)
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "tests/data/llama-bench"
REPO = "https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference/blob/"

# name, label, data prefix, datasheet (GB/s, TFLOP/s, citation), nvidia-smi MiB, notebook, build, date,
# whether the F16 prompt rows are usable (docs/data/published-llama-bench-gpu.md, "Doubts about Source 1").
CARDS = [
    ("rtx-4090", "RTX 4090 24 GB", "rtx4090", (1008, 165.2, "dense FP16 with FP32 accumulate"), 24564,
     "9232c8d/LLaMA%203/Gaming%20GPUs/4090_v3.ipynb", 2824, "2024-05-10", True),
    ("rtx-3090", "RTX 3090 24 GB", "rtx3090",
     (936, 71, "dense FP16 with FP32 accumulate (NVIDIA Ampere GA102 GPU architecture whitepaper, appendix A)"), 24576,
     "9232c8d/LLaMA%203/Gaming%20GPUs/3090_v3.ipynb", 2824, "2024-05-10", True),
    ("h100-pcie", "H100 PCIe 80 GB", "h100pcie",
     (2000, 756, "HBM2e, dense FP16 (NVIDIA H100 PCIe product brief PB-11133-001; 1513 with sparsity)"), 81559,
     "7d5af52/LLaMA%203/Professional%20GPUs/H100_PCIe_v3.ipynb", 2843, "2024-05-10", True),
    ("a100-pcie-80gb", "A100 80GB PCIe", "a100pcie", (1935, 312, "HBM2e, dense FP16 (NVIDIA A100 datasheet)"), 81920,
     "7d5af52/LLaMA%203/Professional%20GPUs/A100_PCIe_v3.ipynb", 2836, "2024-05", True),
    ("a100-sxm-80gb", "A100 SXM4 80 GB", "a100sxm", (2039, 312, "HBM2e, dense FP16 (NVIDIA A100 datasheet)"), 81920,
     "7d5af52/LLaMA%203/Professional%20GPUs/A100_SXM_v3.ipynb", 2837, "2024-05", False),
    ("l40s", "L40S 48 GB", "l40s", (864, 362.05, "GDDR6, dense FP16 tensor (NVIDIA L40S datasheet; 733 with sparsity)"),
     46068, "7d5af52/LLaMA%203/Professional%20GPUs/L40S_v3.ipynb", 2834, "2024-05", False),
]

# Cards this project measured (scripts/gpu-llama.sh on a GPU host the device tool lent; llama-bench -o json kept verbatim
# in tests/data/llama-bench/): name, label, file prefix, datasheet (GB/s, TFLOP/s, citation), nvidia-smi MiB, date.
# Files: PREFIX-INFIX-TYPE.json of FIT_MODELS (the fit: depth 0 and the -d runs, three models of 16-32 layers in every
# weight type measured, so the fit separates a cost per layer from one per ubatch and gives each weight type its read
# rate); those of OTHER_MODELS, each predicted by the fit: the transfer check.
MEASURED = [
    ("h200", "H200 141 GB", "h200", (4800, 989, "4.8 TB/s HBM3e, 989 TFLOP/s dense FP16 (NVIDIA H200 datasheet)"), 143771,
     "2026-12-04"),
]
# The models a measured card's fit has not seen: (preset, file infix, weight types), in the order the transfer rows
# are printed. Qwen2.5-7B and Llama-2-7B are the third run's (scripts/gpu-llama.sh bench-heldout), outside every fit.
FIT_MODELS = [
    ("llama-3.1-8b", "llama3.1-8b", ("q4km", "f16", "q4_0", "q8_0")),
    ("llama-3.2-1b", "llama3.2-1b", ("q4_0", "f16", "q4km", "q8_0")),
    ("qwen2.5-0.5b", "qwen2.5-0.5b", ("f16", "q4_0")),
]
OTHER_MODELS = [
    ("qwen2.5-7b", "qwen2.5-7b", ("q4km", "f16", "q8_0", "q4_0")),
    ("llama-2-7b", "llama2-7b", ("f16", "q4_0")),
]
# The llama.cpp of those runs: the oracles' commit, built by scripts/gpu-llama.sh from a git archive (so llama-bench's
# build_commit says "unknown")
MEASURED_BUILD = "de3ff815"

# Derived cards: (name, label, from, GB/s, TFLOP/s, MiB, datasheet citation).
DERIVED = [
    ("h100-sxm", "H100 SXM 80 GB", "h100-pcie", 3350, 989, 81559,
     "3.35 TB/s HBM3, 989 TFLOP/s dense FP16 (NVIDIA H100 datasheet)"),
]

FIT_TESTS, HELD_TESTS = ("512", "4096"), ("1024", "8192")

# The host link of each card (GB/s per direction, PCI-SIG datasheet rates: PCIe 4.0 x16 31.5, 5.0 x16 63; the SXM
# boards reach the host over PCIe 4.0 (A100) or 5.0 (H100, H200) switches). Not calibrated: what llama-server's RAM
# prompt cache and checkpoint copies take is bounded by it (pageable copies reach less).
HOST_LINK = {"rtx-4090": 31.5, "rtx-3090": 31.5, "h100-pcie": 63, "a100-pcie-80gb": 31.5, "a100-sxm-80gb": 31.5,
             "l40s": 31.5, "h100-sxm": 63, "h200": 63}


# Streaming multiprocessors of each card (kvsim's n_sm: the GEMM term counts whole waves of 128-row output tiles,
# step_time.h gemm_wave_factor): NVIDIA Ada whitepaper (RTX 4090 128, L40S 142), Ampere GA102 whitepaper (RTX 3090 82),
# A100 whitepaper (108), H100 whitepaper (H100 PCIe 114, SXM5 132); the H200 (GH100 as the H100 SXM5) 132, as Nsight
# Compute reported on the card this project measured (scripts/gpu-window.sh gpu-check, "# SMs 132").
N_SM = {"rtx-4090": 128, "rtx-3090": 82, "h100-pcie": 114, "a100-pcie-80gb": 108, "a100-sxm-80gb": 108, "l40s": 142,
        "h100-sxm": 132, "h200": 132}


def run(kvsim, args):
    p = subprocess.run([kvsim] + args, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"fit-shipped-profiles: {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p.stdout + p.stderr


def rows_file(src, keep, out):
    """Copy a markdown table keeping its header lines and the result rows keep(test) accepts."""
    with open(os.path.join(ROOT, src)) as f, open(out, "w") as o:
        for line in f:
            m = re.search(r"\|\s*(pp|tg) (\d+)\s*\|", line)
            if not m or keep(m.group(1), m.group(2)):
                o.write(line)


def errors(text):
    """(median, max) |error| of kvsim calibrate --predict's summary line, as fractions."""
    m = re.search(r"\|error\| median ([\d.]+)%, p90 [\d.]+%, max ([\d.]+)%", text)
    if not m:
        sys.exit("fit-shipped-profiles: kvsim calibrate --predict printed no '|error| median' line:\n" + text[-2000:])
    return float(m.group(1)) / 100, float(m.group(2)) / 100


def datasheet_base(tmp, name, gbs, tflops, mib, float_speedup):
    """The card's datasheet as the profile a fit's fractions refer to (kvsim calibrate --device): its file."""
    base = os.path.join(tmp, name + "-datasheet.json")
    with open(base, "w") as f:
        json.dump({"name": name, "source": "datasheet", "bandwidth_gbs": gbs, "peak_tflops": tflops, "memory_mib": mib,
                   "float_gemm_speedup": float_speedup, "n_sm": N_SM[name]}, f)
    return base


def fit_card(kvsim, tmp, card, float_speedup):
    """float_speedup: for a card whose F16 prompts are not usable, the float GEMM speed-up its fit keeps (the median
    of the cards fitted before it: cuBLAS against llama.cpp's quantized kernels is software, not the card)."""
    name, label, prefix, (gbs, tflops, cite), mib, notebook, build, date, f16_pp = card
    base = datasheet_base(tmp, name, gbs, tflops, mib, 1.0 if f16_pp else float_speedup)
    usable = lambda w: (lambda kind, n: f16_pp or w == "q4km" or kind == "tg")
    files, fit, held = [], [], []
    for w in ("q4km", "f16"):
        src = f"{DATA}/{prefix}-llama3-8b-{w}.md"
        all_rows, a, b = (os.path.join(tmp, f"{name}-{w}-{s}.md") for s in ("all", "fit", "held"))
        rows_file(src, usable(w), all_rows)
        rows_file(src, lambda k, n, u=usable(w): u(k, n) and n in FIT_TESTS, a)
        rows_file(src, lambda k, n, u=usable(w): u(k, n) and n in HELD_TESTS, b)
        files.append((src, all_rows))
        fit.append(a)
        held.append(b)
    half = os.path.join(tmp, name + "-half.json")
    run(kvsim, ["calibrate", *fit, "--model", "llama-3-8b", "--device", base, "-o", half])
    h_med, h_max = errors(run(kvsim, ["calibrate", *held, "--model", "llama-3-8b", "--device", half, "--predict"]))
    out = os.path.join(tmp, name + ".json")
    run(kvsim, ["calibrate", *(t for _, t in files), "--model", "llama-3-8b", "--device", base, "--name", name, "-o", out])
    with open(out) as f:
        p = json.load(f)
    c = p["calibration"]
    loo = c["held_out"]
    url = REPO + notebook
    c["files"] = [s for s, _ in files]
    c["base_device"] = f"{name} datasheet ({gbs} GB/s, {tflops} TFLOP/s {cite})"
    c["sources"] = [{"url": url, "llama_cpp_build": build, "date": date}]
    p["host_link_gbs"] = HOST_LINK[name]
    c["held_out_split"] = {"fit": "pp512, pp4096, tg512, tg4096", "predicted": "pp1024, pp8192, tg1024, tg8192",
                           "median_abs_error": h_med, "max_abs_error": h_max}
    left_out = "" if f16_pp else (
        " The F16 prompt rows are left out (far below the same card's Q4_K_M prompt rows: outliers), so the float GEMM "
        f"speed-up ({float_speedup:.2f}) is the median of the cards fitted with F16 prompts.")
    p["source"] = f"calibrated from published llama-bench results ({label}, llama.cpp build {build}, {date})"
    p["description"] = (
        f"{label} fitted by kvsim calibrate on {c['results']} published llama-bench results of Llama-3-8B Q4_K_M and F16 "
        f"({url}, copied in {DATA}/).{left_out} Held out (fit on pp512/pp4096/tg512/tg4096, predict "
        f"pp1024/pp8192/tg1024/tg8192): median |error| {100 * h_med:.1f} %, max {100 * h_max:.1f} %; leave-one-out over "
        f"all {loo['results']}: median {100 * loo['median_abs_error']:.1f} %, max {100 * loo['max_abs_error']:.1f} %. "
        "No flash attention, f16 K/V, one sequence at depth 0 (llama.cpp of May 2024): attention terms rest on the tg "
        "runs' growing context.")
    return p


def json_rows(srcs, keep, out):
    """Join llama-bench -o json files into one, keeping the results keep(result) accepts."""
    rows = []
    for src in srcs:
        with open(os.path.join(ROOT, src)) as f:
            rows += [r for r in json.load(f) if keep(r)]
    with open(out, "w") as o:
        json.dump(rows, o)


def fit_measured(kvsim, tmp, card):
    """A card measured here: fit on depth 0, predict the -d runs (held-out split); the shipped fit on all of the 8B's
    results (calibrate's leave-one-out); the shipped fit predicting another model (transfer)."""
    name, label, prefix, (gbs, tflops, cite), mib, date = card
    base = datasheet_base(tmp, name, gbs, tflops, mib, 1.0)
    srcs = [f"{DATA}/{prefix}-{infix}-{w}.json" for _, infix, types in FIT_MODELS for w in types]
    fit_models = ",".join(preset for preset, _, _ in FIT_MODELS)
    others = [(preset, [f"{DATA}/{prefix}-{infix}-{w}.json" for w in types]) for preset, infix, types in OTHER_MODELS]
    # Each result's median sample, not llama-bench's mean: the first of a test's 3 samples carried a one-off 2-10 ms
    # for prompts of up to 1024 tokens (pp1 F16: 8.5 ms, then 4.8 and 4.8), a cost a busy server does not pay per step.
    # At depth only the first sample: llama-bench restores the depth state for its later repetitions, and the prompt
    # after the restore cost 1.2-5.6 ms more (merge_rounds.py --depth-first-sample)
    med = {}
    for src in srcs + [f for _, files in others for f in files]:
        med[src] = os.path.join(tmp, os.path.basename(src))
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/time-validation/merge_rounds.py"), "--stat", "median",
                        "--depth-first-sample", "bench", med[src], os.path.join(ROOT, src)], check=True, capture_output=True)
    fit_rows, held_rows = os.path.join(tmp, name + "-d0.json"), os.path.join(tmp, name + "-deep.json")
    json_rows([med[s] for s in srcs], lambda r: r["n_depth"] == 0, fit_rows)
    json_rows([med[s] for s in srcs], lambda r: r["n_depth"] > 0, held_rows)
    half = os.path.join(tmp, name + "-half.json")
    run(kvsim, ["calibrate", fit_rows, "--model", fit_models, "--device", base, "-o", half])
    h_med, h_max = errors(run(kvsim, ["calibrate", held_rows, "--model", fit_models, "--device", half, "--predict"]))
    out = os.path.join(tmp, name + ".json")
    run(kvsim, ["calibrate", *(med[s] for s in srcs), "--model", fit_models, "--device", base, "--name", name, "-o", out])
    transfer = []
    for preset, files in others:
        t_med, t_max = errors(run(kvsim, ["calibrate", *(med[f] for f in files), "--model", preset, "--device", out, "--predict"]))
        transfer.append({"model": preset, "files": files, "median_abs_error": t_med, "max_abs_error": t_max})
    # Several sequences in one cache (llama-batched-bench -kvu, 1-64 sequences: llama-server's -np steps), predicted by
    # the fit. Each file's first result is left out: batched-bench has no warm-up, and its first call (pp512, one
    # sequence) took 3.7-6.6x llama-bench's pp512 (F16 136 ms against 20.8 ms).
    multi = []
    for w, src in zip(("q4km", "f16"), srcs[:2]):
        b = f"{DATA}/{prefix}-llama3.1-8b-{w}-batched.jsonl"
        conv = os.path.join(tmp, f"{name}-{w}-batched.json")
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/time-validation/batched_to_bench.py"),
                        os.path.join(ROOT, b), med[src], conv, "--kvu"], check=True, capture_output=True)
        with open(conv) as f:
            rows = json.load(f)[1:]
        with open(conv, "w") as f:
            json.dump(rows, f)
        multi.append((b, conv))
    m_med, m_max = errors(run(kvsim, ["calibrate", *(c for _, c in multi), "--model", "llama-3.1-8b", "--device", out,
                                      "--predict"]))
    # the same on a model outside the fit (Qwen2.5-7B Q4_K_M, the third run)
    b = f"{DATA}/{prefix}-qwen2.5-7b-q4km-batched.jsonl"
    conv = os.path.join(tmp, f"{name}-q7b-batched.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/time-validation/batched_to_bench.py"), os.path.join(ROOT, b),
                    med[f"{DATA}/{prefix}-qwen2.5-7b-q4km.json"], conv, "--kvu"], check=True, capture_output=True)
    with open(conv) as f:
        rows = json.load(f)[1:]
    with open(conv, "w") as f:
        json.dump(rows, f)
    q_med, q_max = errors(run(kvsim, ["calibrate", conv, "--model", "qwen2.5-7b", "--device", out, "--predict"]))
    transfer.append({"model": "qwen2.5-7b", "files": [b], "several_sequences": True, "median_abs_error": q_med,
                     "max_abs_error": q_max})
    with open(out) as f:
        p = json.load(f)
    c = p["calibration"]
    loo = c["held_out"]
    c["files"] = srcs
    c["base_device"] = f"{name} datasheet ({cite})"
    c["sources"] = [{"url": "measured by this project: scripts/gpu-llama.sh on a lent " + label.split()[0] + " (" + ", ".join(srcs) +
                     ")", "llama_cpp_build": MEASURED_BUILD, "date": date}]
    p["host_link_gbs"] = HOST_LINK[name]
    c["held_out_split"] = {"fit": "depth 0", "predicted": "depth 4096 and 16384", "median_abs_error": h_med,
                           "max_abs_error": h_max}
    c["transfer"] = transfer
    c["several_sequences"] = {"files": [b for b, _ in multi], "median_abs_error": m_med, "max_abs_error": m_max}
    p["source"] = f"calibrated from llama-bench results measured on an {label.split()[0]} (llama.cpp {MEASURED_BUILD}, {date})"
    p["description"] = (
        f"{label} fitted by kvsim calibrate on {c['results']} llama-bench results this project measured on the card "
        f"(llama.cpp {MEASURED_BUILD} built with CUDA for sm_90, -fa 1, f16 K/V, random-weight GGUFs of three shapes "
        f"({', '.join(f'{m} in ' + '/'.join(t) for m, _, t in FIT_MODELS)}): prompts of 1-8192 tokens, tg128/tg512, and "
        f"pp4/pp512/tg128 at depths 4096 and 16384; {', '.join(srcs)}). A read rate per weight type and a cost per layer "
        f"beside the one per ubatch, which only models of several layer counts separate; GEMMs in whole waves of "
        f"128-row tiles on its {N_SM[name]} SMs; the K/V of CUDA's MMA flash-attention kernel priced apart from the "
        f"vector kernel's (a prompt over a long context against a decode step); F16 weights of ubatches of 2 tokens or "
        f"more read at a price of their own (mmf and cuBLAS against the one-token vector kernel). Held out (fit on depth 0, predict the depth runs): median |error| {100 * h_med:.1f} %, max "
        f"{100 * h_max:.1f} %; leave-one-out over all {loo['results']}: median {100 * loo['median_abs_error']:.1f} %, max "
        f"{100 * loo['max_abs_error']:.1f} %; models outside the fit predicted by it (median / max): "
        + "; ".join(f"{t['model']}{' several sequences' if t.get('several_sequences') else ''} "
                    f"{100 * t['median_abs_error']:.1f} / {100 * t['max_abs_error']:.1f} %" for t in transfer)
        + f"; 1-64 sequences in one cache (llama-batched-bench -kvu, prompts and "
        f"decode steps of several sequences) predicted by this fit: median {100 * m_med:.1f} %, max {100 * m_max:.1f} %. "
        "Each result's median sample (a test's first sample carried a one-off cost), at depth its first (the later ones follow "
        "llama-bench's restore of the depth state). Known misses: the "
        "small models' prompts are slower than their FLOPs in whole waves say (Qwen2.5-0.5B's 13 % at the median, up to "
        "50 %), and a few-token prompt over a long context costs a step of 1.2-2.1 ms from 4096 cells on and little more at "
        "16384: llama-bench's depth runs launch each node directly, without a CUDA graph (ggml-cuda.cu: "
        "ggml_backend_cuda_graph_compute's warm-up), which kvsim does not model (the depth split's misses).")
    return p


def derive(profiles, d):
    """A card with no public table: the fitted efficiencies of a sibling card on this card's datasheet."""
    name, label, src, gbs, tflops, mib, cite = d
    s = profiles[src]
    p = json.loads(json.dumps(s))
    p.update(name=name, bandwidth_gbs=gbs, peak_tflops=tflops, memory_mib=mib, host_link_gbs=HOST_LINK[name], n_sm=N_SM[name])
    # attention terms are seconds per byte and per FLOP: they scale with the bandwidth and the peak as the weight terms do
    p["attn_s_per_kv_byte"] = s["attn_s_per_kv_byte"] * s["bandwidth_gbs"] / gbs
    p["attn_s_per_flop"] = s["attn_s_per_flop"] * s["peak_tflops"] / tflops
    c = p["calibration"]
    c["derived_from"] = src
    c["base_device"] = f"{name} datasheet ({cite})"
    c.pop("held_out_split", None)   # held_out stays: the sibling's own leave-one-out error, which the note names as such
    src_of = s["calibration"]["sources"][0]
    p["source"] = (f"derived from {src}'s fit to published llama-bench results (llama.cpp build {src_of['llama_cpp_build']}, "
                   f"{src_of['date']})")
    p["description"] = (
        f"{label}: no published single-GPU llama-bench table of this card was found (docs/data/published-llama-bench-gpu.md "
        f"lists the searches). Derived from {src}: the same fitted fractions of bandwidth ({s['weight_read_fraction']:.3f}) "
        f"and peak, the same fixed cost per ubatch ({1e3 * s['ubatch_overhead_s']:.2f} ms) and attention terms scaled by the "
        f"datasheets ({cite}). Not validated against this card: on the A100, PCIe to SXM (+5 % datasheet bandwidth) "
        "moved the fitted weight-read rate by -2 %, so a faster memory may not raise llama.cpp's rate in proportion and "
        "these times lean optimistic.")
    return p


def main():
    if len(sys.argv) in (2, 3) and sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    kvsim = os.path.abspath(sys.argv[1])
    if not os.path.isfile(kvsim) or not os.access(kvsim, os.X_OK):
        print(f"fit-shipped-profiles: {sys.argv[1]} is not an executable kvsim", file=sys.stderr)
        sys.exit(2)
    out = sys.argv[2] if len(sys.argv) == 3 else os.path.join(ROOT, "lib/time/shipped_profiles.json")
    profiles = {}
    with tempfile.TemporaryDirectory() as tmp:
        speedups = []
        for card in CARDS:   # the cards with usable F16 prompts come first: their speed-ups serve the others
            median = sorted(speedups)[len(speedups) // 2] if speedups else 1.0
            profiles[card[0]] = fit_card(kvsim, tmp, card, median)
            if card[-1]:
                speedups.append(profiles[card[0]]["float_gemm_speedup"])
        for card in MEASURED:
            profiles[card[0]] = fit_measured(kvsim, tmp, card)
    for d in DERIVED:
        profiles[d[0]] = derive(profiles, d)
    with open(out, "w") as f:
        json.dump({"generated_by": "scripts/fit-shipped-profiles.py", "profiles": list(profiles.values())}, f, indent=1,
                  sort_keys=True)
        f.write("\n")
    for p in profiles.values():
        print(f"{p['name']:16} {p['source']}")


if __name__ == "__main__":
    main()
