#include "trace/request_trace.h"

#include "trace/text_lines.h"
#include "core/errors.h"
#include "util/json_read.h"

#include <nlohmann/json.hpp>
#include <algorithm>
#include <fmt/format.h>
#include <optional>
#include <vector>

#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <type_traits>

namespace kvsim {

namespace {

const std::vector<std::string> k_azure_columns = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"};
const std::vector<std::string> k_burstgpt_columns = {"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"};

std::string joined(const std::vector<std::string> & cols) {
    std::string s;
    for (const auto & c : cols) {
        if (!s.empty()) s += ',';
        s += c;
    }
    return s;
}

// Error values are whole lines at worst; keep messages readable.
std::string excerpt(std::string_view s) {
    return s.size() <= 120 ? std::string(s) : std::string(s.substr(0, 117)) + "...";
}

// Turns absolute times (any unit, any arithmetic type; divided, not multiplied, so that
// integer ticks give the correctly rounded seconds) into seconds after the first request,
// rejecting a time earlier than the previous one: the replay feeds requests in file order.
template <typename T> class arrival_clock {
public:
    explicit arrival_clock(double units_per_second) : units_per_s_(units_per_second) {}

    double relative_s(T t, const std::string & file, long line, const std::string & text) {
        if (!started_) {
            first_ = t;
            started_ = true;
        } else if (t < prev_) { throw input_error(file, line, text, "timestamp earlier than the previous request's (trace must be sorted by arrival)");
        }
        prev_ = t;
        const double rel = span(t) / units_per_s_;
        if (!std::isfinite(rel)) throw input_error(file, line, text, "timestamp too far after the first request's (the span overflows)");
        return rel;
    }

private:
    // t - first_ without overflow: t >= first_, so the span of two int64 times is exact in
    // uint64 (times 292+ years apart overflowed int64); a double span may still be infinite.
    double span(T t) const {
        if constexpr (std::is_integral_v<T>) {
            using U = std::make_unsigned_t<T>;
            return (double) ((U) t - (U) first_);
        } else {
            return t - first_;
        }
    }

    double units_per_s_;
    bool started_ = false;
    T first_{};
    T prev_{};
};

void check_counts(const request & r, const std::string & file, const std::string & prompt_col, const std::string & gen_col) {
    if (r.n_prompt < 0) throw input_error(file, r.line, std::to_string(r.n_prompt), prompt_col + " is negative");
    // llama-server answers an empty prompt without touching the KV cache: nothing to simulate.
    if (r.n_prompt == 0) throw input_error(file, r.line, "0", prompt_col + " is 0 (a request needs at least one prompt token)");
    if (r.n_gen < 0) throw input_error(file, r.line, std::to_string(r.n_gen), gen_col + " is negative");
}

std::vector<std::string> csv_row(std::string_view raw, size_t n_cols, const std::vector<std::string> & cols, const std::string & file, long line) {
    std::vector<std::string> f = split_csv_line(raw, file, line);
    if (f.size() < n_cols) {
        throw input_error(file, line, excerpt(raw), "missing column '" + cols[f.size()] + "': row has " + std::to_string(f.size()) + " of " + std::to_string(n_cols) + " fields");
    }
    if (f.size() > n_cols) throw input_error(file, line, excerpt(raw), "extra field: row has " + std::to_string(f.size()) + " fields, header " + std::to_string(n_cols));
    return f;
}

void check_csv_header(std::string_view raw, const std::vector<std::string> & cols, const std::string & file, long line) {
    const std::vector<std::string> f = split_csv_line(raw, file, line);
    const std::string expect = " (expected header '" + joined(cols) + "')";
    for (size_t i = 0; i < std::max(f.size(), cols.size()); ++i) {
        if (i >= f.size()) throw input_error(file, line, excerpt(raw), "missing column '" + cols[i] + "'" + expect);
        if (i >= cols.size()) throw input_error(file, line, f[i], "extra column" + expect);
        if (f[i] != cols[i]) throw input_error(file, line, f[i], "column " + std::to_string(i + 1) + " should be '" + cols[i] + "'" + expect);
    }
}

void read_azure(text_lines & lines, request_trace & t) {
    const std::string & file = t.path;
    arrival_clock<int64_t> clock(1e9);
    while (const auto raw = lines.next_nonblank()) {
        request r;
        r.line = lines.line();
        const auto f = csv_row(*raw, 3, k_azure_columns, file, r.line);
        const auto ns = parse_azure_timestamp_ns(f[0]);
        if (!ns) throw input_error(file, r.line, f[0], "TIMESTAMP is not a valid 'YYYY-MM-DD HH:MM:SS.fffffff' time");
        r.arrival_s = clock.relative_s(*ns, file, r.line, f[0]);
        r.n_prompt = parse_int32_field(f[1], file, r.line, "ContextTokens");
        r.n_gen = parse_int32_field(f[2], file, r.line, "GeneratedTokens");
        check_counts(r, file, "ContextTokens", "GeneratedTokens");
        t.requests.push_back(std::move(r));
    }
}

void read_burstgpt(text_lines & lines, request_trace & t) {
    const std::string & file = t.path;
    arrival_clock<double> clock(1.0);
    while (const auto raw = lines.next_nonblank()) {
        request r;
        r.line = lines.line();
        const auto f = csv_row(*raw, 6, k_burstgpt_columns, file, r.line);
        const double ts = parse_double_field(f[0], file, r.line, "Timestamp");
        r.arrival_s = clock.relative_s(ts, file, r.line, f[0]);
        r.n_prompt = parse_int32_field(f[2], file, r.line, "Request tokens");
        r.n_gen = parse_int32_field(f[3], file, r.line, "Response tokens");
        const int32_t total = parse_int32_field(f[4], file, r.line, "Total tokens");
        if (total < 0) throw input_error(file, r.line, f[4], "Total tokens is negative");
        check_counts(r, file, "Request tokens", "Response tokens");
        t.requests.push_back(std::move(r));
    }
}

const nlohmann::json & json_key(const nlohmann::json & obj, const char * key, const std::string & file, long line) {
    const auto it = obj.find(key);
    if (it == obj.end()) throw input_error(file, line, key, "missing JSON key");
    return *it;
}

int32_t json_count(const nlohmann::json & obj, const char * key, const std::string & file, long line) {
    const auto & v = json_key(obj, key, file, line);
    if (!v.is_number_integer()) throw input_error(file, line, excerpt(json_text(v)), std::string(key) + " is not an integer");
    if (v.is_number_unsigned() ? v.get<uint64_t>() > (uint64_t) std::numeric_limits<int32_t>::max()
                               : v.get<int64_t>() > std::numeric_limits<int32_t>::max() || v.get<int64_t>() < std::numeric_limits<int32_t>::min()) {
        throw input_error(file, line, json_text(v), std::string(key) + " does not fit in a 32-bit integer");
    }
    return v.get<int32_t>();
}

void read_mooncake(text_lines & lines, request_trace & t, std::string_view first) {
    const std::string & file = t.path;
    arrival_clock<double> clock(1e3);
    for (std::optional<std::string_view> raw = first; raw; raw = lines.next_nonblank()) {
        request r;
        r.line = lines.line();
        nlohmann::json j;
        // nlohmann keeps the last of two equal keys: `"input_length":10,"input_length":5000` would
        // silently read 5000; parse_json_bounded refuses a repeat in one object.
        try {
            j = parse_json_bounded(std::string(*raw));
        } catch (const json_refused & e) {   // a key twice, too deep, 1e400
            throw input_error(file, r.line, e.value.empty() ? excerpt(*raw) : e.value, std::string("bad JSON: ") + e.what());
        } catch (const nlohmann::json::exception & e) {   // parse_error
            throw input_error(file, r.line, excerpt(*raw), std::string("bad JSON: ") + e.what());
        }
        if (!j.is_object()) throw input_error(file, r.line, excerpt(*raw), "line is not a JSON object");
        const auto & ts = json_key(j, "timestamp", file, r.line);
        if (!ts.is_number()) throw input_error(file, r.line, excerpt(json_text(ts)), "timestamp is not a number");
        r.arrival_s = clock.relative_s(ts.get<double>(), file, r.line, json_text(ts));
        r.n_prompt = json_count(j, "input_length", file, r.line);
        r.n_gen = json_count(j, "output_length", file, r.line);
        check_counts(r, file, "input_length", "output_length");
        const auto & ids = json_key(j, "hash_ids", file, r.line);
        if (!ids.is_array()) throw input_error(file, r.line, excerpt(json_text(ids)), "hash_ids is not an array");
        // every block holds at least one prompt token, whatever the block size: more ids than
        // tokens cannot describe the prompt (and gave negative block lengths in the prefix reuse)
        if (ids.size() > (size_t) r.n_prompt) {
            throw input_error(file, r.line, std::to_string(ids.size()),
                              fmt::format("{} hash_ids for input_length {}: more blocks than prompt tokens", ids.size(), r.n_prompt));
        }
        r.hash_ids.reserve(ids.size());
        for (const auto & id : ids) {
            if (!id.is_number_unsigned()) throw input_error(file, r.line, excerpt(json_text(id)), "hash_ids element is not a non-negative integer");
            r.hash_ids.push_back(id.get<uint64_t>());
        }
        if (j.contains("n_predict")) {
            r.n_predict = json_count(j, "n_predict", file, r.line);
            if (*r.n_predict < -1) throw input_error(file, r.line, std::to_string(*r.n_predict), "n_predict must be >= -1 (-1 = no limit)");
        }
        if (j.contains("n_cmpl")) {
            r.n_cmpl = json_count(j, "n_cmpl", file, r.line);
            if (r.n_cmpl < 1) throw input_error(file, r.line, std::to_string(r.n_cmpl), "n_cmpl must be >= 1");
        }
        if (j.contains("seed")) {
            const auto & s = j["seed"];
            // llama-server reads a uint32; 4294967295 is LLAMA_DEFAULT_SEED (a random seed: no replay could follow it)
            const bool ok = s.is_number_unsigned() ? s.get<uint64_t>() < 0xFFFFFFFFull : s.is_number_integer() && s.get<int64_t>() == 0;
            if (!ok) throw input_error(file, r.line, excerpt(json_text(s)), "seed must be an integer in [0, 4294967294]");
            r.seed = s.is_number_unsigned() ? (uint32_t) s.get<uint64_t>() : 0u;
        }
        t.requests.push_back(std::move(r));
    }
}

std::string strip_bom_cr(std::string s) {
    if (s.rfind("\xEF\xBB\xBF", 0) == 0) s.erase(0, 3);
    while (!s.empty() && (s.back() == '\r' || s.back() == '\n')) s.pop_back();
    return s;
}

// Reads exactly `n` decimal digits at s[pos..]; advances pos.
std::optional<int64_t> digits(const std::string & s, size_t & pos, size_t n) {
    if (pos + n > s.size()) return std::nullopt;
    int64_t v = 0;
    for (size_t i = 0; i < n; ++i) {
        const char c = s[pos + i];
        if (c < '0' || c > '9') return std::nullopt;
        v = v * 10 + (c - '0');
    }
    pos += n;
    return v;
}

bool expect_char(const std::string & s, size_t & pos, char c) {
    if (pos >= s.size() || s[pos] != c) return false;
    ++pos;
    return true;
}

bool is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned days_in_month(int64_t y, unsigned m) {
    static constexpr std::array<unsigned, 12> k_days = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : k_days[m - 1];
}

}  // namespace

int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    // Count from 0000-03-01 so the leap day is the last day of a (400-year) era's year.
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;                                       // [0, 399]
    const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;     // [0, 365]
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;               // [0, 146096]
    return era * 146097 + doe - 719468;                                      // 719468 = days 0000-03-01 .. 1970-01-01
}

