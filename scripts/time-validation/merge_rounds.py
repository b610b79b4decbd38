#!/usr/bin/env python3
"""Merge the rounds of an interleaved validation run (run.sh ROUNDS=N) into one calibration input and one
real timing, each value the minimum over the rounds (--stat median: the median), with the round-to-round spread
beside it.

  merge_rounds.py [--stat min|median] [--depth-first-sample] bench OUT.json ROUND1.json ...   llama-bench -o json files of the same tests
  merge_rounds.py [--stat min|median] steps OUT.csv ROUND1.csv ROUND2.csv ...      tv-decode-timer outputs of the same op trace

Why the minimum: on this project's 2-vCPU VMs the noise is additive and positive. A call is sometimes stalled for
3-15x its time (a 16 ms decode measured 78-236 ms), so a mean over calls moves by 40 % between runs while the median
of identical calls stays within 0.5 % (docs/benchmarks.md, 2026-12-03). A llama-bench result is a mean over its
tokens, spikes included; its minimum sample over rounds and repetitions is the closest to the spike-free work, and
the real steps take the same statistic so that calibration and validation measure alike. bench: avg_ns is the
minimum of every round's samples_ns (their avg_ns without samples), stddev_ns the spread (max - min) / 2 of the
rounds' avg_ns, samples_ns all samples. steps: ms is the minimum (or median), ms_min / ms_max / spread
((max - min) / median of the rounds) are added; every round must list the same steps, n_tokens and rc.

--depth-first-sample: of a test at depth (n_depth > 0), only each round's first sample counts. llama-bench computes the
depth for its first repetition and restores it for the later ones (llama_state_seq_set_data, tools/llama-bench/
llama-bench.cpp: the reps loop), and on a GPU the prompt after a restore costs more: the H200's pp4 @ d16384, Llama-3.2-1B
Q4_0, 2.58 ms then 4.02 ms; the restore is no step a server's decode makes (docs/benchmarks.md).
"""
import csv
import json
import math
import os
import tempfile
import statistics
import sys

KEY = ("n_prompt", "n_gen", "n_depth", "n_seq", "n_seq_gen", "kv_unified", "n_ctx", "n_batch", "n_ubatch", "type_k",
       "type_v", "flash_attn", "n_threads")


def die(msg):
    print("merge_rounds.py: " + msg, file=sys.stderr)
    sys.exit(2)


STAT = min
DEPTH_FIRST_SAMPLE = False


def number(v, where):
    # whole nanoseconds are written (int): a time below 1 ns would come out 0, which kvsim calibrate refuses
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 1:
        die("%s: %r is not a finite time >= 1 ns" % (where, v))
    return v


def write_atomic(out, write):
    """write(f) into a new temporary file beside OUT, renamed over OUT only once complete: no half-written output. OUT
    must be a regular file or not exist (a rename would replace a FIFO, a device or a link instead of writing to it)."""
    if os.path.lexists(out) and (os.path.islink(out) or not os.path.isfile(out)):
        die("%s: not a regular file (a folder, link, FIFO or device); name a file to write" % out)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(out) + ".", suffix=".tmp", dir=os.path.dirname(out) or ".")
        with os.fdopen(fd, "w", newline="") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp's 0600 would outlive the rename
        os.replace(tmp, out)
    except OSError as e:
        if tmp:
            try:
                os.remove(tmp)   # a rename that failed leaves no temporary behind
            except OSError:
                pass
        die("%s: %s" % (out, e))


def read_bench(p):
    try:
        r = json.load(open(p))
    except (OSError, ValueError) as e:
        die("%s: %s" % (p, e))
    if not isinstance(r, list) or not r or not all(isinstance(b, dict) for b in r):
        die("%s: not a llama-bench -o json array of results" % p)
    for i, b in enumerate(r):
        for k in ("n_prompt", "n_gen", "avg_ns"):
            if k not in b:
                die("%s: entry %d has no %s" % (p, i, k))
        for k in ("n_prompt", "n_gen", "n_depth"):
            if k not in b:   # n_depth: llama-bench builds before -d wrote none
                continue
            if isinstance(b[k], bool) or not isinstance(b[k], int) or b[k] < 0:
                die("%s: entry %d: %s %r is not a whole number >= 0" % (p, i, k, b[k]))
        if b["n_prompt"] + b["n_gen"] == 0:
            die("%s: entry %d: n_prompt and n_gen are both 0: no test" % (p, i))
        number(b["avg_ns"], "%s: entry %d: avg_ns" % (p, i))
        s = b.get("samples_ns", [])
        if not isinstance(s, list):
            die("%s: entry %d: samples_ns is not a list" % (p, i))
        for x in s:
            number(x, "%s: entry %d: samples_ns" % (p, i))
        ts = b.get("samples_ts", [])
        if not isinstance(ts, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in ts):
            die("%s: entry %d: samples_ts is not a list of numbers" % (p, i))
        if DEPTH_FIRST_SAMPLE and (b.get("n_depth") or 0) > 0 and not s:
            die("%s: entry %d: a test at depth %d without samples_ns: --depth-first-sample cannot tell its first sample"
                % (p, i, b["n_depth"]))
    return r


