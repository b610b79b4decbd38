#!/usr/bin/env python3
"""scripts/time-validation/kshift_steps.py: the op trace of decode steps after a context shift, and the llama-bench rows
of their timed steps. The trace's rows are written out by hand from llama-server's context shift (server-context.cpp:
llama_memory_seq_rm of n_discard cells after n_keep, then llama_memory_seq_add of the later ones by -n_discard; here
n_keep 0, n_discard 1); the step times are this test's own numbers, so the rows' sums are checked by hand."""
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts/time-validation/kshift_steps.py")
MODEL_FROM = os.path.join(ROOT, "tests/data/llama-bench/synthetic-llama-3.2-1b-q4_0.json")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def main():
    failed = []

    def check(ok, what):
        if not ok:
            failed.append(what)

    with tempfile.TemporaryDirectory() as tmp:
        ops = os.path.join(tmp, "ops.csv")
        r = run("ops", ops, "--depths", "4,3000", "--steps", "3", "--n-batch", "2048")
        check(r.returncode == 0, "ops failed: " + r.stderr)
        lines = open(ops).read().splitlines()
        want = ["batch,op,seq,n_tokens,p0,p1,delta,seq_dst", ",clear,,,,,,", "k4_p0,decode,0,4,0,,,"]
        want += [",rm,0,,0,1,,", ",add,0,,1,-1,-1,", "k4_s0,decode,0,1,3,,,"]
        check(lines[:6] == want, "depth 4's trace: %s" % lines[:6])
        # 3000 tokens: two calls of -b 2048, then each step at position 2999
        check(lines[12:15] == [",clear,,,,,,", "k3000_p0,decode,0,2048,0,,,", "k3000_p1,decode,0,952,2048,,,"], lines[12:15])
        check(lines[-1] == "k3000_s2,decode,0,1,2999,,,", lines[-1])

        # the timer's CSV: one row per decode call; ms of the steps after the first (a transient) summed
        steps = os.path.join(tmp, "steps.csv")
        rows = [(4, 9.0), (1, 50.0), (1, 20.0), (1, 22.0), (2048, 900.0), (952, 500.0), (1, 80.0), (1, 30.0), (1, 31.0)]
        with open(steps, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "n_tokens", "ms", "rc", "n_outputs", "n_rows", "line"])
            for i, (n, ms) in enumerate(rows):
                w.writerow([i, n, ms, 0, 1, 1, i + 2])
        out = os.path.join(tmp, "bench.json")
        r = run("bench", steps, MODEL_FROM, out, "--depths", "4,3000", "--steps", "3", "--ctx", "8192")
        check(r.returncode == 0, "bench failed: " + r.stderr)
        b = json.load(open(out)) if r.returncode == 0 else []
        check([(x["n_prompt"], x["n_gen"], x["n_depth"], x["k_shift"], x["n_ctx"], x["avg_ns"]) for x in b] ==
              [(0, 2, 4, True, 8192, 42000000), (0, 2, 3000, True, 8192, 61000000)], "rows: %s" % b)
        # another trace's steps (a step short) are refused, nothing written
        with open(steps, "w", newline="") as f:
            f.write("step,n_tokens,ms,rc\n0,4,9.0,0\n1,1,50.0,0\n")
        os.remove(out)
        r = run("bench", steps, MODEL_FROM, out, "--depths", "4,3000", "--steps", "3")
        check(r.returncode == 2 and "has 9 decodes" in r.stderr and not os.path.exists(out), "short steps: %d %s" % (r.returncode, r.stderr))
        # a context that cannot hold the depth (the shift ropes all of it), and an output over an input: refused
        r = run("bench", steps, MODEL_FROM, out, "--depths", "4,3000", "--steps", "3", "--ctx", "2048")
        check(r.returncode == 2 and "--ctx 2048" in r.stderr and r.stderr.startswith("kshift_steps.py:"), "ctx: " + r.stderr)
        r = run("bench", steps, MODEL_FROM, steps, "--depths", "4,3000", "--steps", "3")
        check(r.returncode == 2 and "the output is the input" in r.stderr, "output over input: " + r.stderr)
        r = run("ops", ops, "--depths", "1", "--steps", "3")
        check(r.returncode == 2 and "at least 2" in r.stderr, "depth 1: " + r.stderr)
    if failed:
        print("FAILED:\n  " + "\n  ".join(failed))
        sys.exit(1)
    print("kshift_steps.py: trace and rows as written by hand")


if __name__ == "__main__":
    main()
