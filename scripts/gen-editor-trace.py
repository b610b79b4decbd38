#!/usr/bin/env python3
"""Generate an editor code-completion workload (llama.vim / llama.vscode against llama-server's /infill) as a
Mooncake-form request trace (JSONL: timestamp ms, input_length, output_length, hash_ids) for `kvsim replay`.

usage: gen-editor-trace.py [--users N] [--minutes M] [--seed S] [--ring-n-chunks 16] [--ring-scope 1024] [--n-prefix 256]
                           [--n-suffix 64] [--n-predict 128] [--tokens-per-line 8] > trace.jsonl

What a request looks like (llama.vim's defaults, autoload/llama.vim: ring_n_chunks 16, ring_chunk_size 64 lines,
ring_update_ms 1000, n_prefix 256 lines, n_suffix 64 lines, n_predict 128): the prompt is the ring buffer of extra
context chunks (input_extra, oldest first), then the local context: n_prefix lines before the cursor and n_suffix
after it. Content is said by hash_ids, one id per 512-token block (kvsim's and the server oracle's block size): a
64-line ring chunk at 8 tokens per line is one block, the local context is the blocks of the file around the cursor.

The editing session of each user (seeded, deterministic):
  - typing bursts: a completion request every 0.5-3 s while typing (llama.vim cancels a request still running when
    the next one starts; a trace cannot, so requests come no faster than a slot answers them); each keystroke batch is an edit of the block
    holding the cursor (a new id for that block; the blocks after it keep theirs: the model ignores the few tokens
    the edit shifts them by);
  - pauses of 2-20 s between bursts; after a pause the cursor may move within the file or to another file;
  - the ring: when the cursor leaves a place (a move or a file switch) the block it left is queued, with a block
    above the prefix (within ring_scope lines) and the one below the suffix at the new place, and a yanked block
    now and then; one queued
    chunk enters the ring per ring_update_ms (llama.vim's timer); a chunk already in the ring is not added twice; when
    the ring is full the oldest chunk is evicted from its front, so every chunk after it moves 512 tokens to the left:
    the case llama-server's --cache-reuse exists for;
  - output_length: the completion's tokens, 8 + an exponential of mean 24, at most n_predict (llama.vim stops at
    n_predict, a stop string or t_max_predict_ms).
Several users (--users) share one server; their requests interleave by time and share no content.
"""
import argparse
import json
import math
import random
import sys

BLOCK = 512


class Ids:
    """Fresh uint64 hash ids in order of creation (ids only need to be equal for equal content)."""

    def __init__(self):
        self.n = 0

    def new(self):
        self.n += 1
        return self.n