def merge_bench(out, paths):
    rounds = [read_bench(p) for p in paths]
    first = rounds[0]
    for p, r in zip(paths[1:], rounds[1:]):
        if [tuple(b.get(k) for k in KEY) for b in r] != [tuple(b.get(k) for k in KEY) for b in first]:
            die("%s: not the same llama-bench tests as %s" % (p, paths[0]))
    merged = []
    for i, b in enumerate(first):
        v = [r[i]["avg_ns"] for r in rounds]
        counted = (lambda r: r[i].get("samples_ns", [])[:1]) if DEPTH_FIRST_SAMPLE and (b.get("n_depth") or 0) > 0 else \
            (lambda r: r[i].get("samples_ns", []))
        samples = [s for r in rounds for s in counted(r)] or v
        m = dict(b)
        m["avg_ns"] = int(STAT(samples))
        m["stddev_ns"] = int((max(v) - min(v)) / 2)
        m["samples_ns"] = [s for r in rounds for s in r[i].get("samples_ns", [])]
        m["samples_ts"] = [s for r in rounds for s in r[i].get("samples_ts", [])]
        tokens = b["n_prompt"] + b["n_gen"]
        m["avg_ts"] = tokens / (m["avg_ns"] / 1e9) if m["avg_ns"] else 0
        merged.append(m)
    write_atomic(out, lambda f: json.dump(merged, f, indent=1))


def read_steps(p):
    try:
        with open(p, newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        die("%s: %s" % (p, e))
    if not rows:
        die("%s: no steps (tv-decode-timer's CSV expected)" % p)
    for c in ("step", "n_tokens", "rc", "ms"):
        if c not in rows[0]:
            die("%s: no column %s" % (p, c))
    for i, r in enumerate(rows):
        if None in r or None in r.values():
            die("%s: row %d has another number of cells than the header" % (p, i + 2))
        try:
            r["ms"] = float(r["ms"])
        except ValueError:
            die("%s: row %d: ms %r is not a number" % (p, i + 2, r["ms"]))
        if not math.isfinite(r["ms"]) or not 0 <= r["ms"] <= 3.6e6:   # an hour: no decode takes longer
            die("%s: row %d: ms %r is not a time in [0, 3600000]" % (p, i + 2, r["ms"]))
    return rows


def merge_steps(out, paths):
    rounds = [read_steps(p) for p in paths]
    first = rounds[0]
    for p, r in zip(paths[1:], rounds[1:]):
        if [(x["step"], x["n_tokens"], x["rc"]) for x in r] != [(x["step"], x["n_tokens"], x["rc"]) for x in first]:
            die("%s: not the same steps (step, n_tokens, rc) as %s" % (p, paths[0]))
    cols = list(first[0].keys()) + ["ms_min", "ms_max", "spread"]
    merged = []
    for i, row in enumerate(first):
        v = [r[i]["ms"] for r in rounds]
        med = statistics.median(v)
        m = dict(row)
        m.update(ms="%.6f" % STAT(v), ms_min="%.6f" % min(v), ms_max="%.6f" % max(v),
                 spread="%.6f" % ((max(v) - min(v)) / med if med > 0 else 0))
        merged.append(m)

    def write(f):
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(merged)
    write_atomic(out, write)
    totals = [sum(x["ms"] for x in r) / 1e3 for r in rounds]
    med = statistics.median(totals)
    print("real totals per round: %s s (spread %.1f %% of the median)" % (
        " / ".join("%.2f" % t for t in totals), 100 * (max(totals) - min(totals)) / med if med > 0 else 0))


def main():
    global STAT, DEPTH_FIRST_SAMPLE
    args = sys.argv[1:]
    usage = "usage: merge_rounds.py [--stat min|median] [--depth-first-sample] bench|steps OUT IN1 [IN2 ...]"
    seen = set()
    while args and args[0] in ("--stat", "--depth-first-sample"):
        if args[0] in seen:
            die("%s given twice; %s" % (args[0], usage))
        seen.add(args[0])
        if args[0] == "--depth-first-sample":
            DEPTH_FIRST_SAMPLE = True
            args = args[1:]
            continue
        if len(args) < 2 or args[1] not in ("min", "median"):
            die("--stat must be min or median, got %r" % (args[1] if len(args) > 1 else None))
        STAT = min if args[1] == "min" else statistics.median
        args = args[2:]
    if len(args) < 3 or args[0] not in ("bench", "steps"):
        die(usage)
    flags = [a for a in args[1:] if a.startswith("--")]
    if flags:   # an option after the mode would be taken as a file name (OUT written as "./--stat")
        die("%s: options go before bench|steps; %s" % (flags[0], usage))
    if DEPTH_FIRST_SAMPLE and args[0] != "bench":
        die("--depth-first-sample applies to llama-bench results (bench), not to steps")
    (merge_bench if args[0] == "bench" else merge_steps)(args[1], args[2:])


if __name__ == "__main__":
    main()
