// `kvsim replay --verify --backend cpu` end to end: the kernels' output through the cache (mask,
// K-shift, shared cells, SWA, quantized K/V with and without the Hadamard rotation) must agree
// with naive attention over each sequence's own cells on shipped and golden traces.
#include "cli_test_util.h"

#include <doctest/doctest.h>

using namespace kvsim_test;
using json = nlohmann::json;

namespace {

// Runs a verified replay and returns summary.json (an empty object when kvsim failed).
json verified(const std::string & trace, const std::string & flags) {
    scratch_dir out("verify");
    const auto r = run_kvsim("replay " + trace + " " + flags + " --verify --backend cpu --threads 1 --time-budget 5 --no-progress -q --out " +
                             out.path.string());
    CHECK_MESSAGE(r.rc == 0, r.err);
    if (r.rc != 0) return json::object();
    return json::parse(read_text(out / "summary.json"));
}

// Exit 0, no verification failure, and sequences were actually verified.
json check_verified(const std::string & trace, const std::string & flags) {
    CAPTURE(trace);
    CAPTURE(flags);
    const json s = verified(trace, flags);
    REQUIRE(s.contains("bandwidth"));
    const json & v = s.at("bandwidth").at("verify");
    CHECK(v.at("failures").get<uint64_t>() == 0);
    CHECK(v.at("sequences").get<uint64_t>() > 0);
    CHECK_MESSAGE(v.at("first_failures").empty(), v.dump());
    return s;
}

const char * const k_q8 = " -ctk q8_0 -ctv q8_0 -fa on";
const char * const k_head128 = " --model llama-3-8b --n-layer 2";

}  // namespace

// Each run pays kvsim's start-up bandwidth probe (a few seconds on a loaded 2-core machine), so
// the set is small: one trace per path that can go wrong.
TEST_CASE("verify: f16 on shipped op traces (K-shift, seq_cp sharing)") {
    check_verified("traces/ops/context_shift.csv", "--model tiny-llama -c 256 -np 1");
    check_verified("traces/ops/cp_keep_share.csv", "--model tiny-llama -c 256 -np 3 -kvu");
}

TEST_CASE("verify: golden traces with their manifest flags (stream copies, SWA reuse)") {
    check_verified("tests/golden/s_cross_cp.csv", "--model tiny-llama -c 768 -np 3 -b 256 -ub 32");
    check_verified("tests/golden/w_swa_reuse.csv", "--model tiny-gemma3-swa -c 1024 -np 2 -b 256 -ub 64 -kvu");
}

TEST_CASE("verify: q8_0 K/V, quantized K-shift, head size 32 (no rotation) and 128 (Hadamard)") {
    check_verified("tests/golden/u_add_shift.csv", std::string("--model tiny-llama -c 256 -np 2 -b 256 -ub 256 -kvu") + k_q8);
    check_verified("traces/ops/context_shift.csv", std::string("-c 256 -np 1") + k_head128 + k_q8);
}

TEST_CASE("verify: a request trace through the scheduler with context shifts, q8_0, head 128") {
    // n_ctx_seq 256: both requests (240 + 40 and 200 + 60 tokens) shift once
    const json s = check_verified("tests/data/sched/two_shifts.jsonl", std::string("-c 512 -np 2 --context-shift") + k_head128 + k_q8);
    CHECK(s.at("totals").at("context_shifts") == 2);
}
