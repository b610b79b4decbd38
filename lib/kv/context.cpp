#include "kv/context.h"

#include "core/errors.h"
#include "util/nvtx.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

namespace {
uint32_t pad256(uint32_t x) { return (x + 255) / 256 * 256; }

void check_block(const model_shape & m, ggml_type t, const char * which) {
    if (m.head_dim % ggml_blck_size(t) != 0) {
        throw usage_error(fmt::format("{} cache type {} with block size {} does not divide n_embd_head = {}", which,
                                      ggml_type_name(t), ggml_blck_size(t), m.head_dim));
    }
}
}  // namespace

context_sizes compute_context_sizes(const model_shape & m, const context_params & p) {
    if (p.n_ctx == 0 || p.n_ctx > (1u << 30)) throw option_error({"n_ctx"}, fmt::format("n_ctx must be in [1, 2^30], got {}", p.n_ctx));
    if (p.n_seq_max == 0 || p.n_seq_max > (uint32_t) LLAMA_MAX_SEQ) {
        throw option_error({"n_seq_max"}, fmt::format("n_seq_max must be in [1, {}], got {}", LLAMA_MAX_SEQ, p.n_seq_max));
    }
    if (p.n_batch == 0 || p.n_ubatch == 0) throw option_error({"n_batch", "n_ubatch"}, "n_batch and n_ubatch must be > 0");
    if (!p.flash_attn && ggml_is_quantized(p.type_v)) {
        throw option_error({"flash_attn"}, "quantized V cache was requested, but this requires Flash Attention (flash_attn on)");
    }
    check_block(m, p.type_k, "K");
    check_block(m, p.type_v, "V");
    context_sizes s;
    s.n_batch = std::min(p.n_ctx, p.n_batch);
    s.n_ubatch = std::min(s.n_batch, p.n_ubatch);
    s.n_ctx = pad256(p.n_ctx);
    if (p.kv_unified) {
        s.n_ctx_seq = s.n_ctx;
    } else {
        s.n_ctx_seq = pad256(s.n_ctx / p.n_seq_max);
        s.n_ctx = s.n_ctx_seq * p.n_seq_max;
    }
    s.n_stream = p.kv_unified ? 1 : p.n_seq_max;
    s.kv_size = s.n_ctx_seq;
    if (m.has_swa()) {
        const uint64_t want = (uint64_t) m.n_swa * (p.kv_unified ? p.n_seq_max : 1) + s.n_ubatch;
        s.swa_size = p.swa_full ? s.kv_size : pad256((uint32_t) std::min<uint64_t>(s.kv_size, want));
    }
    return s;
}

kv_memory_bytes compute_kv_bytes(const model_shape & m, const context_params & p, const context_sizes & s) {
    const size_t row_k = ggml_row_size(p.type_k, m.n_embd_k_gqa());
    const size_t row_v = ggml_row_size(p.type_v, m.n_embd_k_gqa());
    const uint32_t n_swa_layers = m.n_layer_swa();
    const size_t cells_base = (size_t) s.kv_size * s.n_stream * (m.n_layer - n_swa_layers);
    const size_t cells_swa = (size_t) s.swa_size * s.n_stream * n_swa_layers;
    return {row_k * (cells_base + cells_swa), row_v * (cells_base + cells_swa)};
}

size_t cell_metadata_bytes(const context_sizes & s, bool has_swa) {
    // pos + shift + seq bitset + free bit, plus about one (pos, cell) index node per cell
    const size_t per_cell = 2 * sizeof(llama_pos) + sizeof(seq_set) + 48;
    const size_t cells = (size_t) s.kv_size * s.n_stream + (has_swa ? (size_t) s.swa_size * s.n_stream : 0);
    return cells * per_cell;
}

context::context(const model_shape & m, const context_params & p)
    : model_(m), params_(p), sizes_(compute_context_sizes(m, p)) {
    kv_cache_params base;
    base.kv_size = sizes_.kv_size;
    base.n_seq_max = p.n_seq_max;
    base.unified = p.kv_unified;
    if (!m.has_swa()) {
        mem_ = std::make_unique<kv_memory_single>(base);
        return;
    }
    base.name = "base";
    kv_cache_params swa = base;
    swa.name = "swa";
    swa.kv_size = sizes_.swa_size;
    swa.n_swa = m.n_swa;
    swa.swa = m.swa;
    mem_ = std::make_unique<kv_memory_iswa>(base, swa);
}

bool context::memory_update(decode_observer * obs) {
    KVSIM_NVTX_RANGE("memory_update", (int64_t) n_ubatches_);
    if (!mem_->has_pending_update()) {
        return false;
    }
    if (obs) {
        obs->on_update(*mem_);
    }
    for (kv_cache * c : mem_->caches()) {
        c->update();
    }
    return true;
}

int context::decode(const llama_batch_in & batch, decode_observer * obs) {
    KVSIM_NVTX_RANGE("decode", batch.n_tokens());
    last_error_.clear();
    if (batch.n_tokens() == 0) {
        last_error_ = "n_tokens == 0";
        return DECODE_INVALID;
    }
    if (!balloc_.init(batch, *mem_, n_seq_max_decode(), &last_error_)) {
        return DECODE_INVALID;
    }
    if (batch.n_tokens() > sizes_.n_batch) {
        throw usage_error(fmt::format("batch of {} tokens exceeds n_batch = {} (llama_decode asserts)",
                                      batch.n_tokens(), sizes_.n_batch));
    }
    memory_update(obs);
    batch_plan plan;
    if (!mem_->init_batch(balloc_, sizes_.n_ubatch, plan)) {
        last_error_ = fmt::format("failed to find a memory slot for batch of size {}", batch.n_tokens());
        return DECODE_NO_SLOT;
    }
    auto caches = mem_->caches();
    for (size_t i = 0; i < plan.ubatches.size(); ++i) {
        for (size_t c = 0; c < caches.size(); ++c) {
            caches[c]->apply_ubatch(plan.sinfos[c][i], plan.ubatches[i]);
            if (obs) {
                obs->on_apply(*caches[c], plan.sinfos[c][i], plan.ubatches[i], caches[c]->get_n_kv(plan.sinfos[c][i]));
            }
        }
        ++n_ubatches_;
    }
    return DECODE_OK;
}

}  // namespace kvsim
