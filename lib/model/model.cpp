#include "model/model.h"

#include <stdexcept>

namespace kvsim {

bool model_shape::is_swa(uint32_t il) const {
    if (!has_swa()) {
        return false;
    }
    if (swa_pattern == 0) {
        return true;
    }
    return swa_dense_first ? il % swa_pattern != 0 : il % swa_pattern < swa_pattern - 1;
}

uint32_t model_shape::n_layer_swa() const {
    uint32_t n = 0;
    for (uint32_t il = 0; il < n_layer; ++il) {
        n += is_swa(il) ? 1 : 0;
    }
    return n;
}

namespace {
model_shape make(const char * name, uint32_t n_layer, uint32_t n_head, uint32_t n_head_kv, uint32_t head_dim,
                 rope_type rope, float freq_base, double n_params) {
    model_shape m;
    m.name = name;
    m.n_layer = n_layer;
    m.n_head = n_head;
    m.n_head_kv = n_head_kv;
    m.head_dim = head_dim;
    m.rope = rope;
    m.rope_freq_base = freq_base;
    m.n_params = n_params;
    return m;
}

// n_ctx_train and add_bos as the GGUF metadata says (context_length, tokenizer.ggml.add_bos_token)
model_shape with_vocab(model_shape m, uint32_t n_ctx_train, bool add_bos) {
    m.n_ctx_train = n_ctx_train;
    m.add_bos = add_bos;
    return m;
}

// embedding_length, feed_forward_length, vocabulary size, tied output; n_params from them
model_shape with_dims(model_shape m, uint32_t n_embd, uint32_t n_ff, uint32_t n_vocab, bool tied, bool qkv_bias = false) {
    m.n_embd = n_embd;
    m.n_ff = n_ff;
    m.n_vocab = n_vocab;
    m.tied_embd = tied;
    m.qkv_bias = qkv_bias;
    m.n_params = model_param_count(m);
    return m;
}

model_shape with_swa(model_shape m, uint32_t n_swa, uint32_t pattern) {
    m.n_swa = n_swa;
    m.swa = swa_type::standard;
    m.swa_pattern = pattern;
    return m;
}

std::vector<model_shape> presets() {
    // shapes from the models' config.json / GGUF metadata as llama.cpp loads them
    // gemma's extra norms (post-attention/FFN, q/k norms) are not counted: a few hundred thousand f32s
    model_shape gemma2 = with_dims(with_vocab(with_swa(make("gemma-2-9b", 42, 16, 8, 256, rope_type::neox, 10000.0f, 0), 4096, 2), 8192, true),
                                   3584, 14336, 256000, true);
    gemma2.attn_softcap = 50.0f;
    // the tiny models: ../shared/tools/server-oracle/make_models.py (no BOS token in their vocabulary);
    // custom shapes for the step time: 0.5e6 parameters in one group (the scheduler tests' hand values)
    return {
        with_dims(with_vocab(make("llama-3-8b", 32, 32, 8, 128, rope_type::norm, 500000.0f, 0), 8192, true), 4096, 14336, 128256, false),
        with_dims(with_vocab(make("llama-3.1-8b", 32, 32, 8, 128, rope_type::norm, 500000.0f, 0), 131072, true), 4096, 14336, 128256, false),
        with_dims(with_vocab(make("llama-3.2-1b", 16, 32, 8, 64, rope_type::norm, 500000.0f, 0), 131072, true), 2048, 8192, 128256, true),
        with_dims(with_vocab(make("llama-2-7b", 32, 32, 32, 128, rope_type::norm, 10000.0f, 0), 4096, true), 4096, 11008, 32000, false),
        with_dims(with_vocab(with_swa(make("mistral-7b-v0.1", 32, 32, 8, 128, rope_type::norm, 10000.0f, 0), 4096, 0), 32768, true),
                  4096, 14336, 32000, false),
        gemma2,
        with_dims(with_vocab(with_swa(make("gemma-3-12b", 48, 16, 8, 256, rope_type::neox, 1000000.0f, 0), 1024, 6), 131072, true),
                  3840, 15360, 262208, true),
        with_dims(with_vocab(make("qwen2.5-7b", 28, 28, 4, 128, rope_type::neox, 1000000.0f, 0), 32768, false), 3584, 18944, 152064, false, true),
        with_dims(with_vocab(make("qwen2.5-0.5b", 24, 14, 2, 64, rope_type::neox, 1000000.0f, 0), 32768, false), 896, 4864, 151936, true, true),
        with_vocab(make("tiny-llama", 2, 4, 2, 32, rope_type::norm, 10000.0f, 0.5e6), 4096, false),
        with_vocab(make("tiny-llama-128k", 2, 4, 2, 32, rope_type::norm, 10000.0f, 0.5e6), 131072, false),
        with_vocab(with_swa(make("tiny-gemma3-swa", 2, 4, 2, 32, rope_type::neox, 10000.0f, 0.5e6), 8, 2), 4096, false),
    };
}
}  // namespace

model_shape model_preset(const std::string & name) {
    std::string known;
    for (const auto & m : presets()) {
        if (m.name == name) {
            return m;
        }
        known += (known.empty() ? "" : ", ") + m.name;
    }
    throw std::invalid_argument("unknown model preset '" + name + "' (known: " + known + ")");
}

std::vector<std::string> model_preset_names() {
    std::vector<std::string> v;
    for (const auto & m : presets()) {
        v.push_back(m.name);
    }
    return v;
}

param_groups model_param_groups(const model_shape & m) {
    param_groups g;
    if (m.n_embd == 0) return g;
    const double e = m.n_embd, q = (double) m.n_head * m.head_dim, kv = m.n_embd_k_gqa(), ff = m.n_ff;
    g.attn = m.n_layer * (e * q + 2 * e * kv + q * e);
    g.ffn = m.n_layer * 3 * e * ff;
    g.token_embd = e * m.n_vocab;
    g.output = m.tied_embd ? 0 : e * m.n_vocab;
    g.norm = m.n_layer * (2 * e + (m.qkv_bias ? q + 2 * kv : 0)) + e;
    return g;
}

double model_param_count(const model_shape & m) { return model_param_groups(m).total(); }

size_t kv_bytes_per_cell_layer(const model_shape & m, ggml_type type_k, ggml_type type_v) {
    return ggml_row_size(type_k, m.n_embd_k_gqa()) + ggml_row_size(type_v, m.n_embd_k_gqa());
}

}  // namespace kvsim
