// `kvsim replay` end to end through the built binary: the shipped traces run and write
// well-formed reports; bad inputs exit 2, name file/line/value, and leave no output behind.
#include "cli_test_util.h"

#include <doctest/doctest.h>

using namespace kvsim_test;
using json = nlohmann::json;

namespace {

// Header line and number of data rows of a CSV report.
std::pair<std::string, size_t> csv_shape(const std::string & path) {
    const auto l = lines_of(read_text(path));
    if (l.empty()) return {"", 0};
    return {l.front(), l.size() - 1};
}

// Every data row has as many fields as the header (no quoted commas in kvsim's reports).
bool rows_match_header(const std::string & path) {
    const auto l = lines_of(read_text(path));
    auto fields = [](const std::string & s) { return std::count(s.begin(), s.end(), ',') + 1; };
    for (const auto & row : l)
        if (fields(row) != fields(l.front())) return false;
    return true;
}

const char * const k_occupancy_header =
    "ubatch,step,sim_time_s,cache,tokens,used_cells,n_kv,head,free_runs,largest_free_run,active_seqs,swa_reused_cells,"
    "shifted_cells,slot_failures";
const char * const k_requests_header =
    "request,line,slot,n_prompt,n_gen_target,n_gen,prefix_reused,prefix_shared,context_shifts,arrival_s,admission_s,"
    "first_token_s,finish_s,queue_delay_s,ttft_s,tpot_s,outcome,error";
const char * const k_bandwidth_header =
    "step,sim_time_s,cache,n_kv,tokens,n_stream,layers_timed,kv_bytes,mask_bytes,shift_bytes,mask_ns,attn_ns,shift_ns,"
    "attn_gbs,frac_of_limit";

// Bookkeeping only: the kernel hooks' start-up bandwidth probe costs seconds per run here; the
// timed path (bandwidth.csv) runs once, in its own test case, and in test_verify.
const char * const k_fast = " --backend none --no-progress -q";
const char * const k_timed = " --backend cpu --threads 1 --time-budget 1 --no-progress -q";

void check_reports(const scratch_dir & out, bool request_trace, size_t n_requests, bool timed = false) {
    const json s = json::parse(read_text(out / "summary.json"));
    CHECK(s.at("tool") == "kvsim 0.1.0");
    CHECK(s.at("kind") == (request_trace ? "request_trace" : "op_trace"));
    CHECK(s.at("config").at("model").at("name") == "tiny-llama");
    CHECK(s.at("peaks").at("ubatches").get<uint64_t>() > 0);
    CHECK(s.contains("bandwidth") == timed);

    const auto occ = csv_shape(out / "occupancy.csv");
    CHECK(occ.first == k_occupancy_header);
    CHECK(occ.second > 0);
    CHECK(occ.second == s.at("peaks").at("occupancy_rows").get<size_t>());
    CHECK(rows_match_header(out / "occupancy.csv"));

    if (timed) {
        const auto bw = csv_shape(out / "bandwidth.csv");
        CHECK(bw.first == k_bandwidth_header);
        CHECK(bw.second > 0);
        CHECK(bw.second == s.at("bandwidth").at("ubatches_timed").get<size_t>());
        CHECK(rows_match_header(out / "bandwidth.csv"));
    } else {
        CHECK_FALSE(fs::exists(out / "bandwidth.csv"));
    }

    if (request_trace) {
        CHECK(s.at("totals").at("requests").get<size_t>() == n_requests);
        const auto rq = csv_shape(out / "requests.csv");
        CHECK(rq.first == k_requests_header);
        CHECK(rq.second == n_requests);
        const auto & oc = s.at("latency").at("outcomes");
        CHECK(oc.at("done").get<size_t>() + oc.at("truncated").get<size_t>() + oc.at("failed").get<size_t>() == n_requests);
        CHECK(s.at("totals").at("sim_seconds").get<double>() > 0);
    } else {
        CHECK_FALSE(fs::exists(out / "requests.csv"));
        CHECK(s.at("totals").at("decode_calls").get<uint64_t>() > 0);
    }
}

}  // namespace

TEST_CASE("kvsim --help and replay --help exit 0") {
    const auto top = run_kvsim("--help");
    CHECK(top.rc == 0);
    CHECK(top.out.find("replay") != std::string::npos);
    const auto sub = run_kvsim("replay --help");
    CHECK(sub.rc == 0);
    CHECK(sub.out.find("--context-shift") != std::string::npos);
    CHECK(sub.out.find("--emit-ops") != std::string::npos);
}

TEST_CASE("shipped request traces replay with well-formed reports") {
    for (const std::string t : {"traces/requests/azure_sample.csv", "traces/requests/burstgpt_sample.csv",
                                "traces/requests/mooncake_sample.jsonl"}) {
        CAPTURE(t);
        scratch_dir out("cli_req");
        const auto r = run_kvsim("replay " + t + " --model tiny-llama -c 65536 -np 4 --out " + out.path.string() + k_fast);
        REQUIRE_MESSAGE(r.rc == 0, r.err);
        check_reports(out, true, data_lines(t));
    }
}

