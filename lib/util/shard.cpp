#include "util/shard.h"

#include "core/errors.h"

#include <charconv>
#include <fmt/format.h>
#include <string_view>

namespace kvsim {

namespace {
// An integer that fills `s`; false for anything else. Out of range is told apart (`huge`).
bool whole_int(std::string_view s, int64_t & v, bool & huge) {
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    huge = ec == std::errc::result_out_of_range && end == s.data() + s.size();
    return !s.empty() && (ec == std::errc() || huge) && end == s.data() + s.size();
}
}  // namespace

shard_spec parse_shard(const std::string & option, const std::string & spec) {
    const size_t slash = spec.find('/');
    if (slash == std::string::npos || spec.find('/', slash + 1) != std::string::npos) {
        throw input_error(option, 0, spec, "expected i/n");
    }
    const std::string_view is = std::string_view(spec).substr(0, slash), ns = std::string_view(spec).substr(slash + 1);
    int64_t i = 0, n = 0;
    bool i_huge = false, n_huge = false;
    if (!whole_int(is, i, i_huge)) throw input_error(option, 0, spec, "shard index is not an integer");
    if (!whole_int(ns, n, n_huge)) throw input_error(option, 0, spec, fmt::format("'{}' is not an integer", ns));
    if (n_huge) throw input_error(option, 0, spec, fmt::format("'{}' is out of range (at most {})", ns, max_shards));
    if (n <= 0) throw input_error(option, 0, spec, fmt::format("'{}' must be positive", ns));
    if (n > max_shards) throw input_error(option, 0, spec, fmt::format("'{}' is above the maximum {}", ns, max_shards));
    if (i_huge || i < 0 || i >= n) throw input_error(option, 0, spec, fmt::format("shard index must be in [0, {})", n));
    return {(int) i, (int) n};
}

std::string shard_text(const shard_spec & s) { return fmt::format("{}/{}", s.index, s.count); }

}  // namespace kvsim
