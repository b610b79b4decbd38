#include "util/shard.h"

#include "core/errors.h"

#include <charconv>
#include <fmt/format.h>
#include <string_view>

namespace kvsim {

int64_t parse_positive(const std::string & option, const std::string & spec, std::string_view s, int64_t max_value) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range && end == s.data() + s.size()) {
        throw input_error(option, 0, spec, fmt::format("'{}' is out of range (at most {})", s, max_value));
    }
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
        throw input_error(option, 0, spec, fmt::format("'{}' is not an integer", s));
    }
    if (v <= 0) throw input_error(option, 0, spec, fmt::format("'{}' must be positive", s));
    if (v > max_value) throw input_error(option, 0, spec, fmt::format("'{}' is above the maximum {}", s, max_value));
    return v;
}

shard_spec parse_shard(const std::string & option, const std::string & spec) {
    const size_t slash = spec.find('/');
    if (slash == std::string::npos || spec.find('/', slash + 1) != std::string::npos) {
        throw input_error(option, 0, spec, "expected i/n");
    }
    const std::string_view is = std::string_view(spec).substr(0, slash), ns = std::string_view(spec).substr(slash + 1);
    int64_t i = 0;
    const auto [end, ec] = std::from_chars(is.data(), is.data() + is.size(), i);
    if (is.empty() || end != is.data() + is.size() || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
        throw input_error(option, 0, spec, "shard index is not an integer");
    }
    const int64_t n = parse_positive(option, spec, ns, max_shards);
    if (ec != std::errc() || i < 0 || i >= n) throw input_error(option, 0, spec, fmt::format("shard index must be in [0, {})", n));
    return {(int) i, (int) n};
}

std::string shard_text(const shard_spec & s) { return fmt::format("{}/{}", s.index, s.count); }

}  // namespace kvsim
