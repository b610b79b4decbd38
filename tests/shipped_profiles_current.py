#!/usr/bin/env python3
"""ctest shipped_profiles_current: lib/time/shipped_profiles.json is what scripts/fit-shipped-profiles.py writes with
this build's kvsim (the same keys and texts; numbers equal to 1e-9 relative, since a fit's last digits may move with
the compiler). Usage: tests/shipped_profiles_current.py KVSIM SOURCE_DIR"""
import json
import math
import os
import subprocess
import sys
import tempfile


def diff(a, b, path):
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{path}: keys differ: {sorted(a.keys() ^ b.keys())}"
        return next((d for k in a if (d := diff(a[k], b[k], f"{path}.{k}"))), None)
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries against {len(b)}"
        return next((d for i, (x, y) in enumerate(zip(a, b)) if (d := diff(x, y, f"{path}[{i}]"))), None)
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool) and not isinstance(b, bool):
        return None if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) else f"{path}: {a} against {b}"
    return None if a == b else f"{path}: {a!r} against {b!r}"


def main():
    if len(sys.argv) != 3:
        print("usage: tests/shipped_profiles_current.py KVSIM SOURCE_DIR", file=sys.stderr)
        return 2
    kvsim, src = sys.argv[1], sys.argv[2]
    script = os.path.join(src, "scripts/fit-shipped-profiles.py")
    for path, what in ((kvsim, "KVSIM"), (script, "SOURCE_DIR/scripts/fit-shipped-profiles.py")):
        if not os.path.isfile(path) or not os.access(path, os.X_OK if what == "KVSIM" else os.R_OK):
            print(f"shipped_profiles_current: {what} '{path}' is not there", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "shipped_profiles.json")
        run = subprocess.run([sys.executable, script, kvsim, out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        if run.returncode != 0:
            print(f"shipped_profiles_current: fit-shipped-profiles.py failed ({run.returncode}): "
                  f"{run.stderr.strip().splitlines()[-1] if run.stderr.strip() else ''}", file=sys.stderr)
            return 1
        with open(out) as f:
            fresh = json.load(f)
    with open(os.path.join(src, "lib/time/shipped_profiles.json")) as f:
        shipped = json.load(f)
    d = diff(shipped, fresh, "shipped_profiles")
    if d:
        print(f"lib/time/shipped_profiles.json is not what scripts/fit-shipped-profiles.py writes now ({d}); "
              "regenerate it: python3 scripts/fit-shipped-profiles.py build/kvsim", file=sys.stderr)
        return 1
    print("lib/time/shipped_profiles.json: current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
