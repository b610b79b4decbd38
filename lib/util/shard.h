// Shard "i/n" of a run whose points are numbered 0..N-1: shard i takes the points whose number % n == i
// (kvbench sweep --shard, kvsim plan --shard); the shards' outputs are merged into the whole run.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvsim {

// Largest shard count.
constexpr int64_t max_shards = (int64_t) 1 << 20;

struct shard_spec {
    int index = 0;
    int count = 1;
    bool takes(size_t point) const { return (int64_t) (point % (size_t) count) == index; }
};

// A positive whole number filling `s` (a part of `spec`, the text as typed), at most max_value. Throws
// input_error(option, 0, spec, why) naming the part: not an integer, out of range, <= 0, above max_value.
// (kvsim's list and shard grammars: kvbench --ctx/--batch ranges, --shard i/n.)
int64_t parse_positive(const std::string & option, const std::string & spec, std::string_view s, int64_t max_value = INT64_MAX);

// Throws input_error(option, 0, spec, why) (spec as typed) when malformed, n outside [1, max_shards] or i
// outside [0, n). `option` names where the text came from (a flag, a JSON field).
shard_spec parse_shard(const std::string & option, const std::string & spec);

// "i/n", as parse_shard reads it.
std::string shard_text(const shard_spec & s);

}  // namespace kvsim
