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

model_shape with_swa(model_shape m, uint32_t n_swa, uint32_t pattern) {
    m.n_swa = n_swa;
    m.swa = swa_type::standard;
    m.swa_pattern = pattern;
    return m;
}

std::vector<model_shape> presets() {
    // shapes from the models' config.json / GGUF metadata as llama.cpp loads them
    model_shape gemma2 = with_vocab(with_swa(make("gemma-2-9b", 42, 16, 8, 256, rope_type::neox, 10000.0f, 9.24e9), 4096, 2), 8192, true);
    gemma2.attn_softcap = 50.0f;
    // the tiny models: ../shared/tools/server-oracle/make_models.py (no BOS token in their vocabulary)
    return {
        with_vocab(make("llama-3-8b", 32, 32, 8, 128, rope_type::norm, 500000.0f, 8.03e9), 8192, true),
        with_vocab(make("llama-3.1-8b", 32, 32, 8, 128, rope_type::norm, 500000.0f, 8.03e9), 131072, true),
        with_vocab(with_swa(make("mistral-7b-v0.1", 32, 32, 8, 128, rope_type::norm, 10000.0f, 7.24e9), 4096, 0), 32768, true),
        gemma2,
        with_vocab(with_swa(make("gemma-3-12b", 48, 16, 8, 256, rope_type::neox, 1000000.0f, 11.77e9), 1024, 6), 131072, true),
        with_vocab(make("qwen2.5-7b", 28, 28, 4, 128, rope_type::neox, 1000000.0f, 7.62e9), 32768, false),
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

size_t kv_bytes_per_cell_layer(const model_shape & m, ggml_type type_k, ggml_type type_v) {
    return ggml_row_size(type_k, m.n_embd_k_gqa()) + ggml_row_size(type_v, m.n_embd_k_gqa());
}

}  // namespace kvsim