class User:
    def __init__(self, uid, rng, ids, a):
        self.rng, self.ids, self.a = rng, ids, a
        n_files = rng.randint(3, 8)
        # each file: a list of block ids, 4-40 blocks (256-2560 lines at 64 lines per block)
        self.files = [[ids.new() for _ in range(rng.randint(4, 40))] for _ in range(n_files)]
        self.file = 0
        self.cursor = rng.randrange(len(self.files[0]))
        self.ring, self.queued = [], []
        self.t_ms = rng.uniform(0, 5000)
        self.t_ring_ms = self.t_ms
        self.burst_left = 0

    def local_blocks(self):
        """The blocks of n_prefix lines before the cursor and n_suffix after it, clipped to the file."""
        f = self.files[self.file]
        lines_per_block = BLOCK / self.a.tokens_per_line
        n_before = max(1, round(self.a.n_prefix / lines_per_block))
        n_after = max(0, round(self.a.n_suffix / lines_per_block))
        lo = max(0, self.cursor - n_before + 1)
        return f[lo:self.cursor + 1 + n_after]

    def queue(self, f, b):
        if 0 <= b < len(self.files[f]):
            blk = self.files[f][b]
            if blk not in self.queued:
                self.queued.append(blk)

    def leave(self):
        """The cursor leaves its place (llama.vim picks chunks at BufLeave/BufEnter): the block it was in is queued."""
        self.queue(self.file, self.cursor)

    def arrive(self):
        """After a jump of more than 32 lines llama.vim's fim() picks a chunk above the prefix (within ring_scope) and
        one below the suffix."""
        lines_per_block = BLOCK / self.a.tokens_per_line
        n_before = max(1, round(self.a.n_prefix / lines_per_block))
        n_after = max(0, round(self.a.n_suffix / lines_per_block))
        scope = max(n_before + 1, round(self.a.ring_scope / lines_per_block))
        self.queue(self.file, self.cursor - self.rng.randint(n_before, scope))
        self.queue(self.file, self.cursor + n_after + 1)

    def advance_ring(self):
        while self.queued and self.t_ring_ms + self.a.ring_update_ms <= self.t_ms:
            self.t_ring_ms += self.a.ring_update_ms
            blk = self.queued.pop(0)
            if blk in self.ring or blk in self.local_blocks():
                continue
            self.ring.append(blk)
            if len(self.ring) > self.a.ring_n_chunks:
                self.ring.pop(0)
        if not self.queued:
            self.t_ring_ms = max(self.t_ring_ms, self.t_ms)

    def step(self):
        """Next request: (time ms, hash_ids, input_length, output_length)."""
        rng = self.rng
        if self.burst_left == 0:
            self.t_ms += rng.uniform(2000, 20000)
            self.burst_left = rng.randint(3, 25)
            r = rng.random()
            if r < 0.25:
                self.leave()
                self.file = rng.randrange(len(self.files))
                self.cursor = rng.randrange(len(self.files[self.file]))
                self.arrive()
            elif r < 0.6:
                self.leave()
                f = self.files[self.file]
                self.cursor = min(len(f) - 1, max(0, self.cursor + rng.randint(-6, 6)))
                self.arrive()
            if rng.random() < 0.2:   # a yank (TextYankPost): a chunk of some file
                f = rng.randrange(len(self.files))
                self.queue(f, rng.randrange(len(self.files[f])))
        else:
            self.t_ms += rng.uniform(500, 3000)
        self.burst_left -= 1
        self.files[self.file][self.cursor] = self.ids.new()   # the edit
        self.advance_ring()
        blocks = self.ring + self.local_blocks()
        n_prompt = (len(blocks) - 1) * BLOCK + rng.randint(BLOCK // 4, BLOCK)   # the suffix ends inside a block
        n_gen = min(self.a.n_predict, 8 + int(rng.expovariate(1 / 24)))
        return self.t_ms, blocks, n_prompt, n_gen


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=10.0, help="session length (default 10)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ring-n-chunks", type=int, default=16)
    ap.add_argument("--ring-update-ms", type=float, default=1000.0)
    ap.add_argument("--ring-scope", type=int, default=1024, help="lines around the cursor chunks are picked from")
    ap.add_argument("--n-prefix", type=int, default=256, help="lines before the cursor (llama.vim n_prefix)")
    ap.add_argument("--n-suffix", type=int, default=64, help="lines after the cursor (llama.vim n_suffix)")
    ap.add_argument("--n-predict", type=int, default=128)
    ap.add_argument("--tokens-per-line", type=float, default=8.0)
    a = ap.parse_args()
    for name in ("users", "ring_n_chunks", "n_prefix", "n_predict"):
        if getattr(a, name) < 1:
            ap.error("--%s must be >= 1, got %d" % (name.replace("_", "-"), getattr(a, name)))
    if a.n_suffix < 0:
        ap.error("--n-suffix must be >= 0, got %d" % a.n_suffix)
    if a.n_predict < 8:
        ap.error("--n-predict must be >= 8 (completions are 8 + an exponential), got %d" % a.n_predict)
    for name in ("minutes", "tokens_per_line", "ring_update_ms"):
        v = getattr(a, name)
        if not (math.isfinite(v) and v > 0):
            ap.error("--%s must be a finite number > 0, got %s" % (name.replace("_", "-"), v))
    # the requests are sorted in memory before they are written: about 25 requests per user-minute
    if a.minutes * a.users > 1e6:
        ap.error("--minutes x --users must be <= 1e6 (a million user-minutes), got %g" % (a.minutes * a.users))
    rng = random.Random(a.seed)
    ids = Ids()
    users = [User(u, random.Random(rng.getrandbits(64)), ids, a) for u in range(a.users)]
    end_ms = a.minutes * 60000.0
    reqs = []
    for u in users:
        while True:
            t, blocks, n_prompt, n_gen = u.step()
            if t > end_ms:
                break
            reqs.append((t, blocks, n_prompt, n_gen))
    reqs.sort(key=lambda r: r[0])
    t0 = reqs[0][0] if reqs else 0
    out = sys.stdout
    for t, blocks, n_prompt, n_gen in reqs:
        out.write(json.dumps({"timestamp": int(t - t0), "input_length": n_prompt, "output_length": n_gen,
                              "hash_ids": blocks}) + "\n")


if __name__ == "__main__":
    main()
