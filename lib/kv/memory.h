// The memory module behind llama_decode: one KV cache, or an iSWA pair (base + SWA cache).
// Source: src/llama-memory.h: llama_memory_i; src/llama-kv-cache.cpp: init_batch, init_update;
// src/llama-kv-cache-iswa.cpp: llama_kv_cache_iswa.
#pragma once

#include "kv/batch_allocr.h"
#include "kv/kv_cache.h"

#include <memory>
#include <vector>

namespace kvsim {

// Result of init_batch: the ubatches and, per cache (in caches() order), one slot per ubatch.
struct batch_plan {
    std::vector<ubatch> ubatches;
    std::vector<std::vector<slot_info>> sinfos;
};

class kv_memory {
public:
    virtual ~kv_memory() = default;

    virtual void clear() = 0;
    virtual bool seq_rm(llama_seq_id seq_id, llama_pos p0, llama_pos p1) = 0;
    virtual void seq_cp(llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1) = 0;
    virtual void seq_keep(llama_seq_id seq_id) = 0;
    virtual void seq_add(llama_seq_id seq_id, llama_pos p0, llama_pos p1, llama_pos delta) = 0;
    virtual void seq_div(llama_seq_id seq_id, llama_pos p0, llama_pos p1, int d) = 0;
    virtual llama_pos seq_pos_min(llama_seq_id seq_id) const = 0;
    virtual llama_pos seq_pos_max(llama_seq_id seq_id) const = 0;

    // Split the validated batch into ubatches and dry-run them on every cache. false =
    // LLAMA_MEMORY_STATUS_FAILED_PREPARE (llama_decode returns 1).
    virtual bool init_batch(batch_allocr & balloc, uint32_t n_ubatch, batch_plan & plan) = 0;

    // The caches, base first for iSWA; names "kv" or "base"/"swa".
    virtual std::vector<kv_cache *> caches() = 0;
    std::vector<const kv_cache *> caches() const;

    bool get_has_shift() const;
    bool has_pending_update() const;
    // llama_memory_can_shift: a K-shift is possible (llama_kv_cache::get_can_shift: true for every model kvsim
    // knows; llama_kv_cache_iswa::get_can_shift: only when the base and the SWA cache have the same size).
    virtual bool get_can_shift() const { return true; }
};

// One llama_kv_cache.
class kv_memory_single : public kv_memory {
public:
    explicit kv_memory_single(const kv_cache_params & p) : kv_(p) {}

    void clear() override { kv_.clear(); }
    bool seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1) override { return kv_.seq_rm(s, p0, p1); }
    void seq_cp(llama_seq_id a, llama_seq_id b, llama_pos p0, llama_pos p1) override { kv_.seq_cp(a, b, p0, p1); }
    void seq_keep(llama_seq_id s) override { kv_.seq_keep(s); }
    void seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) override { kv_.seq_add(s, p0, p1, d); }
    void seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d) override { kv_.seq_div(s, p0, p1, d); }
    llama_pos seq_pos_min(llama_seq_id s) const override { return kv_.seq_pos_min(s); }
    llama_pos seq_pos_max(llama_seq_id s) const override { return kv_.seq_pos_max(s); }
    bool init_batch(batch_allocr & balloc, uint32_t n_ubatch, batch_plan & plan) override;
    std::vector<kv_cache *> caches() override { return {&kv_}; }

private:
    kv_cache kv_;
};

// Interleaved SWA: a full-attention base cache and a sliding-window cache receiving the same
// ubatches. seq_pos_min/max come from the SWA cache in this llama.cpp version (the semantics
// note says base; the source of de3ff815 reads kv_swa).
class kv_memory_iswa : public kv_memory {
public:
    kv_memory_iswa(const kv_cache_params & base, const kv_cache_params & swa) : base_(base), swa_(swa) {}

    void clear() override;
    bool seq_rm(llama_seq_id s, llama_pos p0, llama_pos p1) override;
    void seq_cp(llama_seq_id a, llama_seq_id b, llama_pos p0, llama_pos p1) override;
    void seq_keep(llama_seq_id s) override;
    void seq_add(llama_seq_id s, llama_pos p0, llama_pos p1, llama_pos d) override;
    void seq_div(llama_seq_id s, llama_pos p0, llama_pos p1, int d) override;
    llama_pos seq_pos_min(llama_seq_id s) const override { return swa_.seq_pos_min(s); }
    llama_pos seq_pos_max(llama_seq_id s) const override { return swa_.seq_pos_max(s); }
    bool init_batch(batch_allocr & balloc, uint32_t n_ubatch, batch_plan & plan) override;
    std::vector<kv_cache *> caches() override { return {&base_, &swa_}; }
    bool get_can_shift() const override { return base_.get_size() == swa_.get_size(); }

private:
    bool try_split(batch_allocr & balloc, uint32_t n_ubatch, bool simple, batch_plan & plan);

    kv_cache base_;
    kv_cache swa_;
};

}  // namespace kvsim
