#include "kv_content.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "quant.h"

namespace kvsim {

namespace {
uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
}  // namespace

float kv_value(uint32_t layer, kv_which which, llama_seq_id seq, llama_pos pos, int64_t head, int64_t dim) {
    uint64_t h = splitmix64(((uint64_t) layer << 1) | (uint64_t) which);
    h = splitmix64(h ^ (uint32_t) seq);
    h = splitmix64(h ^ (uint32_t) pos);
    h = splitmix64(h ^ ((uint64_t) head << 32) ^ (uint64_t) dim);
    return (float) (h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

void check_kv_tensor(const kv_tensor & t, const char * what) {
    if (!kernel_supports_type(t.type)) {
        throw std::invalid_argument(std::string(what) + ": unsupported cache type " + ggml_type_name(t.type));
    }
    if (t.head_dim <= 0 || t.n_head_kv <= 0 || t.kv_size <= 0 || t.n_stream <= 0 || t.data == nullptr) {
        throw std::invalid_argument(std::string(what) + ": empty or null KV tensor");
    }
    ggml_row_size(t.type, t.head_dim);
}

void write_kv_cell(const kv_tensor & t, int64_t stream, int64_t cell, uint32_t layer, kv_which which, llama_seq_id seq,
                   llama_pos pos, int rot_n) {
    if (stream < 0 || stream >= t.n_stream || cell < 0 || cell >= t.kv_size) {
        throw std::out_of_range("write_kv_cell: stream " + std::to_string(stream) + " cell " + std::to_string(cell) +
                                " outside the cache");
    }
    std::vector<float> row((size_t) (t.head_dim * t.n_head_kv));
    for (int64_t h = 0; h < t.n_head_kv; ++h) {
        for (int64_t d = 0; d < t.head_dim; ++d) row[(size_t) (h * t.head_dim + d)] = kv_value(layer, which, seq, pos, h, d);
    }
    if (rot_n > 0) fwht_blocks(row.data(), (int64_t) row.size(), rot_n);
    row_from_f32(t.type, row.data(), t.row(stream, cell), (int64_t) row.size());
}

}  // namespace kvsim
