// Request trace readers (lib/trace/request_trace.h): Azure 2023, Mooncake FAST'25, BurstGPT.
#include "trace/request_trace.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include "test_skip.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>

using namespace kvsim;

namespace {

std::string src(const std::string & rel) { return std::string(KVSIM_SOURCE_DIR) + "/" + rel; }

// Writes `text` to a scratch file under the build directory and returns its path.
std::string scratch(const std::string & name, const std::string & text) {
    const auto dir = std::filesystem::path(KVSIM_BINARY_DIR) / "test_trace_requests_tmp";
    std::filesystem::create_directories(dir);
    const auto path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

int64_t sum_prompt(const request_trace & t) {
    return std::accumulate(t.requests.begin(), t.requests.end(), int64_t{0}, [](int64_t a, const request & r) { return a + r.n_prompt; });
}
int64_t sum_gen(const request_trace & t) {
    return std::accumulate(t.requests.begin(), t.requests.end(), int64_t{0}, [](int64_t a, const request & r) { return a + r.n_gen; });
}

}  // namespace

TEST_CASE("civil date and Azure timestamps") {
    CHECK(days_from_civil(1970, 1, 1) == 0);
    CHECK(days_from_civil(1969, 12, 31) == -1);
    CHECK(days_from_civil(2000, 3, 1) == 11017);
    CHECK(days_from_civil(2024, 2, 29) == 19782);
    CHECK(days_from_civil(1600, 1, 1) == -135140);
    CHECK(days_from_civil(2400, 12, 31) == 157419);
    CHECK(days_from_civil(2023, 11, 16) == 19677);

    CHECK(parse_azure_timestamp_ns("1970-01-01 00:00:00") == int64_t{0});
    CHECK(parse_azure_timestamp_ns("2023-11-30 23:59:59.9999999") == int64_t{1701388799999999900});
    CHECK(parse_azure_timestamp_ns("2023-12-01 00:00:00.0000000") == int64_t{1701388800000000000});
    CHECK(parse_azure_timestamp_ns("2023-12-01T00:00:00.5") == int64_t{1701388800500000000});
    CHECK(parse_azure_timestamp_ns("2023-12-01 00:00:00.123456789") == int64_t{1701388800123456789});
    CHECK(parse_azure_timestamp_ns("2024-02-29 00:00:00").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-02-29 00:00:00").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-13-01 00:00:00").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-11-16 24:00:00").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-11-16 18:15:46.").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-11-16 18:15:46.1234567890").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-11-16 18:15:46 ").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("2023-11-16").has_value());
    CHECK_FALSE(parse_azure_timestamp_ns("").has_value());
}

TEST_CASE("format names and detection") {
    CHECK(parse_request_format("azure") == request_format::azure);
    CHECK(parse_request_format("mooncake") == request_format::mooncake);
    CHECK(parse_request_format("burstgpt") == request_format::burstgpt);
    CHECK_THROWS_AS(parse_request_format("splitwise"), std::invalid_argument);
    CHECK(std::string(request_format_name(request_format::burstgpt)) == "burstgpt");
    CHECK(detect_request_format("TIMESTAMP,ContextTokens,GeneratedTokens") == request_format::azure);
    CHECK(detect_request_format("\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\r") == request_format::azure);
    CHECK(detect_request_format("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type") == request_format::burstgpt);
    CHECK(detect_request_format("{\"timestamp\": 0}") == request_format::mooncake);
    CHECK_FALSE(detect_request_format("batch,op,seq,n_tokens,p0,p1,delta,seq_dst").has_value());
    CHECK_FALSE(detect_request_format("TIMESTAMP,ContextTokens").has_value());
}

