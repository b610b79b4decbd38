#include "bench/cache_bench.h"

#include "drive/op_runner.h"
#include "kv/context.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace kvsim {

namespace {

// One client action, drawn up front; the positions it needs are read from the cache when it runs.
// kind: the cache op the action ends with. decode; rm: a tail rollback of n tokens, or (n == 0) the
// end of a request; cp: a prefix share (seq_rm of b, then seq_cp a -> b); add: a context shift
// (seq_rm of n positions after the first 32, then seq_add moving the rest down by n); keep.
struct cache_op {
    op_kind kind = op_kind::decode;
    uint32_t seq_mask = 0;   // decode: sequences decoding one token
    llama_seq_id a = 0;      // target / prefill sequence / copy source
    llama_seq_id b = 0;      // copy destination
    uint32_t n = 0;          // prefill tokens (decode), tokens rolled back (rm), n_discard (add)
};

std::vector<cache_op> make_trace(const cache_bench_params & p) {
    std::mt19937_64 rng(p.seed);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::uniform_int_distribution<llama_seq_id> seq(0, (llama_seq_id) p.n_seq - 1);
    std::vector<cache_op> ops((size_t) p.n_ops);
    for (cache_op & o : ops) {
        const double x = u(rng);
        o.a = seq(rng);
        o.b = seq(rng);
        if (x < 0.80) {
            o.kind = op_kind::decode;
            const uint32_t k = std::uniform_int_distribution<uint32_t>(1, p.n_seq)(rng);
            for (uint32_t i = 0; i < k; ++i) o.seq_mask |= 1u << seq(rng);
            o.n = u(rng) < 0.1 ? std::uniform_int_distribution<uint32_t>(16, 512)(rng) : 0;
        } else if (x < 0.86) {
            o.kind = op_kind::rm;
            o.n = std::uniform_int_distribution<uint32_t>(1, 8)(rng);
        } else if (x < 0.91) {
            o.kind = op_kind::rm;
        } else if (x < 0.94) {
            o.kind = op_kind::cp;
        } else if (x < 0.99) {
            o.kind = op_kind::add;
            o.n = std::uniform_int_distribution<uint32_t>(64, 1024)(rng);
        } else {
            o.kind = op_kind::keep;
        }
    }
    return ops;
}

// A decode row of n tokens of sequence s at its next position (the op trace's implicit p0).
op_row next_tokens(llama_seq_id s, uint32_t n) {
    op_row r;
    r.seqs = {s};
    r.n_tokens = (int32_t) n;
    return r;
}

// Runs each action through the op door (drive/op_runner.h), as op traces and the scheduler do.
class driver {
public:
    driver(context & ctx, cache_bench_result & r) : run_(ctx), mem_(ctx.memory()), r_(r) {}

    // line: the action's number, tagging its ops.
    void run(const cache_op & o, long line) {
        switch (o.kind) {
            case op_kind::decode: decode(o, line); return;
            case op_kind::rm:
                if (o.n == 0) {
                    run_.seq_rm(o.a, -1, -1, line);
                } else if (const llama_pos pm = mem_.seq_pos_max(o.a); pm >= 0) {
                    run_.seq_rm(o.a, std::max<llama_pos>(0, pm + 1 - (llama_pos) o.n), -1, line);
                }
                break;
            case op_kind::cp:
                if (o.a == o.b) return;
                run_.seq_rm(o.b, -1, -1, line);
                run_.seq_cp(o.a, o.b, -1, -1, line);
                ++r_.n_ops;
                break;
            case op_kind::add: {
                const llama_pos n_keep = 32, pm = mem_.seq_pos_max(o.a);
                if (pm < n_keep + (llama_pos) o.n) return;
                run_.seq_rm(o.a, n_keep, n_keep + (llama_pos) o.n, line);
                run_.seq_add(o.a, n_keep + (llama_pos) o.n, -1, -(llama_pos) o.n, line);
                ++r_.n_ops;
                break;
            }
            case op_kind::keep: run_.seq_keep(o.a, line); break;
            case op_kind::div:
            case op_kind::clear: return;   // not drawn
        }
        ++r_.n_ops;
        ++r_.n_seq_ops;
    }

private:
    // One llama_decode: o.n prefill tokens of o.a (if any), then one token of every other sequence of the mask.
    void decode(const cache_op & o, long line) {
        op_group g;
        g.line = line;
        uint32_t n_tokens = 0;
        if (o.n > 0) g.rows.push_back(next_tokens(o.a, o.n));
        for (llama_seq_id s = 0; s < 32; ++s) {
            if (!(o.seq_mask >> s & 1u) || (o.n > 0 && s == o.a)) continue;
            g.rows.push_back(next_tokens(s, 1));
        }
        for (const op_row & r : g.rows) n_tokens += (uint32_t) r.n_tokens;
        if (n_tokens == 0) return;
        const int rc = run_.run(g);
        ++r_.n_ops;
        ++r_.n_decode;
        if (rc == DECODE_OK) r_.n_tokens_placed += n_tokens;
        if (rc == DECODE_NO_SLOT) {
            ++r_.n_no_slot;
            evict_longest(line);
        }
    }

    // What a server does when the cache is full: drop the longest sequence.
    void evict_longest(long line) {
        llama_seq_id victim = 0;
        for (llama_seq_id s = 1; s < (llama_seq_id) run_.ctx().params().n_seq_max; ++s) {
            if (mem_.seq_pos_max(s) > mem_.seq_pos_max(victim)) victim = s;
        }
        run_.seq_rm(victim, -1, -1, line);
        ++r_.n_ops;
    }

    op_runner run_;
    const kv_memory & mem_;
    cache_bench_result & r_;
};

}  // namespace

cache_bench_result run_cache_bench(const cache_bench_params & p) {
    context_params cp;
    cp.n_ctx = p.n_ctx;
    cp.n_seq_max = p.n_seq;
    cp.kv_unified = p.unified;
    context ctx(model_preset(p.model), cp);
    cache_bench_result r;
    r.layout = p.unified ? "unified" : "multi-stream";
    r.kv_size = ctx.sizes().kv_size;
    r.n_stream = ctx.sizes().n_stream;
    const std::vector<cache_op> ops = make_trace(p);
    driver d(ctx, r);
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < ops.size(); ++i) d.run(ops[i], (long) i + 1);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace kvsim
