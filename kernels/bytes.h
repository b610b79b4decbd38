// Bytes-moved accounting of the attention kernels, to turn a measured time into GB/s. Counts the bytes the
// kernel must move at least (compulsory traffic), not cache-line or re-read effects.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/ggml_type.h"

namespace kvsim {

// K and V bytes read by one flash-attention decode call of one layer: every (stream, cell < n_kv, kv head) row
// of K and V once: n_stream*n_kv*n_head_kv*(row_size(type_k, head_k) + row_size(type_v, head_v)).
size_t fa_kv_bytes(int64_t n_kv, int64_t n_stream, int64_t n_head_kv, ggml_type type_k, int64_t head_k, ggml_type type_v,
                   int64_t head_v);
// Bytes of a KQ mask [n_kv, n_tps, 1, n_stream] of mask_type (f16: 2, f32: 4 bytes per element), written once.
size_t kq_mask_bytes(int64_t n_kv, int64_t n_tps, int64_t n_stream, ggml_type mask_type);
// Bytes moved by one layer's K-shift: every cell's K row read and written (kv_size*n_stream rows of
// row_size(type_k, head_k*n_head_kv)), plus the I32 shift input (4 bytes per cell).
// All three throw std::overflow_error when the count does not fit in size_t (never wrap), std::invalid_argument
// for a negative count.
size_t kshift_bytes(int64_t kv_size, int64_t n_stream, int64_t n_head_kv, ggml_type type_k, int64_t head_k);

}  // namespace kvsim
