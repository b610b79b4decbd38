#include "bytes.h"

namespace kvsim {

size_t fa_kv_bytes(int64_t n_kv, int64_t n_stream, int64_t n_head_kv, ggml_type type_k, int64_t head_k, ggml_type type_v,
                   int64_t head_v) {
    return (size_t) (n_kv * n_stream * n_head_kv) * (ggml_row_size(type_k, head_k) + ggml_row_size(type_v, head_v));
}

size_t kq_mask_bytes(int64_t n_kv, int64_t n_tps, int64_t n_stream, ggml_type mask_type) {
    return (size_t) (n_kv * n_tps * n_stream) * (mask_type == ggml_type::f16 ? 2 : 4);
}

size_t kshift_bytes(int64_t kv_size, int64_t n_stream, int64_t n_head_kv, ggml_type type_k, int64_t head_k) {
    const size_t cells = (size_t) (kv_size * n_stream);
    return cells * (2 * ggml_row_size(type_k, head_k * n_head_kv) + sizeof(int32_t));
}

}  // namespace kvsim
