#include "hadamard.h"

#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace kvsim {

int hadamard_size_k(int64_t head_dim) {
    if (head_dim <= 0 || head_dim % 64 != 0) return 0;
    int n = 64;
    while (head_dim % (2 * (int64_t) n) == 0) n *= 2;
    return n;
}

int hadamard_size_v(int64_t head_dim) { return head_dim > 0 && head_dim % 64 == 0 ? 64 : 0; }

attn_rot attn_rot_config(ggml_type type_k, ggml_type type_v, int64_t head_k, int64_t head_v, bool disable) {
    attn_rot r;
    if (disable) return r;
    if (ggml_is_quantized(type_k)) r.n_k = hadamard_size_k(head_k);
    if (ggml_is_quantized(type_v)) r.n_v = hadamard_size_v(head_v);
    return r;
}

bool attn_rot_disabled_by_env() {
    const char * s = std::getenv("LLAMA_ATTN_ROT_DISABLE");
    return s != nullptr && std::atoi(s) != 0;
}

void fwht(float * x, int n) {
    if (n < 1 || (n & (n - 1)) != 0) throw std::invalid_argument("fwht size " + std::to_string(n) + " is not a power of two");
    const float s = 1.0f / std::sqrt((float) n);
    for (int i = 0; i < n; ++i) x[i] *= s;
    for (int h = 1; h < n; h *= 2) {
        for (int i = 0; i < n; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
                const float a = x[j];
                const float b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
}

void fwht_blocks(float * x, int64_t len, int n) {
    if (n <= 0 || len % n != 0) {
        throw std::invalid_argument("fwht_blocks: length " + std::to_string(len) + " is not a multiple of " + std::to_string(n));
    }
    for (int64_t i = 0; i < len; i += n) fwht(x + i, n);
}

}  // namespace kvsim
