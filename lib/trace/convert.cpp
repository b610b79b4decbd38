#include "trace/convert.h"

#include "trace/op_trace.h"
#include "trace/text_lines.h"
#include "util/atomic_file.h"
#include "util/errors.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace kvsim {

namespace {
// The Azure writer's epoch; any date works since arrivals are relative to the first request.
constexpr int64_t k_azure_epoch_year = 2023;

std::string azure_timestamp(double arrival_s) {
    constexpr int64_t ticks_per_s = 10'000'000, ticks_per_day = 86'400 * ticks_per_s;   // 100 ns ticks
    const int64_t ticks = days_from_civil(k_azure_epoch_year, 1, 1) * ticks_per_day + std::llround(arrival_s * 1e7);
    const civil_date c = civil_from_days(ticks / ticks_per_day);
    const int64_t in_day = ticks % ticks_per_day, sec = in_day / ticks_per_s;
    return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:07}", c.y, c.m, c.d, sec / 3600, sec / 60 % 60, sec % 60, in_day % ticks_per_s);
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
    switch (to) {
        case request_format::azure:
            out << "TIMESTAMP,ContextTokens,GeneratedTokens\n";
            for (const auto & r : t.requests) out << fmt::format("{},{},{}\n", azure_timestamp(r.arrival_s), r.n_prompt, r.n_gen);
            break;
        case request_format::burstgpt:
            out << "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
            for (const auto & r : t.requests) {
                out << fmt::format("{},unknown,{},{},{},Conversation log\n", r.arrival_s, r.n_prompt, r.n_gen, (int64_t) r.n_prompt + r.n_gen);
            }
            break;
        case request_format::mooncake: {
            uint64_t next_id = 0;
            for (const auto & r : t.requests) {
                for (uint64_t id : r.hash_ids) next_id = std::max(next_id, id + 1);
            }
            if (!has_hash) {
                warn << fmt::format("note: {} has no hash_ids; every request gets its own {}-token block ids (no shared prefixes)\n",
                                    t.path, block_tokens);
            }
            for (const auto & r : t.requests) {
                nlohmann::json ids = r.hash_ids;
                if (r.hash_ids.empty()) {
                    for (int32_t b = 0; b < (r.n_prompt + block_tokens - 1) / block_tokens; ++b) ids.push_back(next_id++);
                }
                const double ms = r.arrival_s * 1000.0;
                out << "{\"timestamp\": " << (ms == std::floor(ms) && ms < 9e15 ? nlohmann::json((int64_t) ms) : nlohmann::json(ms)).dump()
                    << ", \"input_length\": " << r.n_prompt << ", \"output_length\": " << r.n_gen << ", \"hash_ids\": " << ids.dump() << "}\n";
            }
            break;
        }
    }
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
    const request_trace t = read_request_trace(in, source);
    atomic_file f(out);
    write_request_trace(f.out(), t, target, warn, block_tokens);
    f.commit();
    return t.requests.size();
}

}  // namespace kvsim
