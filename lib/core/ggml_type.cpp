#include "core/ggml_type.h"

#include <stdexcept>

namespace kvsim {

namespace {
struct type_traits {
    const char * name;
    int64_t blck;
    size_t size;
    bool quantized;
};

const type_traits & traits(ggml_type t) {
    static const type_traits table[] = {
        {"f32", 1, 4, false},   {"f16", 1, 2, false},   {"bf16", 1, 2, false},
        {"q8_0", 32, 34, true}, {"q4_0", 32, 18, true}, {"q4_1", 32, 20, true},
        {"q5_0", 32, 22, true}, {"q5_1", 32, 24, true}, {"iq4_nl", 32, 18, true},
    };
    return table[static_cast<int>(t)];
}
}  // namespace

int64_t ggml_blck_size(ggml_type t) { return traits(t).blck; }
size_t ggml_type_size(ggml_type t) { return traits(t).size; }
bool ggml_is_quantized(ggml_type t) { return traits(t).quantized; }
const char * ggml_type_name(ggml_type t) { return traits(t).name; }

size_t ggml_row_size(ggml_type t, int64_t n) {
    const auto & tr = traits(t);
    if (n < 0 || n % tr.blck != 0) {
        throw std::invalid_argument(std::string("row of ") + std::to_string(n) + " elements is not a multiple of the " +
                                    tr.name + " block size " + std::to_string(tr.blck));
    }
    return tr.size * (size_t) (n / tr.blck);
}

ggml_type parse_ggml_type(const std::string & s) {
    for (int i = 0; i <= static_cast<int>(ggml_type::iq4_nl); ++i) {
        if (s == traits(static_cast<ggml_type>(i)).name) {
            return static_cast<ggml_type>(i);
        }
    }
    throw std::invalid_argument("unknown cache type '" + s + "' (expected f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl)");
}

}  // namespace kvsim
