#!/usr/bin/env python3
"""merge_rounds.py --depth-first-sample: a test at depth counts its first sample only (llama-bench restores the depth
state for its later repetitions); at depth 0 the statistic over all samples stays. Expected values: llama-bench's own
samples on the lent H200 (tests/data/llama-bench/h200-llama3.2-1b-q4_0.json), not computed by the script under test."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MERGE = os.path.join(ROOT, "scripts/time-validation/merge_rounds.py")
DATA = os.path.join(ROOT, "tests/data/llama-bench/h200-llama3.2-1b-q4_0.json")


def merge(*args):
    return subprocess.run([sys.executable, MERGE, *args], capture_output=True, text=True)


def main():
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "m.json")
        r = merge("--stat", "median", "--depth-first-sample", "bench", out, DATA)
        if r.returncode != 0:
            sys.exit("merge_rounds.py failed: " + r.stderr)
        rows = {(b["n_prompt"], b["n_gen"], b.get("n_depth", 0)): b["avg_ns"] for b in json.load(open(out))}
        # pp4 @ d16384: samples 2,583,762 then 4,015,738 ns (after the restore): the first
        # pp4 @ d0: samples 3,488,345, 1,337,843 and 1,306,859 ns: their median
        for key, want in (((4, 0, 16384), 2583), ((4, 0, 0), 1337)):
            got = rows[key] // 1000
            if got != want:
                failed.append("pp%d @ d%d: %d us, want %d" % (key[0], key[2], got, want))
        bad = merge("--depth-first-sample", "steps", out, DATA)
        if bad.returncode != 2 or "--depth-first-sample applies to llama-bench results" not in bad.stderr:
            failed.append("--depth-first-sample with steps: rc %d, %r" % (bad.returncode, bad.stderr))
    if failed:
        sys.exit("\n".join(failed))
    print("merge_rounds --depth-first-sample: ok")


if __name__ == "__main__":
    main()
