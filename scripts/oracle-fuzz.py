#!/usr/bin/env python3
"""Differential fuzzing of kvsim's cache against the real llama.cpp (kvoracle).

Generates random native op traces, runs each through kvoracle and `kvsim replay --dump-cells`
in the same configuration and compares them with kvoracle's compare.py. Stops at the first
difference and leaves the trace and both outputs in --work.

usage: scripts/oracle-fuzz.py [--n 50] [--seed 1] [--kvsim build/kvsim] [--oracle /tmp/oracle-work]
Needs ../shared/tools/kvoracle built (./build.sh there).
"""
import argparse
import os
import random
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KVO = os.path.join(ROOT, "..", "shared", "tools", "kvoracle")

CONFIGS = [
    # (model, kvoracle flags, kvsim flags, n_seq, n_batch)
    ("tiny-llama", "--ctx 256 --seqs 2 --unified 1", "-c 256 -np 2 -kvu", 2, 256),
    ("tiny-llama", "--ctx 256 --seqs 3 --unified 1 --ubatch 16", "-c 256 -np 3 -kvu -ub 16", 3, 256),
    ("tiny-llama", "--ctx 512 --seqs 2 --unified 0 --ubatch 32 --batch 64", "-c 512 -np 2 -ub 32 -b 64", 2, 64),
    ("tiny-llama", "--ctx 1024 --seqs 4 --unified 0 --ubatch 8 --batch 32", "-c 1024 -np 4 -ub 8 -b 32", 4, 32),
    ("tiny-gemma3-swa", "--ctx 1024 --seqs 2 --unified 1 --ubatch 32 --batch 64", "-c 1024 -np 2 -kvu -ub 32 -b 64", 2, 64),
    ("tiny-gemma3-swa", "--ctx 512 --seqs 2 --unified 0 --ubatch 16 --batch 32", "-c 512 -np 2 -ub 16 -b 32", 2, 32),
    ("tiny-gemma3-swa", "--ctx 512 --seqs 3 --unified 1 --swa-full 1 --ubatch 16 --batch 64",
     "-c 512 -np 3 -kvu --swa-full -ub 16 -b 64", 3, 64),
]


def gen_trace(rng, n_seq, n_batch, unified, n_ops):
    rows, b = [], 0
    for _ in range(n_ops):
        r = rng.random()
        if r < 0.55:
            b += 1
            budget = n_batch
            for _ in range(rng.randint(1, min(3, n_seq))):
                s = rng.randrange(n_seq)
                n = rng.randint(1, max(1, min(budget, rng.choice([1, 2, 5, 17, 40]))))
                budget -= n
                seq = str(s)
                if unified and n_seq > 1 and rng.random() < 0.1:
                    seq = "%d;%d" % (s, (s + 1) % n_seq)
                rows.append("%d,decode,%s,%d,,,," % (b, seq, n))
                if budget <= 0:
                    break
        elif r < 0.7:
            s = rng.choice([-1] + list(range(n_seq))) if unified else rng.randrange(n_seq)
            p0 = rng.choice([-1, 0, rng.randint(0, 60)])
            p1 = rng.choice([-1, p0 + rng.randint(0, 30)])
            rows.append(",rm,%d,,%d,%d,," % (s, p0, p1))
        elif r < 0.8:
            s = rng.randrange(n_seq)
            d = rng.choice([-30, -8, -1, 3, 10])
            p0 = rng.choice([-1, rng.randint(0, 40)])
            rows.append(",add,%d,,%d,-1,%d," % (s, p0, d))
        elif r < 0.85:
            s = rng.randrange(n_seq)
            rows.append(",div,%d,,%d,-1,%d," % (s, rng.randint(0, 20), rng.choice([2, 3])))
        elif r < 0.93 and n_seq > 1:
            a, d = rng.sample(range(n_seq), 2)
            if unified:
                rows.append(",rm,%d,,-1,-1,," % d)
                rows.append(",cp,%d,,-1,-1,,%d" % (a, d))
            else:
                rows.append(",cp,%d,,-1,-1,,%d" % (a, d))
        elif r < 0.97:
            rows.append(",keep,%d,,,,," % rng.randrange(n_seq))
        else:
            rows.append(",clear,,,,,,")
    return "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n" + "\n".join(rows) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ops", type=int, default=60)
    ap.add_argument("--kvsim", default=os.path.join(ROOT, "build", "kvsim"))
    ap.add_argument("--oracle", default="/tmp/oracle-work")
    ap.add_argument("--work", default="/tmp/kvsim-fuzz")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    rng = random.Random(a.seed)
    passed = failed = 0
    for it in range(a.n):
        model, oflags, kflags, n_seq, n_batch = CONFIGS[it % len(CONFIGS)]
        unified = "-kvu" in kflags
        csv = os.path.join(a.work, "t.csv")
        open(csv, "w").write(gen_trace(rng, n_seq, n_batch, unified, a.ops))
        script = subprocess.run([sys.executable, os.path.join(KVO, "csv2script.py"), csv], capture_output=True, text=True).stdout
        env = dict(os.environ, LLAMA_KV_CACHE_DEBUG="3")
        gguf = os.path.join(a.oracle, "models", model + ".gguf")
        o = subprocess.run([os.path.join(a.oracle, "kvoracle"), "-m", gguf, "--no-fs-state"] + oflags.split(),
                           input=script, capture_output=True, text=True, env=env)
        open(os.path.join(a.work, "oracle.jsonl"), "w").write(o.stdout)
        k = subprocess.run([a.kvsim, "replay", csv, "--model", model, "-q", "--dump-cells",
                            os.path.join(a.work, "kvsim.jsonl")] + kflags.split(), capture_output=True, text=True)
        if o.returncode != 0 or k.returncode != 0:
            print("run %d (%s %s): oracle rc %d, kvsim rc %d: %s %s" % (it, model, kflags, o.returncode, k.returncode,
                                                                     o.stderr[-300:], k.stderr[-300:]))
            failed += 1
            break
        c = subprocess.run([sys.executable, os.path.join(KVO, "compare.py"), os.path.join(a.work, "oracle.jsonl"),
                            os.path.join(a.work, "kvsim.jsonl")], capture_output=True, text=True)
        if c.returncode != 0:
            print("run %d (%s %s): DIFFERENCE, trace kept in %s\n%s" % (it, model, kflags, a.work, c.stdout[-2500:]))
            failed += 1
            break
        passed += 1
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
