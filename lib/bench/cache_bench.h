// kvbench cache: throughput of the KV-cache bookkeeping alone (no kernels). A seeded random op trace (decode batches
// of mixed sizes, seq_rm/seq_cp/seq_add context shifts/seq_keep) is driven through the op door (drive/op_runner.h),
// as a llama-server-like client would (op traces and the scheduler go through the same door).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

struct cache_bench_params {
    uint64_t seed = 1;
    uint64_t n_ops = 200000;   // ops of the trace (decode batches and seq ops)
    uint32_t n_seq = 8;        // sequences (-np)
    uint32_t n_ctx = 32768;    // -c: one stream of n_ctx cells (unified) or n_seq streams of n_ctx/n_seq
    bool unified = true;       // -kvu
    std::string model = "llama-3-8b";
};

struct cache_bench_result {
    std::string layout;              // "unified" / "multi-stream"
    uint32_t kv_size = 0;            // cells per stream
    uint32_t n_stream = 0;
    uint64_t n_ops = 0;              // decode calls + seq ops + evictions after a failed decode
    uint64_t n_decode = 0;
    uint64_t n_no_slot = 0;          // decode rc 1 (then the longest sequence is evicted)
    uint64_t n_seq_ops = 0;
    uint64_t n_tokens_placed = 0;    // tokens of successful decodes
    double seconds = 0;              // wall time of the driven trace (trace generation excluded)

    double ops_per_s() const { return seconds > 0 ? (double) n_ops / seconds : 0.0; }
    // Whole trace time (seq ops included) per token placed by a successful decode, ns.
    double ns_per_token() const { return n_tokens_placed ? seconds * 1e9 / (double) n_tokens_placed : 0.0; }
};

// Generate the trace from p.seed and run it once. Decode: 1..n_seq sequences each decoding one token, one in ten
// batches also carrying a 16..512-token prefill chunk; seq ops: tail rollback (seq_rm of 1..8 tokens), end of
// request (seq_rm whole), prefix share (seq_rm dst + seq_cp whole), context shift (seq_rm n_keep..+n_discard +
// seq_add -n_discard), seq_keep. Throws usage_error for a bad preset or context size (compute_context_sizes).
cache_bench_result run_cache_bench(const cache_bench_params & p);

}  // namespace kvsim
