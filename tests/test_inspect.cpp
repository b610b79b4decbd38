// kvsim inspect (trace statistics) and kvsim convert (request format conversion).
#include "trace/convert.h"
#include "trace/inspect.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include "test_skip.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <sys/wait.h>

using namespace kvsim;
using json = nlohmann::json;

namespace {
const std::string src = KVSIM_SOURCE_DIR;
const std::string bin = KVSIM_BINARY_DIR;

request_trace synthetic() {
    request_trace t;
    t.path = "synthetic";
    const std::vector<std::tuple<double, int32_t, int32_t>> rows = {{0.0, 1, 0}, {0.2, 2, 5}, {0.9, 3, 1}, {1.5, 4, 7}, {10.0, 100, 64}};
    long line = 2;
    for (auto [a, p, g] : rows) {
        request r;
        r.line = line++;
        r.arrival_s = a;
        r.n_prompt = p;
        r.n_gen = g;
        t.requests.push_back(r);
    }
    return t;
}

std::string tmp(const std::string & name) { return (std::filesystem::temp_directory_path() / ("kvsim_test_inspect_" + name)).string(); }

// Runs cmd with its output discarded unless cmd redirects stdout itself.
int sh(const std::string & cmd) {
    const bool redirects = cmd.find('>') != std::string::npos;
    const int rc = std::system((cmd + (redirects ? " 2>/dev/null" : " >/dev/null 2>&1")).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
}  // namespace

TEST_CASE("inspect_requests: counts, exact percentiles, arrival rates, log2 length histogram") {
    const json j = inspect_requests(synthetic());
    CHECK(j["requests"] == 5);
    CHECK(j["duration_s"] == 10.0);
    CHECK(j["arrival_rate"]["mean_per_s"] == 0.5);
    CHECK(j["arrival_rate"]["peak_per_s"] == 3);
    const json & p = j["prompt_tokens"];
    CHECK(p["total"] == 110.0);
    CHECK(p["mean"] == 22.0);
    CHECK(p["min"] == 1.0);
    CHECK(p["p50"] == 3.0);
    CHECK(p["p90"] == 100.0);   // index round(0.9 * 4) = 4
    CHECK(p["max"] == 100.0);
    CHECK(j["gen_tokens"]["total"] == 77.0);
    const json & h = j["length_histogram"];
    REQUIRE(h.size() == 8);
    CHECK(h[0] == json({{"lo", 0}, {"hi", 0}, {"prompt", 0}, {"gen", 1}}));
    CHECK(h[1] == json({{"lo", 1}, {"hi", 1}, {"prompt", 1}, {"gen", 1}}));
    CHECK(h[2] == json({{"lo", 2}, {"hi", 3}, {"prompt", 2}, {"gen", 0}}));
    CHECK(h[3] == json({{"lo", 4}, {"hi", 7}, {"prompt", 1}, {"gen", 2}}));
    CHECK(h[7] == json({{"lo", 64}, {"hi", 127}, {"prompt", 1}, {"gen", 1}}));
    CHECK(!j.contains("prefix_sharing"));
}

TEST_CASE("inspect_trace: Mooncake prefix sharing from hash_ids") {
    const json j = inspect_trace(src + "/traces/requests/mooncake_sample.jsonl");
    CHECK(j["format"] == "mooncake");
    CHECK(j["requests"] == 8);
    CHECK(j["duration_s"] == 60.0);
    CHECK(j["arrival_rate"]["peak_per_s"] == 3);
    CHECK(j["prompt_tokens"]["total"] == 9786.0);
    const json & s = j["prefix_sharing"];
    CHECK(s["blocks"] == 23);
    CHECK(s["blocks_seen_before_fraction"].get<double>() == doctest::Approx(12.0 / 23.0));
    CHECK(s["requests_with_shared_first_block"] == 5);
    CHECK(s["longest_shared_prefix_blocks"] == 4);
    CHECK(s["mean_shared_prefix_blocks"] == 1.5);
    CHECK(s["shareable_prompt_tokens"] == 6144);
    std::ostringstream os;
    print_inspect(os, "m.jsonl", j);
    CHECK(os.str().find("longest shared prefix") != std::string::npos);
}

TEST_CASE("inspect_ops: op mix, tokens, sequences") {
    std::istringstream in("batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n"
                          "1,decode,0;1,8,,,,\n2,decode,0,4,,,,\n2,decode,1,2,20,,,\n,rm,0,,4,10,,\n,add,0,,10,-1,-6,\n"
                          ",cp,0,,-1,-1,,3\n,div,1,,,,2,\n,rm,-1,,16,,,\n,clear,,,,,,\n");
    const json j = inspect_ops(parse_op_trace(in, "t.csv"));
    CHECK(j["groups"] == 8);
    CHECK(j["decode_calls"] == 2);
    CHECK(j["decode_rows"] == 3);
    CHECK(j["tokens"] == 14);
    CHECK(j["max_tokens_per_decode"] == 8);
    CHECK(j["shared_tokens"] == 8);
    CHECK(j["ops"] == json({{"decode", 2}, {"rm", 2}, {"cp", 1}, {"keep", 0}, {"add", 1}, {"div", 1}, {"clear", 1}}));
    CHECK(j["sequences"]["ids"] == json({0, 1, 3}));
    CHECK(j["sequences"]["max_id"] == 3);
}

TEST_CASE("civil_from_days inverts days_from_civil across leap years and eras") {
    for (int64_t d : {-719468LL, -1LL, 0LL, 59LL, 365LL, 11016LL, 19358LL, 19722LL, 2932896LL}) {
        const civil_date c = civil_from_days(d);
        CHECK(days_from_civil(c.y, c.m, c.d) == d);
    }
    const civil_date leap = civil_from_days(days_from_civil(2024, 2, 29));
    CHECK((leap.y == 2024 && leap.m == 2 && leap.d == 29));
}

TEST_CASE("convert: every request format to every other reads back the same requests") {
    for (const char * f : {"azure_sample.csv", "mooncake_sample.jsonl", "burstgpt_sample.csv"}) {
        const request_trace t = read_request_trace(src + "/traces/requests/" + f);
        for (request_format to : {request_format::azure, request_format::mooncake, request_format::burstgpt}) {
            CAPTURE(f);
            CAPTURE(request_format_name(to));
            const std::string out = tmp(std::string("rt_") + request_format_name(to));
            {
                std::ofstream o(out);
                std::ostringstream warn;
                write_request_trace(o, t, to, warn);
                CHECK((warn.str().find("dropped") != std::string::npos) == (t.format == request_format::mooncake && to != request_format::mooncake));
            }
            const request_trace back = read_request_trace(out);
            CHECK(back.format == to);
            REQUIRE(back.requests.size() == t.requests.size());
            for (size_t i = 0; i < t.requests.size(); ++i) {
                CHECK(back.requests[i].n_prompt == t.requests[i].n_prompt);
                CHECK(back.requests[i].n_gen == t.requests[i].n_gen);
                CHECK(back.requests[i].arrival_s == doctest::Approx(t.requests[i].arrival_s).epsilon(1e-12));
                if (to == request_format::mooncake && t.format == request_format::mooncake) CHECK(back.requests[i].hash_ids == t.requests[i].hash_ids);
                if (to == request_format::mooncake && t.format != request_format::mooncake) {
                    CHECK(back.requests[i].hash_ids.size() == (size_t) (t.requests[i].n_prompt + 511) / 512);
                }
            }
            std::filesystem::remove(out);
        }
    }
}

TEST_CASE("convert: a Mooncake line's n_predict, seed and n_cmpl survive Mooncake, and are said to be dropped elsewhere") {
    const std::string in = tmp("fields.jsonl");
    {
        std::ofstream o(in);
        o << "{\"timestamp\": 0, \"input_length\": 48, \"output_length\": 24, \"hash_ids\": [0], \"n_predict\": 5, \"seed\": 7, \"n_cmpl\": 2}\n"
             "{\"timestamp\": 1, \"input_length\": 48, \"output_length\": 24, \"hash_ids\": [1]}\n";
    }
    const request_trace t = read_request_trace(in);
    const std::string out = tmp("fields_out.jsonl");
    {
        std::ofstream o(out);
        std::ostringstream warn;
        write_request_trace(o, t, request_format::mooncake, warn);
        CHECK(warn.str().empty());
    }
    const request_trace back = read_request_trace(out);
    REQUIRE(back.requests.size() == 2);
    CHECK(back.requests[0].n_predict == 5);
    CHECK(back.requests[0].seed == 7u);
    CHECK(back.requests[0].n_cmpl == 2);
    CHECK(!back.requests[1].n_predict);
    CHECK(!back.requests[1].seed);
    CHECK(back.requests[1].n_cmpl == 1);
    std::ostringstream o, warn;
    write_request_trace(o, t, request_format::azure, warn);
    for (const char * field : {"n_predict", "seed", "n_cmpl"}) CHECK(warn.str().find(std::string("has ") + field) != std::string::npos);
    std::filesystem::remove(in);
    std::filesystem::remove(out);
}

TEST_CASE("convert: generated Mooncake ids are never shared, so inspect finds no prefix sharing") {
    const std::string out = tmp("gen.jsonl");
    std::ostringstream warn;
    CHECK(convert_trace(src + "/traces/requests/azure_sample.csv", out, "mooncake", "auto", warn) == 12);
    CHECK(warn.str().find("no hash_ids") != std::string::npos);
    const json j = inspect_trace(out);
    CHECK(j["prefix_sharing"]["blocks_seen_before_fraction"] == 0.0);
    CHECK(j["prefix_sharing"]["longest_shared_prefix_blocks"] == 0);
    std::filesystem::remove(out);
}

TEST_CASE("convert: ops target, op-trace input, bad input and unknown format are errors; nothing is written") {
    std::ostringstream warn;
    const std::string out = tmp("never.csv");
    std::filesystem::remove(out);
    CHECK_THROWS_AS(convert_trace(src + "/traces/requests/azure_sample.csv", out, "ops", "auto", warn), usage_error);
    CHECK_THROWS_AS(convert_trace(src + "/traces/ops/context_shift.csv", out, "azure", "auto", warn), usage_error);
    CHECK_THROWS_AS(convert_trace(src + "/traces/requests/azure_sample.csv", out, "sharegpt", "auto", warn), usage_error);
    CHECK_THROWS_AS(convert_trace(src + "/traces/requests/azure_sample.csv", out, "azure", "mooncake", warn), input_error);
    CHECK_THROWS_AS(convert_trace(src + "/no/such/file.csv", out, "azure", "auto", warn), input_error);
    CHECK(!std::filesystem::exists(out));
}

TEST_CASE("kvsim inspect / convert CLI: exit statuses, JSON output") {
    const std::string kvsim = bin + "/kvsim";
    if (!std::filesystem::exists(kvsim)) {
        KVSIM_SKIP_CASE("kvsim not built: " + kvsim);
    }
    const std::string js = tmp("inspect.json");
    REQUIRE(sh(kvsim + " inspect " + src + "/traces/requests/azure_sample.csv --json > " + js) == 0);
    std::ifstream f(js);
    const json j = json::parse(f);
    CHECK(j["requests"] == 12);
    CHECK(sh(kvsim + " inspect " + src + "/traces/ops/context_shift.csv") == 0);
    CHECK(sh(kvsim + " inspect " + src + "/no/such.csv") == 2);
    CHECK(sh(kvsim + " inspect " + src + "/traces/requests/azure_sample.csv --format mooncake") == 2);
    const std::string out = tmp("cli.csv");
    CHECK(sh(kvsim + " convert " + src + "/traces/requests/mooncake_sample.jsonl " + out + " --to burstgpt") == 0);
    CHECK(read_request_trace(out).requests.size() == 8);
    CHECK(sh(kvsim + " convert " + src + "/traces/requests/mooncake_sample.jsonl " + out + " --to ops") == 2);
    CHECK(sh(kvsim + " convert " + src + "/traces/requests/mooncake_sample.jsonl " + out + " --to nonsense") == 2);
    std::filesystem::remove(out);
    std::filesystem::remove(js);
}

// docs/reliability.md, bad-input run: `kvsim inspect /dev/zero` never finished (the format probe
// read a "first line" without end). `timeout` turns a regression into a failure, not a hung test.
TEST_CASE("kvsim inspect / replay / convert of /dev/zero and of a file without line ends exit 2 at once") {
    const std::string kvsim = bin + "/kvsim";
    REQUIRE(std::filesystem::exists(kvsim));
    const std::string no_newlines = tmp("no_newlines.csv");
    std::ofstream(no_newlines, std::ios::binary) << std::string((size_t) 3 << 20, 'y');
    const std::string err = tmp("zero.err");
    struct expect {
        std::string args, in_stderr;
    };
    const std::vector<expect> cases = {
        {"inspect /dev/zero", "/dev/zero: not a regular file"},
        {"replay /dev/zero --backend none", "/dev/zero: not a regular file"},
        {"convert /dev/zero " + tmp("never.csv") + " --to azure", "/dev/zero: not a regular file"},
        {"inspect " + no_newlines, no_newlines + ":1: line 1 longer than 1048576 bytes"},
        {"replay " + no_newlines + " --backend none", no_newlines + ":1: line 1 longer than 1048576 bytes"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.args);
        const int st = std::system(("timeout 60 " + kvsim + " " + c.args + " > /dev/null 2> " + err).c_str());
        CHECK((WIFEXITED(st) ? WEXITSTATUS(st) : -1) == 2);
        std::ifstream e(err);
        const std::string text((std::istreambuf_iterator<char>(e)), {});
        CHECK_MESSAGE(text.find(c.in_stderr) != std::string::npos, "stderr: ", text);
    }
    CHECK(!std::filesystem::exists(tmp("never.csv")));
    std::filesystem::remove(no_newlines);
    std::filesystem::remove(err);
}
