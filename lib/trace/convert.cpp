#include "trace/convert.h"

#include "trace/op_trace.h"
#include "trace/text_lines.h"
#include "util/atomic_file.h"
#include "core/errors.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <filesystem>
#include <fmt/format.h>
#include <limits>
#include <string>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace kvsim {

namespace {
// The Azure writer's epoch; any date works since arrivals are relative to the first request.
constexpr int64_t k_azure_epoch_year = 2023;

// Each check below names the input line: a value that fits the source format but not the target
// is refused before anything is written, rather than written in a form the readers reject.
std::string azure_timestamp(const request & r, const std::string & path) {
    constexpr int64_t ticks_per_s = 10'000'000, ticks_per_day = 86'400 * ticks_per_s;   // 100 ns ticks
    // the Azure reader keeps time as int64 nanoseconds since 1970 (latest 2262-04-11 23:47:16.8547758)
    constexpr int64_t max_ticks = std::numeric_limits<int64_t>::max() / 100;
    const int64_t epoch = days_from_civil(k_azure_epoch_year, 1, 1) * ticks_per_day;
    const double t = r.arrival_s * 1e7;
    if (!(std::isfinite(t) && t >= 0 && t < (double) (max_ticks - epoch))) {
        throw input_error(path, r.line, fmt::format("{}", r.arrival_s),
                          fmt::format("arrival {} s after the first request is past what an Azure timestamp can hold "
                                      "(2262-04-11, {} s after the writer's epoch {}-01-01)",
                                      r.arrival_s, (max_ticks - epoch) / ticks_per_s, k_azure_epoch_year));
    }
    const int64_t ticks = epoch + std::llround(t);
    if (ticks > max_ticks) {
        throw input_error(path, r.line, fmt::format("{}", r.arrival_s), "arrival is past what an Azure timestamp can hold (2262-04-11)");
    }
    const civil_date c = civil_from_days(ticks / ticks_per_day);
    const int64_t in_day = ticks % ticks_per_day, sec = in_day / ticks_per_s;
    return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:07}", c.y, c.m, c.d, sec / 3600, sec / 60 % 60, sec % 60, in_day % ticks_per_s);
}

// Digits of v in decimal.
size_t n_digits(uint64_t v) {
    size_t n = 1;
    while (v >= 10) {
        v /= 10;
        ++n;
    }
    return n;
}

// One Mooncake JSON line. Generated ids (no hash_ids in the source) are next_id, next_id + 1, ...
// The line's length is worked out before it is built: the reader refuses lines over
// k_max_line_bytes, and a prompt of 2^31 tokens at --block-tokens 1 would otherwise build
// gigabytes first.
// `exhausted`: id 2^64-1 is taken (by the trace or a generated id), so no fresh id is left.
std::string mooncake_line(const request & r, const std::string & path, int32_t block_tokens, uint64_t & next_id, bool & exhausted) {
    const double ms = r.arrival_s * 1000.0;
    if (!std::isfinite(ms)) {
        throw input_error(path, r.line, fmt::format("{}", r.arrival_s), "arrival does not fit a Mooncake timestamp (milliseconds overflow)");
    }
    const std::string ts = (ms == std::floor(ms) && ms < 9e15 ? nlohmann::json((int64_t) ms) : nlohmann::json(ms)).dump();
    std::string head = fmt::format("{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [", ts,
                                   r.n_prompt, r.n_gen);
    const bool gen = r.hash_ids.empty();
    const uint64_t n_ids = gen ? ((uint64_t) r.n_prompt + (uint64_t) block_tokens - 1) / (uint64_t) block_tokens : r.hash_ids.size();
    if (gen && n_ids > 0 && (exhausted || next_id > std::numeric_limits<uint64_t>::max() - (n_ids - 1))) {
        throw input_error(path, r.line, std::to_string(r.n_prompt),
                          exhausted ? std::string("no hash_ids, and the largest id 2^64-1 is already used: no fresh ids to generate")
                                    : fmt::format("the {} generated hash_ids would run past the largest id 2^64-1 (next free id {})",
                                                  n_ids, next_id));
    }
    // each id takes at least one digit and a separator
    // 32 / 24 / 24: the n_predict, seed and n_cmpl keys with their widest values
    size_t len = head.size() + 2 + (r.n_predict ? 32 : 0) + (r.seed ? 24 : 0) + (r.n_cmpl != 1 ? 24 : 0);
    if (n_ids <= k_max_line_bytes) {
        for (uint64_t k = 0; k < n_ids && len <= k_max_line_bytes; ++k) len += n_digits(gen ? next_id + k : r.hash_ids[k]) + (k > 0);
    } else {
        len = k_max_line_bytes + 1;
    }
    if (len > k_max_line_bytes) {
        throw input_error(path, r.line, std::to_string(r.n_prompt),
                          fmt::format("input_length {} makes {} hash_ids at --block-tokens {}: the Mooncake line would be over "
                                      "the readers' {} MiB line limit",
                                      r.n_prompt, n_ids, block_tokens, k_max_line_bytes >> 20));
    }
    std::string line = std::move(head);
    line.reserve(len + 1);
    for (uint64_t k = 0; k < n_ids; ++k) {
        if (k > 0) line += ',';
        line += std::to_string(gen ? next_id + k : r.hash_ids[k]);
    }
    line += ']';
    if (r.n_predict) line += fmt::format(", \"n_predict\": {}", *r.n_predict);
    if (r.seed) line += fmt::format(", \"seed\": {}", *r.seed);
    if (r.n_cmpl != 1) line += fmt::format(", \"n_cmpl\": {}", r.n_cmpl);
    line += "}\n";
    if (gen && n_ids > 0) {
        if (next_id + (n_ids - 1) == std::numeric_limits<uint64_t>::max()) exhausted = true;
        next_id += n_ids;   // wraps to 0 only together with `exhausted`
    }
    return line;
}
}  // namespace