std::optional<int64_t> parse_azure_timestamp_ns(const std::string & text) {
    size_t p = 0;
    const auto y = digits(text, p, 4);
    if (!y || !expect_char(text, p, '-')) return std::nullopt;
    const auto mo = digits(text, p, 2);
    if (!mo || !expect_char(text, p, '-')) return std::nullopt;
    const auto d = digits(text, p, 2);
    if (!d || !(expect_char(text, p, ' ') || expect_char(text, p, 'T'))) return std::nullopt;
    const auto h = digits(text, p, 2);
    if (!h || !expect_char(text, p, ':')) return std::nullopt;
    const auto mi = digits(text, p, 2);
    if (!mi || !expect_char(text, p, ':')) return std::nullopt;
    const auto s = digits(text, p, 2);
    if (!s) return std::nullopt;
    int64_t frac_ns = 0;
    if (expect_char(text, p, '.')) {
        size_t n = 0;
        for (; p < text.size() && n < 10 && text[p] >= '0' && text[p] <= '9'; ++p, ++n) frac_ns = frac_ns * 10 + (text[p] - '0');
        if (n == 0 || n > 9) return std::nullopt;
        for (; n < 9; ++n) frac_ns *= 10;
    }
    if (p != text.size()) return std::nullopt;
    if (*mo < 1 || *mo > 12 || *d < 1 || *d > days_in_month(*y, (unsigned) *mo) || *h > 23 || *mi > 59 || *s > 59) return std::nullopt;
    const int64_t days = days_from_civil(*y, (unsigned) *mo, (unsigned) *d);
    const int64_t secs = ((days * 24 + *h) * 60 + *mi) * 60 + *s;   // |secs| < 2^39 for 4-digit years
    // Years outside 1677..2262 overflow int64 nanoseconds: reject them, keep the bounds exact.
    const __int128 ns = (__int128) secs * 1'000'000'000 + frac_ns;
    if (ns < std::numeric_limits<int64_t>::min() || ns > std::numeric_limits<int64_t>::max()) return std::nullopt;
    return (int64_t) ns;
}