TEST_CASE("Azure sample: exact values, day rollover, zero GeneratedTokens") {
    const request_trace t = read_request_trace(src("traces/requests/azure_sample.csv"));
    CHECK(t.format == request_format::azure);
    REQUIRE(t.requests.size() == 12);
    const double arrival[] = {0.0, 0.1000001, 0.6, 1.0999999, 1.1, 1.1, 2.35, 3.85, 4.2234567, 61.1, 3601.1, 86401.6};
    const int32_t prompt[] = {374, 396, 879, 91, 1120, 1030, 197, 4096, 2, 14050, 512, 1};
    const int32_t gen[] = {44, 109, 55, 16, 466, 434, 183, 0, 7, 1000, 128, 1};
    for (size_t i = 0; i < 12; ++i) {
        CAPTURE(i);
        CHECK(t.requests[i].line == (long) i + 2);
        CHECK(t.requests[i].arrival_s == arrival[i]);  // exact: integer ns / 1e9, correctly rounded
        CHECK(t.requests[i].n_prompt == prompt[i]);
        CHECK(t.requests[i].n_gen == gen[i]);
        CHECK(t.requests[i].hash_ids.empty());
    }
}

TEST_CASE("Azure 2023 conversation trace (shipped, CRLF)") {
    const request_trace t = read_request_trace(src("traces/azure/AzureLLMInferenceTrace_conv_2023.csv"));
    CHECK(t.format == request_format::azure);
    REQUIRE(t.requests.size() == 19366);
    CHECK(sum_prompt(t) == 22361870);
    CHECK(sum_gen(t) == 4088665);
    const request & first = t.requests.front();
    CHECK(first.line == 2);
    CHECK(first.arrival_s == 0.0);
    CHECK(first.n_prompt == 374);
    CHECK(first.n_gen == 44);
    const request & second = t.requests[1];
    CHECK(second.arrival_s == 4.314579);  // 18:15:50.9951690 - 18:15:46.6805900
    const request & last = t.requests.back();
    CHECK(last.line == 19367);
    CHECK(last.arrival_s == 3501.721937);  // 19:14:08.4025270 - 18:15:46.6805900
    CHECK(last.n_prompt == 197);
    CHECK(last.n_gen == 183);
}

TEST_CASE("Mooncake sample: exact values and shared prefixes") {
    const request_trace t = read_request_trace(src("traces/requests/mooncake_sample.jsonl"));
    CHECK(t.format == request_format::mooncake);
    REQUIRE(t.requests.size() == 8);
    CHECK(t.requests[0].hash_ids == std::vector<uint64_t>{0, 1, 2});
    CHECK(t.requests[1].hash_ids == std::vector<uint64_t>{0, 1, 3});
    CHECK(t.requests[2].arrival_s == 0.25);
    CHECK(t.requests[2].n_prompt == 600);
    CHECK(t.requests[2].n_gen == 300);
    CHECK(t.requests[5].hash_ids == std::vector<uint64_t>{0, 1, 2, 5, 7, 8});
    CHECK(t.requests[6].arrival_s == 4.001);
    CHECK(t.requests[7].line == 8);
    CHECK(t.requests[7].arrival_s == 60.0);
    CHECK(sum_prompt(t) == 9786);
    CHECK(sum_gen(t) == 1014);
}

TEST_CASE("Mooncake n_predict: the limit a request sends, absent when it sends its output length") {
    const std::string path = scratch("predict.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [0]}\n"
                                                      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 30, \"hash_ids\": [1], \"n_predict\": -1}\n"
                                                      "{\"timestamp\": 2, \"input_length\": 10, \"output_length\": 30, \"hash_ids\": [2], \"n_predict\": 0}\n");
    const request_trace t = read_request_trace(path);
    REQUIRE(t.requests.size() == 3);
    CHECK(!t.requests[0].n_predict);
    CHECK(t.requests[1].n_predict == -1);
    CHECK(t.requests[2].n_predict == 0);
    for (const char * bad : {"-2", "1.5", "\"4\"", "4294967296"}) {
        CAPTURE(bad);
        const std::string p = scratch("predict_bad.jsonl", std::string("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, "
                                                                       "\"hash_ids\": [0], \"n_predict\": ") + bad + "}\n");
        CHECK_THROWS_AS(read_request_trace(p), input_error);
    }
}