TEST_CASE("shipped op traces replay with well-formed reports") {
    const std::vector<std::pair<std::string, std::string>> traces = {
        {"two_seq_interleave.csv", "-c 256 -np 2 -kvu"},
        {"fill_to_failure.csv", "-c 256 -np 2 -b 128 -ub 32 -kvu"},
        {"context_shift.csv", "-c 256 -np 1"},
        {"cp_keep_share.csv", "-c 256 -np 3 -kvu"},
        {"div_positions.csv", "-c 256 -np 1"},
        {"multi_seq_batch.csv", "-c 256 -np 3 -kvu"},
        {"rm_all_clear.csv", "-c 256 -np 2 -kvu"},
    };
    for (const auto & [name, flags] : traces) {
        const std::string t = "traces/ops/" + name;
        CAPTURE(t);
        scratch_dir out("cli_ops");
        const auto r = run_kvsim("replay " + t + " --model tiny-llama " + flags + " --out " + out.path.string() + k_fast);
        REQUIRE_MESSAGE(r.rc == 0, r.err);
        check_reports(out, false, 0);
    }
}

TEST_CASE("timed replay (--backend cpu) adds bandwidth.csv and the summary's bandwidth section") {
    const std::string t = "traces/requests/mooncake_sample.jsonl";
    scratch_dir out("cli_timed");
    const auto r = run_kvsim("replay " + t + " --model tiny-llama -c 16384 -np 4 --out " + out.path.string() + k_timed);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    check_reports(out, true, data_lines(t), true);
}

TEST_CASE("--emit-ops writes an op trace that replays to the same decodes and peaks") {
    scratch_dir dir("cli_emit");
    const std::string flags = " --model tiny-llama -c 4096 -np 2 -kvu";
    const auto a = run_kvsim("replay traces/requests/mooncake_sample.jsonl" + flags + " --context-shift --emit-ops " +
                             (dir / "ops.csv") + " --out " + (dir / "a") + k_fast);
    REQUIRE_MESSAGE(a.rc == 0, a.err);
    CHECK(lines_of(read_text(dir / "ops.csv")).front() == "batch,op,seq,n_tokens,p0,p1,delta,seq_dst");
    const auto b = run_kvsim("replay " + (dir / "ops.csv") + flags + " --out " + (dir / "b") + k_fast);
    REQUIRE_MESSAGE(b.rc == 0, b.err);
    // the cell-by-cell comparison of the two replays is in test_scheduler
    const json sa = json::parse(read_text(dir / "a/summary.json")), sb = json::parse(read_text(dir / "b/summary.json"));
    CHECK(sb.at("kind") == "op_trace");
    CHECK(sa.at("totals").at("decode_calls") == sb.at("totals").at("decode_calls"));
    CHECK(sa.at("totals").at("decode_no_slot") == sb.at("totals").at("decode_no_slot"));
    CHECK(sa.at("peaks").at("used_cells") == sb.at("peaks").at("used_cells"));
    CHECK(sa.at("peaks").at("n_kv") == sb.at("peaks").at("n_kv"));
    CHECK(sa.at("peaks").at("ubatches") == sb.at("peaks").at("ubatches"));
    CHECK(sa.at("totals").at("decode_calls").get<uint64_t>() > 0);
}

TEST_CASE("bad inputs exit 2, name the file, line and value, and leave no output files") {
    struct bad_case {
        std::string args;
        std::vector<std::string> in_stderr;
    };
    const std::string d = "tests/data/sched/";
    const std::vector<bad_case> cases = {
        {d + "does_not_exist.csv", {d + "does_not_exist.csv", "cannot open"}},
        {d + "azure_missing_column.csv", {d + "azure_missing_column.csv:3"}},
        {d + "azure_not_a_number.csv", {d + "azure_not_a_number.csv:3", "x12"}},
        {d + "azure_unsorted.csv", {d + "azure_unsorted.csv:3", "2023-11-30 23:59:57.5000000"}},
        {d + "mooncake_bad_json.jsonl", {d + "mooncake_bad_json.jsonl:2"}},
        {d + "ops_unknown_op.csv", {d + "ops_unknown_op.csv:3", "frobnicate"}},
        {"traces/requests/azure_sample.csv -b 512 -ub 1024", {"-ub 1024 > -b 512"}},
        {"traces/requests/azure_sample.csv --model no-such-model", {"no-such-model", "tiny-llama"}},
        {"traces/requests/azure_sample.csv -ctk q9_9", {"q9_9"}},
        {"traces/requests/azure_sample.csv -ctk q8_0 -ctv q8_0 -fa off", {"-fa on"}},
    };
    for (const auto & c : cases) {
        CAPTURE(c.args);
        scratch_dir dir("cli_bad");
        const std::string out = dir / "out";
        const std::string model = c.args.find("--model") == std::string::npos ? " --model tiny-llama" : "";
        const auto r = run_kvsim("replay " + c.args + model + " --out " + out + " --emit-ops " + (dir / "ops.csv") + " --dump-cells " +
                                 (dir / "dump.jsonl") + k_fast);
        CHECK(r.rc == 2);
        for (const auto & s : c.in_stderr) CHECK_MESSAGE(r.err.find(s) != std::string::npos, "stderr: ", r.err);
        CHECK(files_in(dir.path.string()) == 0);
        CHECK(r.out.empty());
    }
}
