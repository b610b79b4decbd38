#!/usr/bin/env python3
"""Write a random-weight F16 GGUF (v3) of a realistic model shape, standard library only.

For timing llama.cpp, not for text: the weights are random and the vocabulary is a dummy
SentencePiece-style list of the real size (the output projection over the whole vocabulary is
a large part of a small model's decode time, so the size matters; the strings do not).
Quantize the result with llama-quantize (q8_0, q4_0, Q4_K_M ...) for the other weight types.

Why not ../shared/tools/kvoracle/make_gguf.py: it writes F32 with one random.gauss() per
weight, which takes hours for a 1B model on this machine. Here a pool of 2^20 random F16
values is drawn once and each tensor is that pool repeated from a random offset: the weight
VALUES do not change llama.cpp's speed (no sparsity shortcuts in ggml's CPU matmuls), only the
shapes and types do.

Presets (shapes of the public GGUF files, tied embeddings: no output.weight, llama.cpp reuses
token_embd as the output projection, as in the real files):
  llama-3.2-1b   llama, 16 layers, n_embd 2048, 32 heads, 8 KV heads, head_dim 64,
                 ffn 8192, vocab 128256, rope base 500000, n_ctx_train 131072
  qwen2.5-0.5b   qwen2, 24 layers, n_embd 896, 14 heads, 2 KV heads, head_dim 64,
                 ffn 4864, vocab 151936, q/k/v biases, rope base 1000000, n_ctx_train 32768

  llama-3.1-8b   llama, 32 layers, n_embd 4096, 32 heads, 8 KV heads, head_dim 128,
                 ffn 14336, vocab 128256, rope base 500000, n_ctx_train 131072, untied output
  qwen2.5-7b     qwen2, 28 layers, n_embd 3584, 28 heads, 4 KV heads, head_dim 128,
                 ffn 18944, vocab 152064, q/k/v biases, rope base 1000000, n_ctx_train 32768, untied output
  llama-2-7b     llama, 32 layers, n_embd 4096, 32 heads, 32 KV heads (no GQA), head_dim 128,
                 ffn 11008, vocab 32000, rope base 10000, n_ctx_train 4096, untied output

--sparse writes the header and leaves the tensor data a hole of the right size (no disk, a second):
for llama.cpp's no_alloc loads, which only read the metadata (scripts/memory-probe).

usage: make_model.py OUT.gguf --preset llama-3.2-1b|qwen2.5-0.5b|llama-3.1-8b|qwen2.5-7b|llama-2-7b [--seed 1] [--sparse]
"""
import argparse
import random
import struct
import sys

T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1
ALIGN = 32
POOL = 1 << 20  # F16 values in the random pool

PRESETS = {
    "llama-3.2-1b": dict(arch="llama", n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, head_dim=64,
                         n_ff=8192, n_vocab=128256, rope_base=500000.0, ctx=131072, eps=1e-5, qkv_bias=False),
    "qwen2.5-0.5b": dict(arch="qwen2", n_layer=24, n_embd=896, n_head=14, n_head_kv=2, head_dim=64,
                         n_ff=4864, n_vocab=151936, rope_base=1000000.0, ctx=32768, eps=1e-6, qkv_bias=True),
    "llama-3.1-8b": dict(arch="llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128,
                         n_ff=14336, n_vocab=128256, rope_base=500000.0, ctx=131072, eps=1e-5, qkv_bias=False,
                         untied=True),
    # the held-out shapes of the GPU profiles' transfer check (scripts/gpu-llama.sh prep-heldout): kvsim's presets
    # of the same names (lib/model/model.cpp)
    "qwen2.5-7b": dict(arch="qwen2", n_layer=28, n_embd=3584, n_head=28, n_head_kv=4, head_dim=128,
                       n_ff=18944, n_vocab=152064, rope_base=1000000.0, ctx=32768, eps=1e-6, qkv_bias=True,
                       untied=True),
    "llama-2-7b": dict(arch="llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=32, head_dim=128,
                       n_ff=11008, n_vocab=32000, rope_base=10000.0, ctx=4096, eps=1e-5, qkv_bias=False,
                       untied=True),
}


def s_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def scalar(vtype, v):
    if vtype == T_STR:
        return s_str(v)
    return struct.pack({T_U32: "<I", T_I32: "<i", T_F32: "<f", T_BOOL: "<?"}[vtype], v)


def kv_bytes(key, vtype, value):
    out = s_str(key) + struct.pack("<I", vtype)
    if vtype == T_ARR:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        out += b"".join(scalar(etype, it) for it in items)
    else:
        out += scalar(vtype, value)
    return out


def vocab(n):
    """<unk> <s> </s>, 256 byte tokens, then dummy words up to n tokens (all distinct)."""
    toks = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    for i in range(n - len(toks)):
        toks.append("\u2581w%d" % i)
        types.append(1)
    scores = [0.0] * 259 + [-float(i + 1) for i in range(n - 259)]
    return toks, scores, types