TEST_CASE("Mooncake seed: the request's sampling seed, a uint32 below LLAMA_DEFAULT_SEED") {
    const std::string path = scratch("seed.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [0]}\n"
                                                   "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [1], \"seed\": 0}\n"
                                                   "{\"timestamp\": 2, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [2], \"seed\": 4294967294}\n");
    const request_trace t = read_request_trace(path);
    REQUIRE(t.requests.size() == 3);
    CHECK(!t.requests[0].seed);
    CHECK(t.requests[1].seed == 0u);
    CHECK(t.requests[2].seed == 4294967294u);
    for (const char * bad : {"-1", "1.5", "\"4\"", "4294967295", "4294967296", "null"}) {
        CAPTURE(bad);
        const std::string p = scratch("seed_bad.jsonl", std::string("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, "
                                                                    "\"hash_ids\": [0], \"seed\": ") + bad + "}\n");
        CHECK_THROWS_AS(read_request_trace(p), input_error);
    }
}

TEST_CASE("rate scale: arrivals divided by the scale, order and lengths kept") {
    const std::string path = scratch("rate.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3, \"hash_ids\": [0]}\n"
                                                   "{\"timestamp\": 1000, \"input_length\": 20, \"output_length\": 4, \"hash_ids\": [1]}\n"
                                                   "{\"timestamp\": 1000, \"input_length\": 30, \"output_length\": 5, \"hash_ids\": [2]}\n"
                                                   "{\"timestamp\": 5000, \"input_length\": 40, \"output_length\": 6, \"hash_ids\": [3]}\n");
    request_trace fast = read_request_trace(path);
    scale_arrival_rate(fast, 2.0);
    REQUIRE(fast.requests.size() == 4);
    CHECK(fast.requests[0].arrival_s == 0.0);
    CHECK(fast.requests[1].arrival_s == 0.5);
    CHECK(fast.requests[2].arrival_s == 0.5);
    CHECK(fast.requests[3].arrival_s == 2.5);
    CHECK(fast.requests[3].n_prompt == 40);
    CHECK(fast.requests[3].n_gen == 6);
    request_trace slow = read_request_trace(path);
    scale_arrival_rate(slow, 0.25);
    CHECK(slow.requests[1].arrival_s == 4.0);
    CHECK(slow.requests[3].arrival_s == 20.0);
    for (double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) {
        CHECK_THROWS_AS(scale_arrival_rate(slow, bad), usage_error);
    }
    CHECK(slow.requests[3].arrival_s == 20.0);   // a refused scale changes nothing
    // 20 s / 1e-308 is past DBL_MAX (about 1.8e308): refused, where it gave inf arrivals and nan latencies
    CHECK_THROWS_AS(scale_arrival_rate(slow, 1e-308), usage_error);
    CHECK(slow.requests[3].arrival_s == 20.0);
    scale_arrival_rate(slow, 1e-300);   // 4e300 s still fits a double
    CHECK(slow.requests[3].arrival_s == 20.0 / 1e-300);
}

TEST_CASE("Mooncake conversation trace (../shared, when present)") {
    const std::string path = "../shared/data/traces/mooncake_conversation_trace.jsonl";
    if (!std::filesystem::exists(path)) {
        KVSIM_SKIP_CASE(path + " not found");
    }
    const request_trace t = read_request_trace(path);
    CHECK(t.format == request_format::mooncake);
    REQUIRE(t.requests.size() == 12031);
    CHECK(sum_prompt(t) == 144793823);
    CHECK(sum_gen(t) == 4122048);
    size_t n_ids = 0;
    for (const auto & r : t.requests) n_ids += r.hash_ids.size();
    CHECK(n_ids == 288500);
    CHECK(t.requests.front().n_prompt == 6758);
    CHECK(t.requests.front().hash_ids.size() == 14);
    CHECK(t.requests.back().line == 12031);
    CHECK(t.requests.back().arrival_s == 3536.999);
    CHECK(t.requests.back().n_prompt == 20774);
    CHECK(t.requests.back().hash_ids.back() == 182789);
}

