#!/usr/bin/env python3
"""The server oracle's client (../shared/tools/server-oracle/client.py, $ORACLE_DIR) with the per-request fields
kvsim's request traces have and it does not read:

  "n_predict": K   (Mooncake form) the request sends n_predict K (-1 = no limit of its own: llama-server's -n
                   applies) instead of its output_length. The oracle's requests ignore EOS, so output_length
                   cannot end them: a scenario gives such requests an output_length at least their limit.

Everything else is the shared client's, unchanged. Run by record.sh in this folder.
"""
import importlib.util
import json
import os

ORACLE_DIR = os.environ["ORACLE_DIR"]
spec = importlib.util.spec_from_file_location("oracle_client", os.path.join(ORACLE_DIR, "client.py"))
oracle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(oracle)
shared_read_trace = oracle.read_trace


def read_trace(path, limit):
    """The shared reader, then each Mooncake line's n_predict in place of the n_predict the client sends
    (the client sends a request's "n_gen")."""
    reqs = shared_read_trace(path, limit)
    with open(path, encoding="utf-8-sig") as f:
        lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    if lines and lines[0].startswith("{"):
        for r, ln in zip(reqs, lines):
            o = json.loads(ln)
            if "n_predict" in o:
                r["n_gen"] = int(o["n_predict"])
    return reqs


oracle.read_trace = read_trace

if __name__ == "__main__":
    oracle.main()
