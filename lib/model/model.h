// Model shapes that matter to the KV cache: layers, heads, SWA layout, RoPE, weight count.
// Source: src/llama-hparams.h (n_head_kv, n_embd_head_k, n_swa, swa_layers, set_swa_pattern).
#pragma once

#include "core/ggml_type.h"
#include "core/types.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

enum class rope_type { none, norm, neox };

struct model_shape {
    std::string name = "custom";
    uint32_t n_layer = 32;
    uint32_t n_head = 32;
    uint32_t n_head_kv = 8;
    uint32_t head_dim = 128;          // n_embd_head_k == n_embd_head_v
    uint32_t n_swa = 0;               // sliding window in tokens; 0 = no SWA
    swa_type swa = swa_type::none;
    uint32_t swa_pattern = 0;         // n_pattern of set_swa_pattern; 0 = every layer SWA
    bool swa_dense_first = false;
    rope_type rope = rope_type::norm;
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    float attn_softcap = 0.0f;        // Gemma-2 logit soft-capping; 0 = off
    double n_params = 0;              // all weights (llama_model_n_params); set from the dimensions below when n_embd > 0
    // Weight matrix dimensions (GGUF <arch>.embedding_length, feed_forward_length, vocab size); the
    // step-time model reads the per-group bytes from them (time/weight_types.h). n_embd 0 = unknown:
    // a custom shape whose n_params count as one group.
    uint32_t n_embd = 0;
    uint32_t n_ff = 0;
    uint32_t n_vocab = 0;
    bool tied_embd = false;           // no output.weight: the output matmul reads token_embd (Llama-3.2, Qwen2.5-0.5B, Gemma)
    bool qkv_bias = false;            // Qwen2: attn_q/k/v biases
    uint32_t n_ctx_train = 4096;      // GGUF <arch>.context_length: llama-server caps each slot's context at it
    bool add_bos = true;              // GGUF tokenizer.ggml.add_bos_token (llama_vocab_get_add_bos)

    uint32_t n_embd_k_gqa() const { return head_dim * n_head_kv; }
    // Layer il uses the sliding window (llama_hparams::set_swa_pattern / is_swa).
    bool is_swa(uint32_t il) const;
    uint32_t n_layer_swa() const;
    bool has_swa() const { return swa != swa_type::none && n_swa > 0; }
};

// Presets with real shapes, named as their GGUF files: llama-3-8b (Meta-Llama-3-8B, 8K training
// context), llama-3.1-8b (128K), llama-3.2-1b (tied output), llama-2-7b (the llama-bench tables'
// model), mistral-7b-v0.1, gemma-2-9b, gemma-3-12b, qwen2.5-7b (no BOS), qwen2.5-0.5b (no BOS, tied), and
// the test models of ../shared/tools: tiny-llama (server-oracle's tiny-llama-x: 4096 training
// context, no BOS), tiny-llama-128k (tiny-llama-x-128k) and tiny-gemma3-swa (tiny-gemma3-swa-x).
// Throws std::invalid_argument listing the known names for an unknown one.
model_shape model_preset(const std::string & name);
std::vector<std::string> model_preset_names();

// Bytes of K plus V for one cell of one layer (llama_kv_cache constructor's size sums):
// row_size(type_k, n_embd_k_gqa) + row_size(type_v, n_embd_v_gqa). Throws if a row is not a
// multiple of the type's block size (llama_init_from_model refuses it too).
// Parameters per tensor group of a shape with known dimensions (n_embd > 0; all 0 otherwise):
// attn = attn_q/k/v/output of every layer, ffn = ffn_gate/up/down, token_embd, output (0 when tied:
// the output matmul reads token_embd), norm = the 1-D tensors (norms, Qwen2's q/k/v biases).
struct param_groups {
    double attn = 0, ffn = 0, token_embd = 0, output = 0, norm = 0;
    double total() const { return attn + ffn + token_embd + output + norm; }
};
param_groups model_param_groups(const model_shape & m);
// llama_model_n_params of the shape: model_param_groups(m).total() (each tensor once).
double model_param_count(const model_shape & m);

size_t kv_bytes_per_cell_layer(const model_shape & m, ggml_type type_k, ggml_type type_v);

}  // namespace kvsim