civil_date civil_from_days(int64_t z) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const unsigned doe = (unsigned) (z - era * 146097);
    const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const unsigned mp = (5 * doy + 2) / 153;
    const unsigned d = doy - (153 * mp + 2) / 5 + 1;
    const unsigned m = mp < 10 ? mp + 3 : mp - 9;
    return {(int64_t) yoe + era * 400 + (m <= 2), m, d};
}

void write_request_trace(std::ostream & out, const request_trace & t, request_format to, std::ostream & warn, int32_t block_tokens) {
    if (block_tokens <= 0) throw std::invalid_argument("block_tokens must be > 0");
    const bool has_hash = std::any_of(t.requests.begin(), t.requests.end(), [](const request & r) { return !r.hash_ids.empty(); });
    if (has_hash && to != request_format::mooncake) {
        warn << fmt::format("warning: {} has Mooncake hash_ids (shared prompt prefixes); the {} format cannot hold them, they are dropped\n",
                            t.path, request_format_name(to));
    }
    const bool has_predict = std::any_of(t.requests.begin(), t.requests.end(), [](const request & r) { return r.n_predict.has_value(); });
    if (has_predict && to != request_format::mooncake) {
        warn << fmt::format("warning: {} has n_predict (requests' own generation limits); the {} format cannot hold them, they are "
                            "dropped (every request then sends its output length)\n",
                            t.path, request_format_name(to));
    }
    const bool has_seed = std::any_of(t.requests.begin(), t.requests.end(), [](const request & r) { return r.seed.has_value(); });
    if (has_seed && to != request_format::mooncake) {
        warn << fmt::format("warning: {} has seed (requests' sampling seeds); the {} format cannot hold them, they are dropped "
                            "(each request's seed is then its index)\n",
                            t.path, request_format_name(to));
    }
    const bool has_cmpl = std::any_of(t.requests.begin(), t.requests.end(), [](const request & r) { return r.n_cmpl != 1; });
    if (has_cmpl && to != request_format::mooncake) {
        warn << fmt::format("warning: {} has n_cmpl (requests for several completions); the {} format cannot hold them, they are "
                            "dropped (every request then asks for one)\n",
                            t.path, request_format_name(to));
    }
    // Built whole before anything reaches `out`: a request the target format cannot hold is an
    // input_error with no partial output (even when `out` is a device written in place).
    std::string buf;
    switch (to) {
        case request_format::azure:
            buf += "TIMESTAMP,ContextTokens,GeneratedTokens\n";
            for (const auto & r : t.requests) buf += fmt::format("{},{},{}\n", azure_timestamp(r, t.path), r.n_prompt, r.n_gen);
            break;
        case request_format::burstgpt:
            buf += "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
            for (const auto & r : t.requests) {
                const int64_t total = (int64_t) r.n_prompt + r.n_gen;
                if (total > std::numeric_limits<int32_t>::max()) {
                    throw input_error(t.path, r.line, std::to_string(total),
                                      fmt::format("total tokens {} + {} = {} do not fit BurstGPT's 32-bit Total tokens", r.n_prompt,
                                                  r.n_gen, total));
                }
                buf += fmt::format("{},unknown,{},{},{},Conversation log\n", r.arrival_s, r.n_prompt, r.n_gen, total);
            }
            break;
        case request_format::mooncake: {
            // generated ids start after the largest id in the trace (2^64-1 present: none can be generated)
            uint64_t next_id = 0;
            bool full = false;
            for (const auto & r : t.requests) {
                for (uint64_t id : r.hash_ids) {
                    if (id == std::numeric_limits<uint64_t>::max()) full = true;
                    next_id = std::max(next_id, id + 1);
                }
            }
            if (!has_hash) {
                warn << fmt::format("note: {} has no hash_ids; every request gets its own {}-token block ids (no shared prefixes)\n",
                                    escape_controls(t.path), block_tokens);
            }
            for (const auto & r : t.requests) buf += mooncake_line(r, t.path, block_tokens, next_id, full);
            break;
        }
    }
    out << buf;
}

size_t convert_trace(const std::string & in, const std::string & out, const std::string & to, const std::string & from,
                     std::ostream & warn, int32_t block_tokens) {
    if (to == "ops") {
        throw usage_error(fmt::format("a request trace becomes an op trace by simulating the server: run `kvsim replay {} --emit-ops {}` "
                                      "with the -c/-np/-b/-ub/... of the setup to simulate",
                                      in, out));
    }
    request_format target;
    std::optional<request_format> source;
    try {
        target = parse_request_format(to);
        if (from != "auto") source = parse_request_format(from);
    } catch (const std::invalid_argument & e) {
        throw usage_error(e.what());
    }
    if (looks_like_op_trace(read_first_line(in))) {
        throw usage_error(fmt::format("{} is an op trace: it has no requests to convert", in));
    }
    // the rename over the input would replace the trace with its conversion (also through a link or another name)
    std::error_code ec;
    if (std::filesystem::equivalent(in, out, ec) && !ec) {
        throw usage_error(fmt::format("output {} is the input trace {}: give another file name", out, in));
    }
    const request_trace t = read_request_trace(in, source);
    atomic_file f(out);
    write_request_trace(f.out(), t, target, warn, block_tokens);
    f.commit();
    return t.requests.size();
}

}  // namespace kvsim
