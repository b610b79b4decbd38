// ggml block formats of the quantized KV-cache types and scalar row conversions.
// Bit for bit ggml's reference code (ggml/src/ggml-quants.c: quantize_row_q8_0_ref, quantize_row_q4_0_ref,
// dequantize_row_q8_0, dequantize_row_q4_0) and ggml-common.h block layouts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fp16.h"
#include "core/ggml_type.h"

namespace kvsim {

constexpr int QK8_0 = 32;
constexpr int QK4_0 = 32;

// q8_0 block (34 bytes): f16 scale d = amax/127, 32 int8 q = roundf(x/d); x ~= q*d.
struct block_q8_0 {
    fp16_t d;
    int8_t qs[QK8_0];
};
static_assert(sizeof(block_q8_0) == 34, "q8_0 block must match ggml");

// q4_0 block (18 bytes): f16 scale d = max/-8 (max = the element of largest magnitude, sign kept);
// qs[j] holds element j in its low nibble and element j+16 in its high nibble, q = min(15, (int8)(x/d + 8.5));
// x ~= (q - 8)*d.
struct block_q4_0 {
    fp16_t d;
    uint8_t qs[QK4_0 / 2];
};
static_assert(sizeof(block_q4_0) == 18, "q4_0 block must match ggml");

// Quantize n floats (n % 32 == 0) into n/32 blocks. Mirrors quantize_row_q8_0_ref.
void quantize_row_q8_0(const float * x, block_q8_0 * y, int64_t n);
// Quantize n floats (n % 32 == 0) into n/32 blocks. Mirrors quantize_row_q4_0_ref.
void quantize_row_q4_0(const float * x, block_q4_0 * y, int64_t n);
// Dequantize n elements (n % 32 == 0). Mirror dequantize_row_q8_0 / dequantize_row_q4_0.
void dequantize_row_q8_0(const block_q8_0 * x, float * y, int64_t n);
void dequantize_row_q4_0(const block_q4_0 * x, float * y, int64_t n);
// Round n floats (n % 32 == 0) through q8_0 in place: quantize into y (n/32 blocks, kept for the caller), then
// overwrite x with their dequantized values. How ggml's CPU flash attention turns Q into a q8_0 K's vec_dot_type.
void round_row_q8_0(float * x, block_q8_0 * y, int64_t n);

// True for the cache types the attention kernels handle: f32, f16, q8_0, q4_0.
bool kernel_supports_type(ggml_type t);

// Convert a row of n elements of type t (f32, f16, q8_0, q4_0) at src to f32 (scalar, exact ggml semantics).
// Throws std::invalid_argument for other types or when n is not a multiple of the block size.
void row_to_f32(ggml_type t, const void * src, float * dst, int64_t n);
// Convert n floats to a row of type t (f16 rounds to nearest even; q8_0/q4_0 as ggml's _ref quantizers).
// Throws std::invalid_argument like row_to_f32.
void row_from_f32(ggml_type t, const float * src, void * dst, int64_t n);

}  // namespace kvsim
