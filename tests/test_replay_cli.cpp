// `kvsim replay` end to end through the built binary: the shipped traces run and write
// well-formed reports; bad inputs exit 2, name file/line/value, and leave no output behind.
#include "cli_test_util.h"
#include "util/atomic_file.h"

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

// docs/reliability.md, bad-input run: rename onto the output path replaced a symlink with a
// regular file and (as root) /dev/null or /dev/full with one.
TEST_CASE("outputs through a symlink write the link's target; devices and /dev/stdout are written directly") {
    scratch_dir dir("cli_links");
    const std::string trace = "traces/requests/mooncake_sample.jsonl --model tiny-llama -c 4096 -np 2" + std::string(k_fast);
    std::ofstream(dir / "real.csv") << "old\n";
    fs::create_symlink("real.csv", dir / "link.csv");              // relative link
    fs::create_symlink(dir / "new.jsonl", dir / "dangling.jsonl");  // target does not exist yet
    const auto r = run_kvsim("replay " + trace + " --emit-ops " + (dir / "link.csv") + " --dump-cells " + (dir / "dangling.jsonl"));
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(fs::is_symlink(dir / "link.csv"));
    CHECK(fs::is_symlink(dir / "dangling.jsonl"));
    CHECK(lines_of(read_text(dir / "real.csv")).front() == "batch,op,seq,n_tokens,p0,p1,delta,seq_dst");
    CHECK(fs::is_regular_file(dir / "new.jsonl"));
    for (const auto & e : fs::directory_iterator(dir.path)) {
        CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos, "left behind: ", e.path());
    }

    // /dev/stdout is the test's capture file, reached through /proc/self/fd/1: written in place
    const auto s = run_kvsim("replay " + trace + " --emit-ops /dev/stdout");
    REQUIRE_MESSAGE(s.rc == 0, s.err);
    CHECK(lines_of(s.out).front() == "batch,op,seq,n_tokens,p0,p1,delta,seq_dst");
    CHECK(lines_of(s.out).size() > 10);

    // only run against the real devices when atomic_file plans a direct write (a regression must
    // not get to rename onto them)
    for (const char * dev : {"/dev/null", "/dev/full"}) {
        kvsim::atomic_file probe(dev);
        REQUIRE(probe.direct());
    }
    const auto n = run_kvsim("replay " + trace + " --emit-ops /dev/null");
    CHECK_MESSAGE(n.rc == 0, n.err);
    CHECK(fs::is_character_file("/dev/null"));
    const auto f = run_kvsim("convert traces/requests/azure_sample.csv /dev/full --to burstgpt");
    CHECK(f.rc == 1);
    CHECK_MESSAGE(f.err.find("cannot write /dev/full: No space left on device") != std::string::npos, f.err);
    CHECK(fs::is_character_file("/dev/full"));
}

// docs/reliability.md, bad-input run: a request-trace run's requests.csv stayed next to a later
// op-trace run's summary.json in the same --out.
TEST_CASE("a replay removes kvsim's own files left in --out by an earlier run, and nothing else") {
    scratch_dir dir("cli_stale");
    const std::string out = dir / "out";
    const auto a = run_kvsim("replay traces/requests/mooncake_sample.jsonl --model tiny-llama -c 4096 -np 2 --out " + out + k_fast);
    REQUIRE_MESSAGE(a.rc == 0, a.err);
    REQUIRE(fs::exists(out + "/requests.csv"));
    std::ofstream(out + "/bandwidth.csv") << "from an older timed run\n";
    std::ofstream(out + "/notes.txt") << "the user's\n";
    fs::create_directory(out + "/report.d");

    // a failed run changes nothing
    const auto bad = run_kvsim("replay tests/data/sched/ops_unknown_op.csv --model tiny-llama --out " + out + k_fast);
    CHECK(bad.rc == 2);
    CHECK(fs::exists(out + "/requests.csv"));
    CHECK(json::parse(read_text(out + "/summary.json")).at("kind") == "request_trace");

    const auto b = run_kvsim("replay traces/ops/two_seq_interleave.csv --model tiny-llama -c 256 -np 2 -kvu --out " + out + k_fast);
    REQUIRE_MESSAGE(b.rc == 0, b.err);
    CHECK(json::parse(read_text(out + "/summary.json")).at("kind") == "op_trace");
    CHECK_FALSE(fs::exists(out + "/requests.csv"));
    CHECK_FALSE(fs::exists(out + "/bandwidth.csv"));
    CHECK(fs::exists(out + "/occupancy.csv"));
    CHECK(fs::exists(out + "/report.html"));
    CHECK(read_text(out + "/notes.txt") == "the user's\n");
    CHECK(fs::is_directory(out + "/report.d"));
}

// docs/reliability.md, bad-input run: --arrivals on an op trace and --keep without
// --context-shift were silently ignored.
TEST_CASE("options that would do nothing are refused with exit 2, only when given") {
    const std::string ops = "replay traces/ops/context_shift.csv --model tiny-llama -c 256 -np 2 -kvu" + std::string(k_fast);
    const std::string req = "replay traces/requests/azure_sample.csv --model tiny-llama -c 4096 -np 2" + std::string(k_fast);
    struct refused {
        std::string args;
        std::vector<std::string> in_stderr;
    };
    const std::vector<refused> cases = {
        {ops + " --arrivals saturate", {"--arrivals applies to request traces only", "traces/ops/context_shift.csv is an op trace"}},
        {ops + " --context-shift --limit 5", {"--context-shift, --limit apply to request traces only"}},
        {ops + " --device h200 --step-time roofline", {"--device, --step-time apply"}},   // default values, given explicitly
        {ops + " --bandwidth-gbs 100 --tflops 50 --no-cache-prompt --no-share-prefix --slot-prompt-similarity 0.5",
         {"--no-cache-prompt", "--no-share-prefix", "--slot-prompt-similarity", "--bandwidth-gbs", "--tflops"}},
        {ops + " --context-shift --keep 4 --n-discard 2", {"--context-shift, --keep, --n-discard apply"}},
        {ops + " --format ops --arrivals trace", {"--arrivals applies to request traces only"}},
        {ops + " --keep 4", {"--keep only applies with --context-shift"}},
        {req + " --keep 64", {"--keep only applies with --context-shift"}},
        {req + " --n-discard 8", {"--n-discard only applies with --context-shift"}},
    };
    for (const auto & c : cases) {
        CAPTURE(c.args);
        scratch_dir dir("cli_refused");
        const auto r = run_kvsim(c.args + " --out " + (dir / "out"));
        CHECK(r.rc == 2);
        for (const auto & s : c.in_stderr) CHECK_MESSAGE(r.err.find(s) != std::string::npos, "stderr: ", r.err);
        CHECK(files_in(dir.path.string()) == 0);
    }
    // what op traces do use, and the same knobs where they apply
    for (const std::string & ok : {ops + " --occupancy-every 2 --trace-json /dev/null", req + " --context-shift --keep 64 --n-discard 8",
                                 req + " --arrivals saturate --limit 5 --device a100 --step-time roofline --no-cache-prompt"}) {
        CAPTURE(ok);
        const auto r = run_kvsim(ok);
        CHECK_MESSAGE(r.rc == 0, r.err);
    }
}
