// ggml element types of a KV cache and their block sizes (ggml/src/ggml.c: type_traits).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kvsim {

// The cache types llama.cpp accepts for -ctk/-ctv (common/arg.cpp: kv_cache_types).
enum class ggml_type { f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl };

// Elements per block (1 for f32/f16/bf16, 32 for the quantized types).
int64_t ggml_blck_size(ggml_type t);
// Bytes per block: f32 4, f16/bf16 2, q8_0 34, q4_0 18, q4_1 20, q5_0 22, q5_1 24, iq4_nl 18.
size_t ggml_type_size(ggml_type t);
// Bytes of a row of n elements (ggml.c: ggml_row_size). n must be a multiple of the block size;
// throws std::invalid_argument otherwise.
size_t ggml_row_size(ggml_type t, int64_t n);
bool ggml_is_quantized(ggml_type t);
// Name as llama.cpp prints it ("f16", "q8_0", ...).
const char * ggml_type_name(ggml_type t);
// Parse a -ctk/-ctv value; throws std::invalid_argument naming the value otherwise.
ggml_type parse_ggml_type(const std::string & s);

}  // namespace kvsim
