#include "time/weight_types.h"

#include <algorithm>
#include <cctype>
#include <fmt/format.h>
#include <stdexcept>

namespace kvsim {

namespace {
// ggml.c type_traits; block bytes from ggml-common.h's static_asserts (QK_K 256, K_SCALE_SIZE 12)
const weight_tensor_type k_types[] = {
    {"f32", 1, 4},     {"f16", 1, 2},      {"bf16", 1, 2},     {"q8_0", 32, 34},   {"q4_0", 32, 18},
    {"q4_1", 32, 20},  {"q5_0", 32, 22},   {"q5_1", 32, 24},   {"q2_K", 256, 84},  {"q3_K", 256, 110},
    {"q4_K", 256, 144}, {"q5_K", 256, 176}, {"q6_K", 256, 210},
};

// llama_ftype_name and llama_ftype_get_default_type (src/llama-model-loader.cpp, src/llama-quant.cpp)
const weight_file_type k_files[] = {
    {"f32", "all F32", "f32"},          {"f16", "F16", "f16"},
    {"bf16", "BF16", "bf16"},           {"q8_0", "Q8_0", "q8_0"},
    {"q6_K", "Q6_K", "q6_K"},           {"q5_K_M", "Q5_K - Medium", "q5_K"},
    {"q5_K_S", "Q5_K - Small", "q5_K"}, {"q5_1", "Q5_1", "q5_1"},
    {"q5_0", "Q5_0", "q5_0"},           {"q4_K_M", "Q4_K - Medium", "q4_K"},
    {"q4_K_S", "Q4_K - Small", "q4_K"}, {"q4_1", "Q4_1", "q4_1"},
    {"q4_0", "Q4_0", "q4_0"},
};

std::string lower(std::string s) {
    for (char & c : s) c = (char) std::tolower((unsigned char) c);
    return s;
}

bool is_quantized(const weight_tensor_type & t) { return t.blck_size > 1; }

// llama-quant.cpp: use_more_bits
bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// llama-quant.cpp: tensor_type_fallback (a row that is not a whole number of blocks)
const weight_tensor_type & fallback(const weight_tensor_type & t, int64_t ncols) {
    if (ncols % t.blck_size == 0) return t;
    const std::string n = t.name;
    const char * to = n == "q4_K" ? "q5_0" : n == "q5_K" ? "q5_1" : n == "q6_K" ? "q8_0" : (n == "q2_K" || n == "q3_K") ? "q4_0" : t.name;
    const weight_tensor_type & r = weight_tensor_type_by_name(to);
    return ncols % r.blck_size == 0 ? r : weight_tensor_type_by_name("f16");
}
}  // namespace

const weight_tensor_type & weight_tensor_type_by_name(const std::string & name) {
    for (const auto & t : k_types) {
        if (name == t.name) return t;
    }
    throw std::invalid_argument("unknown ggml weight type '" + name + "'");
}

bool is_float_weight_type(const weight_file_type * t) {
    if (!t) return true;
    const std::string n = t->name;
    return n == "f32" || n == "f16" || n == "bf16";
}

const weight_file_type & parse_weight_file_type(const std::string & name) {
    for (const auto & f : k_files) {
        if (lower(name) == lower(f.name)) return f;
    }
    throw std::invalid_argument(fmt::format("unknown weight type '{}' (known: {})", name, fmt::join(weight_file_type_names(), ", ")));
}

std::vector<std::string> weight_file_type_names() {
    std::vector<std::string> v;
    for (const auto & f : k_files) v.emplace_back(f.name);
    return v;
}

const weight_file_type * weight_file_type_by_ftype_name(const std::string & ftype_name) {
    for (const auto & f : k_files) {
        if (ftype_name == f.ftype_name) return &f;
    }
    return nullptr;
}

// llama_tensor_get_type_impl for the file types above (no imatrix, not MoE, not Falcon), then
// tensor_type_fallback. i_layer counts attn_v / ffn_down tensors in layer order, as qs.i_attention_wv
// and qs.i_ffn_down do for a dense model.
const weight_tensor_type & quantized_tensor_type(const weight_file_type & ft, const std::string & tensor, int i_layer,
                                                 int n_layer, int64_t ncols, bool tied_embd) {
    const weight_tensor_type & def = weight_tensor_type_by_name(ft.default_type);
    if (!is_quantized(def)) return def;   // llama_tensor_get_type: only quantized defaults are adjusted
    const std::string f = ft.name;
    std::string type = def.name;
    if (tensor == "output" || (tied_embd && tensor == "token_embd")) {
        if (ncols % def.blck_size != 0) type = "q8_0";
        else if (type != "q8_0") type = "q6_K";
    } else if (tensor == "attn_v") {
        if ((f == "q4_K_M" || f == "q5_K_M") && use_more_bits(i_layer, n_layer)) type = "q6_K";
        else if (f == "q4_K_S" && i_layer < 4) type = "q5_K";
    } else if (tensor == "ffn_down") {
        if (f == "q4_K_M" && use_more_bits(i_layer, n_layer)) type = "q6_K";
        else if (f == "q5_K_M" && use_more_bits(i_layer, n_layer)) type = "q6_K";
        else if (f == "q4_K_S" && i_layer < n_layer / 8) type = "q5_K";
    }
    return fallback(weight_tensor_type_by_name(type), ncols);
}

namespace {
// ggml-cpu/repack.cpp ggml_repack_get_optimal_repack_type with AVX2: q4_0 and q4_K as 8x8 blocks, iq4_nl too, each
// when the rows divide by 8
bool repacked_on_x86(const weight_tensor_type & t, int64_t nrows) {
    const std::string n = t.name;
    return (n == "q4_0" || n == "q4_K" || n == "iq4_nl") && nrows % 8 == 0;
}

double matrix_bytes(const weight_tensor_type & t, int64_t ncols, int64_t nrows) {
    return (double) (ncols / t.blck_size) * (double) t.type_size * (double) nrows;
}
}  // namespace

weight_bytes model_weight_bytes(const model_shape & m, const weight_file_type & ft) {
    weight_bytes w;
    if (m.n_embd == 0) {   // a custom shape: only the total is known
        const weight_tensor_type & t = weight_tensor_type_by_name(ft.default_type);
        w.ffn = m.n_params * (double) t.type_size / (double) t.blck_size;
        w.n_params = m.n_params;
        w.dense_params = m.n_params;
        return w;
    }
    const int n_layer = (int) m.n_layer;
    const int64_t e = m.n_embd, q = (int64_t) m.n_head * m.head_dim, kv = m.n_embd_k_gqa(), ff = m.n_ff;
    // a layer's matrix (dense), token_embd (its packing irrelevant: a GET_ROWS operand) or the untied output
    enum class role { dense, embd, output };
    auto mat = [&](const char * name, int il, int64_t ncols, int64_t nrows, role r = role::dense) {
        w.n_params += (double) ncols * nrows;
        const weight_tensor_type & t = quantized_tensor_type(ft, name, il, n_layer, ncols, m.tied_embd);
        const double bytes = matrix_bytes(t, ncols, nrows);
        const bool packed = r != role::embd && repacked_on_x86(t, nrows);
        if (packed) w.packed_bytes += bytes;
        if (r == role::dense && !packed) w.unpacked_dense_params += (double) ncols * nrows;
        if (r == role::output) w.output_packed = packed;
        return bytes;
    };
    for (int il = 0; il < n_layer; ++il) {
        w.attn += mat("attn_q", il, e, q) + mat("attn_k", il, e, kv) + mat("attn_v", il, e, kv) + mat("attn_output", il, q, e);
        w.ffn += mat("ffn_gate", il, e, ff) + mat("ffn_up", il, e, ff) + mat("ffn_down", il, ff, e);
    }
    w.dense_params = w.n_params;
    // 1-D tensors, f32: attn_norm + ffn_norm per layer (+ the q/k/v biases of Qwen2), output_norm
    const double n_1d = (double) n_layer * (2.0 * e + (m.qkv_bias ? (double) (q + 2 * kv) : 0.0)) + (double) e;
    w.norm = 4.0 * n_1d;
    w.n_params += n_1d;
    w.token_embd = mat("token_embd", 0, e, m.n_vocab, role::embd);
    w.output_params = (double) e * m.n_vocab;
    if (m.tied_embd) {
        w.output = w.token_embd;   // the output matmul reads the whole (shared) matrix
        w.token_embd = 0;          // counted once, as output (file_bytes stays right)
    } else {
        w.output = mat("output", 0, e, m.n_vocab, role::output);
    }
    return w;
}

}  // namespace kvsim
