#!/usr/bin/env python3
"""Join kvsim's predicted step times with the real llama.cpp ones, step by step.

  compare.py SIM_DIR REAL_STEPS.csv [--ops OPS.csv] [--json OUT.json] [--joined OUT.csv]

SIM_DIR is the `kvsim replay --out ... --steps-csv` folder: steps.csv (one row per llama_decode call, `step` =
0-based index of the call in the --emit-ops order, `predicted_ms`) and requests.csv.
REAL_STEPS.csv is tv-decode-timer's output (step,n_tokens,ms,rc,...), from the emitted ops.

Per-step error = |predicted - real| / real, over the calls that succeeded in both (rc 0).
Printed: median, p90, p99 of it, the median signed error (bias), totals, and the same split
by kind (steps whose every token is a 1-token row = "generation only"; the rest "with prompt"). With --ops (the op
trace both ran), the steps after a context shift (an `add` row since the previous decode: llama_decode ropes the whole
cache first, llama.cpp's K-shift) are also listed one by one.

TTFT / TPOT of the real run: the real run executes the same calls back to back, so each request
gets the real times of the same steps. The simulated clock is rebuilt from predicted_ms plus the
idle gaps steps.csv's t_start_s shows (none with `--arrivals saturate`); a request's admission,
first token and finish (requests.csv, simulated seconds) are located as step boundaries, and the
real TTFT = real time from the admission's step boundary to the end of the first-token step,
TPOT = (real end of the finishing step - real end of the first-token step) / (n_gen - 1).
A request whose times do not fall on the rebuilt step boundaries is left out (and counted).
The real schedule keeps the simulated one's gaps: with real steps slower than predicted, a real
server would have admitted waiting requests sooner; with saturate there are no gaps.
"""
import argparse
import bisect
import csv
import json
import statistics
import sys


def die(msg):
    print("compare.py: " + msg, file=sys.stderr)
    sys.exit(2)


def read_csv(path, need):
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        die("%s: cannot read (%s)" % (path, e.strerror))
    except (UnicodeDecodeError, csv.Error) as e:
        die("%s: not a CSV file (%s)" % (path, e))
    if not rows:
        die("%s: no rows" % path)
    for c in need:
        if c not in rows[0]:
            die("%s: missing column '%s' (has %s)" % (path, c, ",".join(rows[0].keys())))
    return rows


