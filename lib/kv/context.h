// llama_context as far as the KV cache sees it: context sizing, memory creation, llama_decode.
// Source: src/llama-context.cpp: llama_context::llama_context, decode, memory_update;
// src/llama-model.cpp: create_memory.
#pragma once

#include "kv/memory.h"
#include "model/model.h"
#include "model/rope_scaling.h"

#include <memory>
#include <string>

namespace kvsim {

// llama.cpp CLI defaults: -c 4096, -np 1, -b 2048, -ub 512, no -kvu, no --swa-full, f16 K/V.
struct context_params {
    uint32_t n_ctx = 4096;
    uint32_t n_seq_max = 1;
    uint32_t n_batch = 2048;
    uint32_t n_ubatch = 512;
    bool kv_unified = false;
    bool swa_full = false;
    ggml_type type_k = ggml_type::f16;
    ggml_type type_v = ggml_type::f16;
    bool flash_attn = true;
    rope_scaling rope;   // --rope-scaling, --rope-scale, --rope-freq-*, --yarn-* (model/rope_scaling.h)
};

// Sizes llama_context derives (tokens/cells): n_ctx padded to 256; per stream n_ctx_seq
// (= n_ctx when unified, else pad(n_ctx / n_seq_max, 256) and n_ctx = n_ctx_seq * n_seq_max);
// n_batch = min(requested n_ctx, n_batch); n_ubatch = min(n_batch, n_ubatch); the SWA cache
// size pad(min(kv_size, n_swa * (unified ? n_seq_max : 1) + n_ubatch), 256) unless swa_full.
struct context_sizes {
    uint32_t n_ctx = 0;
    uint32_t n_ctx_seq = 0;
    uint32_t n_batch = 0;
    uint32_t n_ubatch = 0;
    uint32_t n_stream = 1;
    uint32_t kv_size = 0;    // cells per stream of the (base) cache
    uint32_t swa_size = 0;   // cells per stream of the SWA cache, 0 without SWA
};

// Throws option_error (naming the fields) for n_ctx outside [1, 2^30], n_seq_max outside [1, 256],
// n_batch or n_ubatch == 0, quantized V without flash attention; usage_error for a head size not
// divisible by a K/V type's block.
context_sizes compute_context_sizes(const model_shape & m, const context_params & p);

// KV bytes as llama.cpp's start-up line sums them (all layers, all streams, K + V).
struct kv_memory_bytes {
    size_t k = 0;
    size_t v = 0;
    size_t total() const { return k + v; }
};
kv_memory_bytes compute_kv_bytes(const model_shape & m, const context_params & p, const context_sizes & s);

// Host bytes of the cell metadata kvsim keeps (pos, shift, seq set and index per cell, all
// caches and streams): what the bookkeeping alone needs, before any K/V buffer.
size_t cell_metadata_bytes(const context_sizes & s, bool has_swa);

// Hooks for what llama_decode does besides bookkeeping (K-shift kernel, attention, reports). The
// ops themselves (which call, which line) are the op door's business (lib/drive/op_runner.h).
class decode_observer {
public:
    virtual ~decode_observer() = default;
    // Pending shifts/copies are about to be applied (cells still carry their shift).
    virtual void on_update(const kv_memory & mem) { (void) mem; }
    // A ubatch was written to a cache; n_kv = cells the attention reads.
    virtual void on_apply(const kv_cache & cache, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
        (void) cache; (void) sinfo; (void) ub; (void) n_kv;
    }
    // A state restore wrote saved cells back into a cache (kv_cache::restore_seq: their K/V come
    // from the saved state; no attention is computed).
    virtual void on_restore(const kv_cache & cache, const slot_info & sinfo, const ubatch & ub) {
        (void) cache; (void) sinfo; (void) ub;
    }
};

// Return codes of llama_decode (include/llama.h).
enum decode_rc : int { DECODE_OK = 0, DECODE_NO_SLOT = 1, DECODE_INVALID = -1 };

class context {
public:
    // Throws usage_error as compute_context_sizes does.
    context(const model_shape & m, const context_params & p);

    // llama_decode: validate (-1), apply pending shifts/copies, split and place (1 if no slot),
    // then apply every ubatch to every cache. Throws usage_error if n_tokens > n_batch
    // (upstream GGML_ASSERT). The reason for -1 / 1 is in last_error().
    int decode(const llama_batch_in & batch, decode_observer * obs = nullptr);

    kv_memory & memory() { return *mem_; }
    const kv_memory & memory() const { return *mem_; }
    const context_sizes & sizes() const { return sizes_; }
    const context_params & params() const { return params_; }
    const model_shape & model() const { return model_; }
    // Seq ids accepted by llama_decode: LLAMA_MAX_SEQ when unified, else n_seq_max.
    uint32_t n_seq_max_decode() const { return params_.kv_unified ? LLAMA_MAX_SEQ : params_.n_seq_max; }
    const std::string & last_error() const { return last_error_; }
    uint64_t n_ubatches() const { return n_ubatches_; }

    // llama_context::memory_update: run pending shifts/copies (observer first), then reset them.
    bool memory_update(decode_observer * obs);

private:
    model_shape model_;
    context_params params_;
    context_sizes sizes_;
    std::unique_ptr<kv_memory> mem_;
    batch_allocr balloc_;
    std::string last_error_;
    uint64_t n_ubatches_ = 0;
};

}  // namespace kvsim
