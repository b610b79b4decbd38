#include "core/types.h"

#include <stdexcept>

namespace kvsim {

swa_type parse_swa_type(const std::string & s) {
    if (s == "none") return swa_type::none;
    if (s == "standard") return swa_type::standard;
    if (s == "chunked") return swa_type::chunked;
    if (s == "symmetric") return swa_type::symmetric;
    throw std::invalid_argument("unknown SWA type '" + s + "' (expected none, standard, chunked, symmetric)");
}

const char * swa_type_name(swa_type t) {
    switch (t) {
        case swa_type::none: return "none";
        case swa_type::standard: return "standard";
        case swa_type::chunked: return "chunked";
        case swa_type::symmetric: return "symmetric";
    }
    return "none";
}

}  // namespace kvsim