std::optional<request_format> detect_request_format(const std::string & first_line) {
    const std::string s = strip_bom_cr(first_line);
    const size_t b = s.find_first_not_of(" \t");
    if (b != std::string::npos && s[b] == '{') return request_format::mooncake;
    std::vector<std::string> f;
    try {
        f = split_csv_line(s, "", 1);
    } catch (const input_error &) {
        return std::nullopt;
    }
    if (f == k_azure_columns) return request_format::azure;
    if (f == k_burstgpt_columns) return request_format::burstgpt;
    return std::nullopt;
}

request_format parse_request_format(const std::string & name) {
    for (auto f : {request_format::azure, request_format::mooncake, request_format::burstgpt}) {
        if (name == request_format_name(f)) return f;
    }
    throw std::invalid_argument("unknown request trace format '" + name + "' (expected azure, mooncake or burstgpt)");
}

const char * request_format_name(request_format f) {
    switch (f) {
        case request_format::azure: return "azure";
        case request_format::mooncake: return "mooncake";
        case request_format::burstgpt: return "burstgpt";
    }
    return "?";
}

request_trace read_request_trace(const std::string & path, std::optional<request_format> fmt) {
    request_trace t;
    t.path = path;
    text_lines lines(path);
    const auto first = lines.next_nonblank();
    if (!first) throw input_error(path, 0, "", "empty file");
    const long first_line = lines.line();
    if (!fmt) fmt = detect_request_format(std::string(*first));
    if (!fmt) {
        throw input_error(path, first_line, excerpt(*first),
                          "unknown request trace format: expected the header '" + joined(k_azure_columns) + "' (azure), '" +
                              joined(k_burstgpt_columns) + "' (burstgpt) or a JSON object per line (mooncake)");
    }
    t.format = *fmt;
    switch (*fmt) {
        case request_format::azure:
            check_csv_header(*first, k_azure_columns, path, first_line);
            read_azure(lines, t);
            break;
        case request_format::burstgpt:
            check_csv_header(*first, k_burstgpt_columns, path, first_line);
            read_burstgpt(lines, t);
            break;
        case request_format::mooncake: read_mooncake(lines, t, *first); break;
    }
    if (t.requests.empty()) throw input_error(path, first_line, "", "header only, no requests");
    return t;
}

void scale_arrival_rate(request_trace & t, double rate_scale) {
    if (!std::isfinite(rate_scale) || rate_scale <= 0) {
        throw usage_error(fmt::format("rate_scale must be a finite number > 0 (2 = twice the trace's request rate), got {}", rate_scale));
    }
    // A tiny scale can overflow a late arrival to inf, and every latency after it to nan: refuse
    // it whole, before any arrival changes.
    for (size_t i = 0; i < t.requests.size(); ++i) {
        const double a = t.requests[i].arrival_s;
        if (!std::isfinite(a / rate_scale)) {
            throw usage_error(fmt::format("rate_scale {}: request {}'s arrival at {} s would move past what a double holds; "
                                          "use a larger rate_scale",
                                          rate_scale, i + 1, a));
        }
    }
    for (request & r : t.requests) r.arrival_s /= rate_scale;
}

}  // namespace kvsim