def q(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    i = p * (len(v) - 1)
    lo = int(i)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (i - lo)


def err_stats(pairs):
    """pairs: (predicted, real) ms"""
    rel = [abs(p - r) / r for p, r in pairs if r > 0]
    sig = [(p - r) / r for p, r in pairs if r > 0]
    return {
        "n": len(rel),
        "median_abs_err": q(rel, 0.5), "p90_abs_err": q(rel, 0.9), "p99_abs_err": q(rel, 0.99),
        "median_signed_err": q(sig, 0.5),
        "predicted_total_s": sum(p for p, _ in pairs) / 1e3, "real_total_s": sum(r for _, r in pairs) / 1e3,
    }


def fmt_stats(name, s):
    if s["n"] == 0:
        return "%-18s no steps" % name
    return ("%-18s %5d steps  median |err| %5.1f %%  p90 %5.1f %%  p99 %5.1f %%  bias %+5.1f %%  "
            "total predicted %.2f s vs real %.2f s" % (
                name, s["n"], 100 * s["median_abs_err"], 100 * s["p90_abs_err"], 100 * s["p99_abs_err"],
                100 * s["median_signed_err"], s["predicted_total_s"], s["real_total_s"]))


def boundaries(ms, gaps):
    """end time of each step in seconds: back to back, plus the idle gap before each step"""
    ends, t = [], 0.0
    for x, g in zip(ms, gaps):
        t += g + x / 1e3
        ends.append(t)
    return ends


def step_ending_at(ends, t, tol):
    k = bisect.bisect_left(ends, t - tol)
    if k < len(ends) and abs(ends[k] - t) <= tol:
        return k
    return None


def latency(sim_dir, pred_ms, real_ms, starts):
    """starts: steps.csv's t_start_s (simulated); idle gaps between steps (waiting for an arrival)
    are kept as they are in the real schedule; None = back to back"""
    rq = read_csv(sim_dir + "/requests.csv", ["admission_s", "first_token_s", "finish_s", "n_gen", "ttft_s", "outcome"])
    gaps = [0.0] * len(pred_ms)
    if starts:
        gaps[0] = starts[0]
        for k in range(1, len(starts)):
            gaps[k] = max(0.0, starts[k] - (starts[k - 1] + pred_ms[k - 1] / 1e3))
    pe, re_ = boundaries(pred_ms, gaps), boundaries(real_ms, gaps)
    tol = 2e-6 + 1e-9 * (pe[-1] if pe else 0)
    out = {"sim_ttft": [], "real_ttft": [], "sim_tpot": [], "real_tpot": [], "unmatched": 0, "n": 0}

    def start_of(ends, k):
        return ends[k - 1] if k > 0 else 0.0

    for r in rq:
        if r["outcome"] != "done" or not r["first_token_s"] or not r["admission_s"]:
            continue
        a, f, e, n_gen = float(r["admission_s"]), float(r["first_token_s"]), float(r["finish_s"]), int(r["n_gen"])
        # admitted between steps: at 0, or at the end of step k (then its first step is k + 1)
        k = None if a <= tol else step_ending_at(pe, a, tol)
        ka = 0 if a <= tol else (None if k is None else k + 1)
        kf, ke = step_ending_at(pe, f, tol), step_ending_at(pe, e, tol)
        if ka is None or kf is None or ke is None:
            out["unmatched"] += 1
            continue
        out["n"] += 1
        out["sim_ttft"].append(float(r["ttft_s"]))
        out["real_ttft"].append(re_[kf] - start_of(re_, ka))
        if n_gen > 1 and r.get("tpot_s"):
            out["sim_tpot"].append(float(r["tpot_s"]))
            out["real_tpot"].append((re_[ke] - re_[kf]) / (n_gen - 1))
    return out


def steps_after_shift(path, real):
    """The steps (0-based decode calls, grouped as tv-decode-timer groups them: consecutive decode rows of one batch
    label) that follow an `add` or `div` row: the calls that apply a K-shift first. The trace must be the one the real
    run timed: as many calls, each of the real step's n_tokens."""
    rows = read_csv(path, ["batch", "op", "n_tokens"])
    out, tokens, label, pending = set(), [], None, False
    for r in rows:
        if r["op"] != "decode":
            label = None
            pending = pending or r["op"] in ("add", "div")
            continue
        try:
            n = int(r["n_tokens"])
        except ValueError:
            die("%s: a decode row's n_tokens %r is not a whole number" % (path, r["n_tokens"]))
        if r["batch"] != label or label is None:
            label = r["batch"]
            if pending:
                out.add(len(tokens))
            tokens.append(0)
            pending = False
        tokens[-1] += n
    want = [int(r["n_tokens"]) for r in real]
    if tokens != want:
        die("%s: %d decode calls (first tokens %s) where %d were timed (%s): not the op trace of the real run" % (
            path, len(tokens), tokens[:4], len(want), want[:4]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sim_dir")
    ap.add_argument("real_steps")
    ap.add_argument("--ops")
    ap.add_argument("--json")
    ap.add_argument("--joined")
    a = ap.parse_args()

    sim = read_csv(a.sim_dir + "/steps.csv", ["step", "predicted_ms"])
    real = read_csv(a.real_steps, ["step", "n_tokens", "ms", "rc"])
    if len(sim) != len(real):
        die("%s has %d steps, %s has %d: not the same op trace?" % (a.sim_dir + "/steps.csv", len(sim), a.real_steps, len(real)))
    pred_ms = [float(s["predicted_ms"]) for s in sim]
    real_ms = [float(r["ms"]) for r in real]
    for s, r in zip(sim, real):
        if int(s["step"]) != int(r["step"]):
            die("step %s vs %s: the files are not in step order" % (s["step"], r["step"]))
        if "n_tokens" in s and s["n_tokens"] and int(s["n_tokens"]) != int(r["n_tokens"]):
            die("step %s: n_tokens %s (kvsim) vs %s (real): not the same op trace" % (s["step"], s["n_tokens"], r["n_tokens"]))

    after_shift = steps_after_shift(a.ops, real) if a.ops else set()   # checked before anything is printed
    # restore rows (RAM prompt-cache restores as decode calls: llama-server computes nothing) and
    # failed calls are left out; run.sh avoids restores (--cache-ram 0)
    ok = [i for i, r in enumerate(real) if int(r["rc"]) == 0 and sim[i].get("kind", "decode") == "decode"
          and int(sim[i].get("rc", 0)) == 0]
    gen_only = [i for i in ok if int(real[i]["n_tokens"]) == int(real[i].get("n_rows") or -1)]
    with_prompt = [i for i in ok if i not in set(gen_only)]
    res = {
        "all": err_stats([(pred_ms[i], real_ms[i]) for i in ok]),
        "generation_only": err_stats([(pred_ms[i], real_ms[i]) for i in gen_only]),
        "with_prompt": err_stats([(pred_ms[i], real_ms[i]) for i in with_prompt]),
        "failed_calls": len(real) - len(ok),
    }
    if "spread" in real[0]:
        # merge_rounds.py: the real time is the median of the rounds; how far the rounds were apart says how
        # much of an error the machine's own noise could explain
        sp = [float(real[i]["spread"]) for i in ok]
        res["round_spread"] = {"median": q(sp, 0.5), "p90": q(sp, 0.9)}
        print("real step times: round-to-round spread (max - min) / median: median %.1f %%, p90 %.1f %% over %d steps" % (
            100 * q(sp, 0.5), 100 * q(sp, 0.9), len(sp)))
    print(fmt_stats("all steps", res["all"]))
    print(fmt_stats("generation only", res["generation_only"]))
    print(fmt_stats("with prompt", res["with_prompt"]))
    if a.ops:
        shifted = [i for i in ok if i in after_shift]
        res["after_k_shift"] = err_stats([(pred_ms[i], real_ms[i]) for i in shifted])
        print(fmt_stats("after a K-shift", res["after_k_shift"]))
        for i in shifted:
            print("  step %d (%s tokens): kvsim %.2f ms, real %.2f ms (%+.1f %%)" % (
                i, real[i]["n_tokens"], pred_ms[i], real_ms[i], 100 * (pred_ms[i] - real_ms[i]) / real_ms[i]))
    if res["failed_calls"]:
        print("%d calls with rc != 0 in the real run (left out)" % res["failed_calls"])
    goal = res["all"]["median_abs_err"] <= 0.05 and res["all"]["p90_abs_err"] <= 0.15
    print("per-step goal (median <= 5 %%, p90 <= 15 %%): %s" % ("MET" if goal else "NOT met"))
    res["per_step_goal_met"] = goal

    starts = [float(x["t_start_s"]) for x in sim] if "t_start_s" in sim[0] else None
    lat = latency(a.sim_dir, pred_ms, real_ms, starts)
    if lat["n"]:
        lt = {}
        for k in ("ttft", "tpot"):
            s, r = lat["sim_" + k], lat["real_" + k]
            if s and r:
                lt[k] = {"n": len(s), "sim_p50_s": q(s, 0.5), "real_p50_s": q(r, 0.5),
                         "err_p50": (q(s, 0.5) - q(r, 0.5)) / q(r, 0.5)}
                print("%s p50: kvsim %.3f s, real %.3f s (%+.1f %%, %d requests)" % (
                    k.upper(), lt[k]["sim_p50_s"], lt[k]["real_p50_s"], 100 * lt[k]["err_p50"], len(s)))
        lt["goal_met"] = all(abs(v["err_p50"]) <= 0.05 for v in lt.values() if isinstance(v, dict))
        print("TTFT/TPOT p50 goal (within 5 %%): %s" % ("MET" if lt["goal_met"] else "NOT met"))
        res["latency"] = lt
    if lat["unmatched"]:
        print("%d requests not placed on step boundaries (simulated clock with gaps?): left out of TTFT/TPOT" % lat["unmatched"])
    res["latency_unmatched_requests"] = lat["unmatched"]

    if a.joined:
        with open(a.joined, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "n_tokens", "n_rows", "rc", "predicted_ms", "real_ms", "rel_err"])
            for i, r in enumerate(real):
                rel = (pred_ms[i] - real_ms[i]) / real_ms[i] if real_ms[i] > 0 else ""
                w.writerow([i, r["n_tokens"], r.get("n_rows", ""), r["rc"], pred_ms[i], real_ms[i], rel])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
