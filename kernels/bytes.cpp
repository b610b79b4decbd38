#include "bytes.h"

#include <fmt/format.h>

#include <stdexcept>

namespace kvsim {

namespace {

// a * b for non-negative counts, throwing std::overflow_error instead of wrapping (kvbench refuses such sweeps
// up front; this is the backstop so no byte count is ever silently wrong).
size_t mul(size_t a, size_t b, const char * what) {
    size_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error(fmt::format("{}: byte count overflows 64 bits", what));
    return r;
}

size_t count(int64_t v, const char * what) {
    if (v < 0) throw std::invalid_argument(fmt::format("{}: negative count {}", what, v));
    return (size_t) v;
}

}  // namespace

size_t fa_kv_bytes(int64_t n_kv, int64_t n_stream, int64_t n_head_kv, ggml_type type_k, int64_t head_k, ggml_type type_v,
                   int64_t head_v) {
    const char * w = "fa_kv_bytes";
    const size_t rows = mul(mul(count(n_kv, w), count(n_stream, w), w), count(n_head_kv, w), w);
    const size_t rk = ggml_row_size(type_k, head_k), rv = ggml_row_size(type_v, head_v);
    if (rk > SIZE_MAX - rv) throw std::overflow_error("fa_kv_bytes: byte count overflows 64 bits");
    return mul(rows, rk + rv, w);
}

size_t kq_mask_bytes(int64_t n_kv, int64_t n_tps, int64_t n_stream, ggml_type mask_type) {
    const char * w = "kq_mask_bytes";
    return mul(mul(mul(count(n_kv, w), count(n_tps, w), w), count(n_stream, w), w), mask_type == ggml_type::f16 ? 2 : 4, w);
}

size_t kshift_bytes(int64_t kv_size, int64_t n_stream, int64_t n_head_kv, ggml_type type_k, int64_t head_k) {
    const char * w = "kshift_bytes";
    const size_t cells = mul(count(kv_size, w), count(n_stream, w), w);
    const size_t row = ggml_row_size(type_k, (int64_t) mul(count(head_k, w), count(n_head_kv, w), w));
    const size_t per_cell = mul(row, 2, w);
    if (per_cell > SIZE_MAX - sizeof(int32_t)) throw std::overflow_error("kshift_bytes: byte count overflows 64 bits");
    return mul(cells, per_cell + sizeof(int32_t), w);
}

}  // namespace kvsim
