// A layer's K or V cache buffer laid out as llama.cpp's (src/llama-kv-cache.cpp: layers[il].k / .v with flash
// attention on, i.e. V not transposed): [head_dim, n_head_kv, kv_size, n_stream], one cell = one contiguous row
// of head_dim*n_head_kv elements of `type` (quantized types: blocks of 32 along the row, never straddling heads
// because head_dim % 32 == 0 is required).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace kvsim {

struct kv_tensor {
    void * data = nullptr;  // host memory for the CPU backend, device memory for CUDA
    ggml_type type = ggml_type::f16;
    int64_t head_dim = 128;  // n_embd_head_k (or _v)
    int64_t n_head_kv = 8;
    int64_t kv_size = 0;  // cells per stream
    int64_t n_stream = 1;

    // Bytes of one head of one cell (ggml_row_size(type, head_dim)).
    size_t head_bytes() const { return ggml_row_size(type, head_dim); }
    // Bytes of one cell (n_embd_k_gqa elements), the ggml row stride nb[1] of the 2-D cache tensor.
    size_t row_bytes() const { return ggml_row_size(type, head_dim * n_head_kv); }
    size_t stream_bytes() const { return row_bytes() * (size_t) kv_size; }
    size_t total_bytes() const { return stream_bytes() * (size_t) n_stream; }
    // Start of cell `cell` of stream `stream` (no bounds check).
    void * row(int64_t stream, int64_t cell) const {
        return static_cast<char *>(data) + (size_t) (stream * kv_size + cell) * row_bytes();
    }
};

// Throws std::invalid_argument unless type is f32/f16/q8_0/q4_0, head_dim is a positive multiple of the block
// size, and all sizes are positive.
void check_kv_tensor(const kv_tensor & t, const char * what);

}  // namespace kvsim