def pad(n):
    return (ALIGN - n % ALIGN) % ALIGN


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sparse", action="store_true", help="tensor data left a hole (metadata-only loads)")
    a = ap.parse_args()
    p = PRESETS[a.preset]
    arch, E, L, F, V = p["arch"], p["n_embd"], p["n_layer"], p["n_ff"], p["n_vocab"]
    hd, nh, nkv = p["head_dim"], p["n_head"], p["n_head_kv"]
    rng = random.Random(a.seed)

    toks, scores, types = vocab(V)
    kvs = [
        ("general.architecture", T_STR, arch),
        ("general.name", T_STR, "kvsim-time-validation-" + a.preset + "-random"),
        ("general.alignment", T_U32, ALIGN),
        ("general.file_type", T_U32, 1),  # MOSTLY_F16
        (arch + ".context_length", T_U32, p["ctx"]),
        (arch + ".embedding_length", T_U32, E),
        (arch + ".block_count", T_U32, L),
        (arch + ".feed_forward_length", T_U32, F),
        (arch + ".attention.head_count", T_U32, nh),
        (arch + ".attention.head_count_kv", T_U32, nkv),
        (arch + ".attention.key_length", T_U32, hd),
        (arch + ".attention.value_length", T_U32, hd),
        (arch + ".rope.dimension_count", T_U32, hd),
        (arch + ".rope.freq_base", T_F32, p["rope_base"]),
        (arch + ".attention.layer_norm_rms_epsilon", T_F32, p["eps"]),
        (arch + ".vocab_size", T_U32, V),
        ("tokenizer.ggml.model", T_STR, "llama"),
        ("tokenizer.ggml.tokens", T_ARR, (T_STR, toks)),
        ("tokenizer.ggml.scores", T_ARR, (T_F32, scores)),
        ("tokenizer.ggml.token_type", T_ARR, (T_I32, types)),
        ("tokenizer.ggml.unknown_token_id", T_U32, 0),
        ("tokenizer.ggml.bos_token_id", T_U32, 1),
        ("tokenizer.ggml.eos_token_id", T_U32, 2),
        ("tokenizer.ggml.add_bos_token", T_BOOL, False),
    ]

    # (name, dims in ggml order ne0.., type, kind): 'w' random F16, 'one' F32 ones, 'zero' F32 zeros
    tensors = [("token_embd.weight", [E, V], GGML_F16, "w"), ("output_norm.weight", [E], GGML_F32, "one")]
    if p.get("untied"):
        tensors.append(("output.weight", [E, V], GGML_F16, "w"))
    for i in range(L):
        b = "blk.%d." % i
        tensors += [
            (b + "attn_norm.weight", [E], GGML_F32, "one"),
            (b + "attn_q.weight", [E, nh * hd], GGML_F16, "w"),
            (b + "attn_k.weight", [E, nkv * hd], GGML_F16, "w"),
            (b + "attn_v.weight", [E, nkv * hd], GGML_F16, "w"),
            (b + "attn_output.weight", [nh * hd, E], GGML_F16, "w"),
            (b + "ffn_norm.weight", [E], GGML_F32, "one"),
            (b + "ffn_gate.weight", [E, F], GGML_F16, "w"),
            (b + "ffn_up.weight", [E, F], GGML_F16, "w"),
            (b + "ffn_down.weight", [F, E], GGML_F16, "w"),
        ]
        if p["qkv_bias"]:
            tensors += [(b + "attn_q.bias", [nh * hd], GGML_F32, "zero"),
                        (b + "attn_k.bias", [nkv * hd], GGML_F32, "zero"),
                        (b + "attn_v.bias", [nkv * hd], GGML_F32, "zero")]

    def nbytes(dims, t):
        n = 1
        for d in dims:
            n *= d
        return n * (2 if t == GGML_F16 else 4)

    infos, off, layout = b"", 0, []
    for name, dims, t, kind in tensors:
        infos += s_str(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", t, off)
        n = nbytes(dims, t)
        layout.append((n, t, kind, dims))
        off += n + pad(n)

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    head += b"".join(kv_bytes(k, t, v) for k, t, v in kvs) + infos
    head += b"\0" * pad(len(head))
    if a.sparse:
        with open(a.out, "wb") as f:
            f.write(head)
            f.truncate(len(head) + off)
    else:
        write_data(a.out, head, layout, rng)
    n_params = sum(n // (2 if t == GGML_F16 else 4) for n, t, _, _ in layout)
    print("wrote %s: %s (%s) %d tensors, %.3f G params, %.2f GiB%s" % (
        a.out, a.preset, arch, len(tensors), n_params / 1e9, (len(head) + off) / 2**30, " (sparse)" if a.sparse else ""))


def write_data(out, head, layout, rng):
    """The header, then each tensor: F16 windows of one random pool, F32 ones or zeros."""
    pool = struct.pack("<%de" % POOL, *[rng.gauss(0.0, 0.02) for _ in range(POOL)])
    pool2 = pool + pool  # any POOL-long window starting below POOL
    with open(out, "wb") as f:
        f.write(head)
        for n, t, kind, dims in layout:
            if kind == "w":
                left, start = n, 2 * rng.randrange(POOL)
                while left > 0:
                    chunk = pool2[start:start + min(left, 2 * POOL)]
                    f.write(chunk)
                    left -= len(chunk)
                    start = 0
            else:
                f.write(struct.pack("<%df" % (n // 4), *([1.0 if kind == "one" else 0.0] * (n // 4))))
            f.write(b"\0" * pad(n))


if __name__ == "__main__":
    sys.exit(main())