TEST_CASE("BurstGPT synthetic sample: exact values") {
    const request_trace t = read_request_trace(src("traces/requests/burstgpt_sample.csv"));
    CHECK(t.format == request_format::burstgpt);
    REQUIRE(t.requests.size() == 10);
    CHECK(t.requests[0].arrival_s == 0.0);
    CHECK(t.requests[0].n_prompt == 472);
    CHECK(t.requests[0].n_gen == 18);
    CHECK(t.requests[2].n_gen == 0);
    CHECK(t.requests[5].arrival_s == 209.5);
    CHECK(t.requests[9].arrival_s == 995.0);
    CHECK(t.requests[9].line == 11);
    CHECK(sum_prompt(t) == 10432);
    CHECK(sum_gen(t) == 2182);
}

TEST_CASE("CRLF and UTF-8 BOM are stripped") {
    const request_trace a = read_request_trace(src("tests/data/trace/azure_crlf_bom.csv"));
    REQUIRE(a.requests.size() == 2);
    CHECK(a.requests[1].arrival_s == 4.314579);
    CHECK(a.requests[1].n_gen == 109);
    const request_trace m = read_request_trace(src("tests/data/trace/mooncake_crlf_bom.jsonl"));
    REQUIRE(m.requests.size() == 2);
    CHECK(m.requests[0].hash_ids == std::vector<uint64_t>{0, 1});
    CHECK(m.requests[1].arrival_s == 0.01);
    CHECK(m.requests[1].n_gen == 0);
    const request_trace b = read_request_trace(src("tests/data/trace/burstgpt_crlf_bom.csv"));
    REQUIRE(b.requests.size() == 1);
    CHECK(b.requests[0].n_prompt == 10);
    CHECK(b.requests[0].n_gen == 2);
}

TEST_CASE("an explicit format is checked, not trusted") {
    CHECK_THROWS_AS(read_request_trace(src("traces/requests/azure_sample.csv"), request_format::mooncake), input_error);
    CHECK_THROWS_AS(read_request_trace(src("traces/requests/mooncake_sample.jsonl"), request_format::burstgpt), input_error);
    CHECK(read_request_trace(src("traces/requests/burstgpt_sample.csv"), request_format::burstgpt).requests.size() == 10);
}

