#include "kv/memory.h"

namespace kvsim {

std::vector<const kv_cache *> kv_memory::caches() const {
    auto v = const_cast<kv_memory *>(this)->caches();
    return {v.begin(), v.end()};
}

bool kv_memory::get_has_shift() const {
    for (const kv_cache * c : caches()) {
        if (c->get_has_shift()) return true;
    }
    return false;
}

bool kv_memory::has_pending_update() const {
    for (const kv_cache * c : caches()) {
        if (c->get_has_shift() || !c->pending_copies().empty()) return true;
    }
    return false;
}

namespace {
// All ubatches of the batch, or none when the splitter cannot consume every token.
bool split_all(batch_allocr & balloc, uint32_t n_ubatch, bool simple, bool sequential, std::vector<ubatch> & out) {
    balloc.split_reset();
    out.clear();
    while (true) {
        ubatch ub = simple ? balloc.split_simple(n_ubatch) : balloc.split_equal(n_ubatch, sequential);
        if (ub.n_tokens == 0) {
            break;
        }
        out.push_back(std::move(ub));
    }
    return balloc.get_n_used() >= balloc.get_n_tokens();
}
}  // namespace

bool kv_memory_single::init_batch(batch_allocr & balloc, uint32_t n_ubatch, batch_plan & plan) {
    const bool simple = kv_.get_n_stream() == 1;
    if (!split_all(balloc, n_ubatch, simple, true, plan.ubatches)) {
        return false;
    }
    auto sinfos = kv_.prepare(plan.ubatches);
    if (sinfos.empty()) {
        return false;
    }
    plan.sinfos = {std::move(sinfos)};
    return true;
}

void kv_memory_iswa::clear() {
    base_.clear();
    swa_.clear();
}

bool kv_memory_iswa::seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1) {
    bool res = base_.seq_rm(s, p0, p1);
    res = swa_.seq_rm(s, p0, p1) && res;
    return res;
}

void kv_memory_iswa::seq_cp(llama_seq_id a, llama_seq_id b, llama_pos p0, llama_pos p1) {
    base_.seq_cp(a, b, p0, p1);
    swa_.seq_cp(a, b, p0, p1);
}

void kv_memory_iswa::seq_keep(llama_seq_id s) {
    base_.seq_keep(s);
    swa_.seq_keep(s);
}

void kv_memory_iswa::seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) {
    base_.seq_add(s, p0, p1, d);
    swa_.seq_add(s, p0, p1, d);
}

void kv_memory_iswa::seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d) {
    base_.seq_div(s, p0, p1, d);
    swa_.seq_div(s, p0, p1, d);
}

bool kv_memory_iswa::try_split(batch_allocr & balloc, uint32_t n_ubatch, bool simple, batch_plan & plan) {
    const bool unified = base_.get_n_stream() == 1;
    if (!split_all(balloc, n_ubatch, simple, !unified, plan.ubatches)) {
        return false;
    }
    auto sb = base_.prepare(plan.ubatches);
    if (sb.empty()) {
        return false;
    }
    auto ss = swa_.prepare(plan.ubatches);
    if (ss.empty()) {
        return false;
    }
    plan.sinfos = {std::move(sb), std::move(ss)};
    return true;
}

bool kv_memory_iswa::init_batch(batch_allocr & balloc, uint32_t n_ubatch, batch_plan & plan) {
    // llama_kv_cache_iswa::init_batch: simple split first (unified only), then equal split
    if (base_.get_n_stream() == 1 && try_split(balloc, n_ubatch, true, plan)) {
        return true;
    }
    return try_split(balloc, n_ubatch, false, plan);
}

}  // namespace kvsim
