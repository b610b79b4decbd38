// Inputs the fuzzers (tests/fuzz, docs/reliability.md) found to crash, hit undefined behaviour
// or break a reader's contract, kept as tests once fixed. Each case names the harness that found
// it and what used to happen.
#include "trace/op_trace.h"
#include "trace/request_trace.h"
#include "util/errors.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

using namespace kvsim;

namespace {

// Writes `text` to a scratch file under the build directory (the request readers take a path).
std::string scratch(const std::string & name, const std::string & text) {
    const auto dir = std::filesystem::path(KVSIM_BINARY_DIR) / "test_regressions_tmp";
    std::filesystem::create_directories(dir);
    const auto path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

// The input_error a request trace raises, or a failed check when it raises none.
input_error request_error(const std::string & name, const std::string & text) {
    try {
        read_request_trace(scratch(name, text));
    } catch (const input_error & e) {
        return e;
    }
    FAIL("no input_error for " << name);
    return input_error("", 0, "", "");
}

const std::string k_azure_header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
const std::string k_burstgpt_header = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";

}  // namespace

// fuzz_azure: a 4-digit year outside 1677..2262 overflowed int64 nanoseconds in
// parse_azure_timestamp_ns (signed overflow, UBSan: request_trace.cpp, "9999-01-01 00:00:00").
TEST_CASE("regression: Azure timestamps outside the int64 nanosecond range are rejected, the bounds are exact") {
    CHECK(parse_azure_timestamp_ns("2262-04-11 23:47:16.854775807") == std::numeric_limits<int64_t>::max());
    CHECK_FALSE(parse_azure_timestamp_ns("2262-04-11 23:47:16.854775808").has_value());
    CHECK(parse_azure_timestamp_ns("1677-09-21 00:12:43.145224192") == std::numeric_limits<int64_t>::min());
    CHECK_FALSE(parse_azure_timestamp_ns("1677-09-21 00:12:43.145224191").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("9999-12-31 23:59:59.999999999").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("0000-01-01 00:00:00").has_value());

    const input_error e = request_error("azure_year.csv", k_azure_header + "2023-11-16 18:15:46,10,1\n9999-01-01 00:00:00,10,1\n");
    CHECK(e.line() == 3);
    CHECK(e.value() == "9999-01-01 00:00:00");
}

// fuzz_azure: two valid timestamps more than 292 years apart overflowed `t - first` in int64
// nanoseconds (arrival_clock::relative_s). The span is exact in uint64 and is now accepted.
TEST_CASE("regression: an Azure trace spanning centuries gives the exact arrival") {
    const request_trace t = read_request_trace(scratch("azure_span.csv", k_azure_header + "1700-01-01 00:00:00,10,1\n2200-01-01 00:00:00,10,1\n"));
    REQUIRE(t.requests.size() == 2);
    CHECK(t.requests[0].arrival_s == 0.0);
    CHECK(t.requests[1].arrival_s == (double) (days_from_civil(2200, 1, 1) - days_from_civil(1700, 1, 1)) * 86400.0);
}

// fuzz_burstgpt / fuzz_mooncake: finite timestamps whose difference is not finite gave an
// arrival of +inf (request_trace promises finite arrivals; the scheduler's clock broke).
TEST_CASE("regression: a timestamp span that overflows a double is an input error") {
    const input_error b = request_error("burstgpt_span.csv", k_burstgpt_header + "-1e308,GPT-4,5,5,10,API log\n1e308,GPT-4,5,5,10,API log\n");
    CHECK(b.line() == 3);
    CHECK(b.value() == "1e308");
    const input_error m = request_error(
        "mooncake_span.jsonl",
        "{\"timestamp\": -1.7e308, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}\n"
        "{\"timestamp\": 1.7e308, \"input_length\": 5, \"output_length\": 1, \"hash_ids\": []}\n");
    CHECK(m.line() == 2);
}

TEST_CASE("a NUL byte inside a trace line is refused with its line, not silently cut") {
    const std::string path = (std::filesystem::temp_directory_path() / "kvsim_nul.csv").string();
    {
        std::ofstream f(path, std::ios::binary);
        f << "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n1,decode,0,8,,,,\n1,decode,0,8,,,,";
        f.put('\0');
        f << "junk\n";
    }
    try {
        (void) read_op_trace(path);
        FAIL("no error for a NUL byte");
    } catch (const input_error & e) {
        CHECK(e.line() == 3);
        CHECK(std::string(e.what()).find("NUL") != std::string::npos);
    }
    std::filesystem::remove(path);
}
