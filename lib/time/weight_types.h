// Bytes of a model's weights for a GGUF file type (--weights), per tensor group, as llama.cpp's
// quantizer lays them out. Block sizes: ggml/src/ggml.c type_traits (blck_size, type_size) and
// ggml/src/ggml-common.h (block_q*_K sizes). Per-tensor choices of the mixtures (Q4_K_M keeps
// attn_v and ffn_down of some layers at Q6_K, output at Q6_K, ...): src/llama-quant.cpp:
// llama_tensor_get_type_impl and tensor_type_fallback, without an imatrix, for a non-MoE,
// non-Falcon model (the presets).
#pragma once

#include "model/model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

// A ggml tensor type that weights use (ggml.c type_traits).
struct weight_tensor_type {
    const char * name;     // ggml_type_name: "f16", "q4_K", ...
    int64_t blck_size;     // elements per block
    size_t type_size;      // bytes per block
};

// The ggml types by name; throws std::invalid_argument for another name.
const weight_tensor_type & weight_tensor_type_by_name(const std::string & name);

// A GGUF file type (llama_ftype): its --weights spelling, llama_ftype_name() (what llama-bench
// writes in model_type after the size, e.g. "Q4_K - Medium") and the default tensor type
// (llama_ftype_get_default_type).
struct weight_file_type {
    const char * name;        // f32 f16 bf16 q8_0 q6_K q5_K_M q5_K_S q5_1 q5_0 q4_K_M q4_K_S q4_1 q4_0
    const char * ftype_name;  // llama_ftype_name
    const char * default_type;
};

// Accepts the names above, case-insensitively. Throws std::invalid_argument listing them.
const weight_file_type & parse_weight_file_type(const std::string & name);
std::vector<std::string> weight_file_type_names();
// f32, f16 or bf16: weights whose GEMMs take the float path (CUDA: cuBLAS; ggml-cuda.cu ggml_cuda_mul_mat) rather
// than llama.cpp's quantized kernels (mmq / mmvq); nullptr (the default f16) counts as float.
bool is_float_weight_type(const weight_file_type * t);
inline bool is_float_weight_type(const weight_file_type & t) { return is_float_weight_type(&t); }
// The file type whose llama_ftype_name is `ftype_name` (exact), or nullptr.
const weight_file_type * weight_file_type_by_ftype_name(const std::string & ftype_name);

// Bytes (and parameters) of one model in one file type, by tensor group. 1-D tensors (norms,
// biases) are never quantized (tensor_allows_quantization): f32.
struct weight_bytes {
    double attn = 0, ffn = 0, token_embd = 0, output = 0, norm = 0;   // bytes
    double n_params = 0;        // llama_model_n_params: every tensor once (a tied output is token_embd)
    double dense_params = 0;    // attn + ffn matrix parameters: 2 FLOPs each per token
    double output_params = 0;   // output matrix parameters: 2 FLOPs each per output row (logits)
    // ggml-cpu on x86 (AVX2 and up) repacks matrices of types q4_0, q4_K and iq4_nl (ggml-cpu/repack.cpp:
    // ggml_repack_get_optimal_repack_type; not q8_0, q5_K, q6_K, ...: those go through ggml_vec_dot for one row and
    // llamafile's tinyBLAS / ggml's blocked vec_dot for several). A tied output (token_embd) is never repacked:
    // llama.cpp keeps token_embd, a GET_ROWS operand, out of the repack buffer (extra_buffer_type::supports_op).
    double packed_bytes = 0;            // bytes of the matrices repacked (layers' and, when repacked, the output)
    double unpacked_dense_params = 0;   // parameters of the layers' matrices not repacked
    bool output_packed = false;
    // Bytes one ubatch reads: every layer's matrices, the norms and the output matrix (token_embd
    // itself is a get_rows of n_tokens rows, except when the output is tied to it).
    double read_per_ubatch() const { return attn + ffn + output + norm; }
    // llama_model_size: all tensors' bytes (token_embd once when tied).
    double file_bytes() const { return attn + ffn + token_embd + output + norm; }
};

// The model's weights in file type `ft`. A model without n_embd (a custom shape) counts its
// n_params as FFN weights of the default tensor type.
weight_bytes model_weight_bytes(const model_shape & m, const weight_file_type & ft);

// The ggml type llama-quantize gives tensor `tensor` ("attn_q", "attn_k", "attn_v",
// "attn_output", "ffn_gate", "ffn_up", "ffn_down", "token_embd", "output") of layer i_layer
// (0-based, of n_layer) with `ncols` columns (ne[0]). Exposed for the tests.
const weight_tensor_type & quantized_tensor_type(const weight_file_type & ft, const std::string & tensor, int i_layer,
                                                 int n_layer, int64_t ncols, bool tied_embd);

}  // namespace kvsim