TEST_CASE("bad request traces name file, line and value") {
    struct bad_case {
        std::string name, text;
        long line;
        std::string value, why;
    };
    const std::string az = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    const std::string ok_az = "2023-11-16 18:15:46.6805900,374,44\n";
    const std::string bg = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
    const std::string ok_mc = "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n";
    const bad_case cases[] = {
        {"empty.csv", "", 0, "", "empty file"},
        {"blank.csv", "\n\r\n", 0, "", "empty file"},
        {"header_only.csv", az, 1, "", "header only"},
        {"header_only_bg.csv", bg, 1, "", "header only"},
        {"unknown.csv", "time,prompt,gen\n1,2,3\n", 1, "time,prompt,gen", "unknown request trace format"},
        {"az_missing.csv", az + ok_az + "2023-11-16 18:15:47.0000000,374\n", 3, "2023-11-16 18:15:47.0000000,374", "missing column 'GeneratedTokens'"},
        {"az_extra.csv", az + ok_az + "2023-11-16 18:15:47.0000000,374,1,9\n", 3, "2023-11-16 18:15:47.0000000,374,1,9", "extra field"},
        {"az_nan.csv", az + ok_az + "2023-11-16 18:15:47.0000000,abc,1\n", 3, "abc", "not an integer"},
        {"az_neg.csv", az + ok_az + "2023-11-16 18:15:47.0000000,374,-1\n", 3, "-1", "GeneratedTokens is negative"},
        {"az_ovf.csv", az + "2023-11-16 18:15:47.0000000,2147483648,1\n", 2, "2147483648", "32-bit"},
        {"az_zero.csv", az + "2023-11-16 18:15:47.0000000,0,1\n", 2, "0", "ContextTokens is 0"},
        {"az_time.csv", az + ok_az + "2023-11-31 18:15:47.0000000,374,1\n", 3, "2023-11-31 18:15:47.0000000", "TIMESTAMP"},
        {"az_unsorted.csv", az + ok_az + "2023-11-16 18:15:46.6805899,1,1\n", 3, "2023-11-16 18:15:46.6805899", "earlier than the previous"},
        {"bg_nan.csv", bg + "1,ChatGPT,1,x,2,API log\n", 2, "x", "not an integer"},
        {"bg_time.csv", bg + "1e,ChatGPT,1,1,2,API log\n", 2, "1e", "not a finite number"},
        {"bg_total.csv", bg + "1,ChatGPT,1,1,-2,API log\n", 2, "-2", "Total tokens is negative"},
        {"bg_missing.csv", bg + "1,ChatGPT,1,1,2\n", 2, "1,ChatGPT,1,1,2", "missing column 'Log Type'"},
        {"bg_unsorted.csv", bg + "5,ChatGPT,1,1,2,API log\n4.5,ChatGPT,1,1,2,API log\n", 3, "4.5", "earlier than the previous"},
        {"mc_json.jsonl", ok_mc + "{\"timestamp\": 6, \"input_length\": 10,\n", 2, "{\"timestamp\": 6, \"input_length\": 10,", "bad JSON"},
        {"mc_key.jsonl", ok_mc + "{\"timestamp\": 6, \"output_length\": 1, \"hash_ids\": []}\n", 2, "input_length", "missing JSON key"},
        {"mc_hash.jsonl", "{\"timestamp\": 6, \"input_length\": 10, \"output_length\": 1}\n", 1, "hash_ids", "missing JSON key"},
        {"mc_type.jsonl", "{\"timestamp\": 6, \"input_length\": \"10\", \"output_length\": 1, \"hash_ids\": []}\n", 1, "\"10\"", "not an integer"},
        {"mc_neg.jsonl", "{\"timestamp\": 6, \"input_length\": 10, \"output_length\": -1, \"hash_ids\": []}\n", 1, "-1", "output_length is negative"},
        {"mc_ovf.jsonl", "{\"timestamp\": 6, \"input_length\": 4294967296, \"output_length\": 1, \"hash_ids\": []}\n", 1, "4294967296", "32-bit"},
        {"mc_ids.jsonl", "{\"timestamp\": 6, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1, -2]}\n", 1, "-2", "hash_ids element"},
        {"mc_unsorted.jsonl", ok_mc + "{\"timestamp\": 4, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [0]}\n", 2, "4", "earlier than the previous"},
        {"mc_array.jsonl", ok_mc + "[1, 2]\n", 2, "[1, 2]", "not a JSON object"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.name);
        const std::string path = scratch(c.name, c.text);
        try {
            read_request_trace(path);
            FAIL("no input_error");
        } catch (const input_error & e) {
            CHECK(e.file() == path);
            CHECK(e.line() == c.line);
            CHECK(e.value() == c.value);
            CHECK(std::string(e.what()).find(c.why) != std::string::npos);
        }
    }
}

TEST_CASE("missing request trace file") {
    try {
        read_request_trace("no/such/trace.csv");
        FAIL("no input_error");
    } catch (const input_error & e) {
        CHECK(e.file() == "no/such/trace.csv");
        CHECK(e.line() == 0);
    }
}
