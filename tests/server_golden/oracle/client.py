#!/usr/bin/env python3
"""The server oracle's client (../shared/tools/server-oracle/client.py, $ORACLE_DIR) with the per-request fields
kvsim's request traces have and it does not read:

  "n_predict": K   (Mooncake form) the request sends n_predict K (-1 = no limit of its own: llama-server's -n
                   applies) instead of its output_length. The oracle's requests ignore EOS, so output_length
                   cannot end them: a scenario gives such requests an output_length at least their limit.

  "seed": S        the request's sampling seed (default: its index in the trace, 0-based): llama-server seeds a
                   slot's synthetic draft acceptance (--spec-synth-rates, --spec-synth-len) with it; without one it
                   would draw from std::random_device and no two recordings would agree. Sent with every request.
  results          add "draft_n" and "draft_n_accepted" (the response's timings) when the server speculated.
  "n_cmpl": K      (Mooncake form) the request asks for K completions; its result line then also has "completions":
                   one {slot, cache_n, prompt_n, predicted, truncated[, draft_n, draft_n_accepted]} per completion.
  ORACLE_CLIENT    a scenario's "client:" line (record.sh): "no-ban" sends no logit_bias, so that the target's greedy
                   token is the one a draft model equal to it proposes (speculative decoding with acceptance 1); only
                   for traces whose prompts share nothing (generated tokens may then equal prompt tokens);
                   "repeat-penalty" sends repeat_penalty 100 over the last 64 tokens: the oracle's tiny models repeat
                   the last token, so a draft model always proposes it and the target never takes it (acceptance 0).

Everything else is the shared client's, unchanged. Run by record.sh in this folder.
"""
import importlib.util
import json
import os
import queue
import threading

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

SEEDS = {}            # request index -> "seed" of its trace line
N_CMPL = {}           # request index -> "n_cmpl" of its trace line
_tls = threading.local()


def read_seeds(path):
    with open(path, encoding="utf-8-sig") as f:
        lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
    if lines and lines[0].startswith("{"):
        for i, ln in enumerate(lines):
            o = json.loads(ln)
            if "seed" in o:
                SEEDS[i] = int(o["seed"])
            if "n_cmpl" in o:
                N_CMPL[i] = int(o["n_cmpl"])


class _Events(queue.Queue):
    """The client's event queue: a request's result gets the draft counts its HTTP thread read."""

    def put(self, item, *a, **k):
        if item[0] == "D" and getattr(_tls, "draft", None):
            item[2].update(_tls.draft)
        if item[0] == "D" and getattr(_tls, "cmpl", None):
            item[2]["completions"] = _tls.cmpl
        super().put(item, *a, **k)


class Client(oracle.Client):
    def __init__(self, a):
        super().__init__(a)
        self.ev = _Events()

    def request(self, i, prompt, n_gen):
        _tls.i, _tls.draft, _tls.cmpl = i, None, None
        super().request(i, prompt, n_gen)

    def http(self, path, body=None, timeout=3600):
        if path == "/completion" and body is not None:
            body = dict(body, seed=SEEDS.get(_tls.i, _tls.i))
            if _tls.i in N_CMPL:
                body["n_cmpl"] = N_CMPL[_tls.i]
            opts = os.environ.get("ORACLE_CLIENT", "").split()
            if "no-ban" in opts:
                del body["logit_bias"]
            if "repeat-penalty" in opts:
                body.update(repeat_penalty=100.0, repeat_last_n=64)
        out = super().http(path, body, timeout)
        if path != "/completion":
            return out
        o = json.loads(out)
        if isinstance(o, list):   # n_cmpl > 1: one result per completion, the request's first
            _tls.cmpl = [completion(c) for c in o]
            o = o[0]
            out = json.dumps(o).encode()
        t = o.get("timings", {})
        if "draft_n" in t:
            _tls.draft = {"draft_n": t["draft_n"], "draft_n_accepted": t.get("draft_n_accepted")}
        return out


def completion(o):
    """One completion of a request with n_cmpl > 1, as the shared client reports a request."""
    t = o.get("timings", {})
    c = dict(slot=o.get("id_slot"), cache_n=t.get("cache_n"), prompt_n=t.get("prompt_n"),
             predicted=o.get("tokens_predicted"), truncated=o.get("truncated"))
    if "draft_n" in t:
        c.update(draft_n=t["draft_n"], draft_n_accepted=t.get("draft_n_accepted"))
    return c


oracle.Client = Client

if __name__ == "__main__":
    import sys
    read_seeds(sys.argv[-1])
    oracle.main()
