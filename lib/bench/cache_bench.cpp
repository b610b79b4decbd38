#include "bench/cache_bench.h"

#include "kv/context.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace kvsim {

namespace {

enum class cop { decode, rm_tail, rm_seq, share, shift, keep };

struct cache_op {
    cop kind = cop::decode;
    uint32_t seq_mask = 0;   // decode: sequences decoding one token; others: bit of the target sequence
    llama_seq_id a = 0;      // target / prefill sequence / copy source
    llama_seq_id b = 0;      // copy destination
    uint32_t n = 0;          // prefill tokens (decode), tokens rolled back (rm_tail), n_discard (shift)
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
            o.kind = cop::decode;
            const uint32_t k = std::uniform_int_distribution<uint32_t>(1, p.n_seq)(rng);
            for (uint32_t i = 0; i < k; ++i) o.seq_mask |= 1u << seq(rng);
            o.n = u(rng) < 0.1 ? std::uniform_int_distribution<uint32_t>(16, 512)(rng) : 0;
        } else if (x < 0.86) {
            o.kind = cop::rm_tail;
            o.n = std::uniform_int_distribution<uint32_t>(1, 8)(rng);
        } else if (x < 0.91) {
            o.kind = cop::rm_seq;
        } else if (x < 0.94) {
            o.kind = cop::share;
        } else if (x < 0.99) {
            o.kind = cop::shift;
            o.n = std::uniform_int_distribution<uint32_t>(64, 1024)(rng);
        } else {
            o.kind = cop::keep;
        }
    }
    return ops;
}

class driver {
public:
    driver(context & ctx, cache_bench_result & r) : ctx_(ctx), mem_(ctx.memory()), r_(r) {}

    void run(const cache_op & o) {
        switch (o.kind) {
            case cop::decode: decode(o); return;
            case cop::rm_tail: {
                const llama_pos pm = mem_.seq_pos_max(o.a);
                if (pm >= 0) mem_.seq_rm(o.a, std::max<llama_pos>(0, pm + 1 - (llama_pos) o.n), -1);
                break;
            }
            case cop::rm_seq: mem_.seq_rm(o.a, -1, -1); break;
            case cop::share:
                if (o.a == o.b) return;
                mem_.seq_rm(o.b, -1, -1);
                mem_.seq_cp(o.a, o.b, -1, -1);
                ++r_.n_ops;
                break;
            case cop::shift: {
                const llama_pos n_keep = 32, pm = mem_.seq_pos_max(o.a);
                if (pm < n_keep + (llama_pos) o.n) return;
                mem_.seq_rm(o.a, n_keep, n_keep + (llama_pos) o.n);
                mem_.seq_add(o.a, n_keep + (llama_pos) o.n, -1, -(llama_pos) o.n);
                ++r_.n_ops;
                break;
            }
            case cop::keep: mem_.seq_keep(o.a); break;
        }
        ++r_.n_ops;
        ++r_.n_seq_ops;
    }

private:
    void decode(const cache_op & o) {
        batch_.pos.clear();
        batch_.seq_id.clear();
        if (o.n > 0) {
            const llama_pos p0 = mem_.seq_pos_max(o.a) + 1;
            for (uint32_t i = 0; i < o.n; ++i) batch_.add(p0 + (llama_pos) i, {o.a});
        }
        for (llama_seq_id s = 0; s < 32; ++s) {
            if (!(o.seq_mask >> s & 1u) || (o.n > 0 && s == o.a)) continue;
            batch_.add(mem_.seq_pos_max(s) + 1, {s});
        }
        if (batch_.n_tokens() == 0) return;
        const int rc = ctx_.decode(batch_);
        ++r_.n_ops;
        ++r_.n_decode;
        if (rc == DECODE_OK) r_.n_tokens_placed += batch_.n_tokens();
        if (rc == DECODE_NO_SLOT) {
            ++r_.n_no_slot;
            evict_longest();
        }
    }

    // What a server does when the cache is full: drop the longest sequence.
    void evict_longest() {
        llama_seq_id victim = 0;
        for (llama_seq_id s = 1; s < (llama_seq_id) ctx_.params().n_seq_max; ++s) {
            if (mem_.seq_pos_max(s) > mem_.seq_pos_max(victim)) victim = s;
        }
        mem_.seq_rm(victim, -1, -1);
        ++r_.n_ops;
    }

    context & ctx_;
    kv_memory & mem_;
    cache_bench_result & r_;
    llama_batch_in batch_;
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
    for (const cache_op & o : ops) d.run(o);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

}  // namespace kvsim
