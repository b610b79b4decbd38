// `kvsim replay` end to end through the built binary: the shipped traces run and write
// well-formed reports; bad inputs exit 2, name file/line/value, and leave no output behind.
#include "cli_test_util.h"
#include "util/atomic_file.h"

#include <doctest/doctest.h>
#include <set>

#include <fcntl.h>

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
    "request,line,slot,n_prompt,n_gen_target,n_gen,prefix_reused,ram_restored_cells,context_shifts,arrival_s,admission_s,"
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
    // llama.cpp's multi-letter flags beside their long names (a fresh-clone check searched the help for -np)
    for (const char * f : {"-np,--parallel", "-ub,--ubatch-size", "-kvu,-no-kvu,--kv-unified", "-ctk,--cache-type-k", "-fa,--flash-attn",
                           "-n,--predict"}) {
        CHECK_MESSAGE(sub.out.find(f) != std::string::npos, f);
    }
    // kvbench does not rewrite them: its help must not offer them
    CHECK(run_kvbench("cache --help").out.find("-np") == std::string::npos);
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

TEST_CASE("timed replay: the split by query tokens per stream, counted by hand from the op trace") {
    // traces/ops/fill_to_failure.csv in one 256-cell stream, ubatches of at most 32 tokens (-ub 32):
    //   100 tokens (seq 0): 32 + 32 + 32 + 4;  100 tokens (seq 1): 32 + 32 + 32 + 4;  64 tokens: no slot
    //   (56 cells left), nothing placed;  50 tokens: 32 + 18;  8 one-token calls: the first 6 fill the
    //   256 cells, the last 2 find no slot;  rm frees 10 cells;  10 tokens: 10;  1 token: no slot.
    // Every ubatch timed (--time-every 1, no budget): 11 ubatches of several tokens, 6 of one token.
    scratch_dir out("cli_split");
    const auto r = run_kvsim("replay traces/ops/fill_to_failure.csv --model tiny-llama -c 256 -np 2 -b 128 -ub 32 -kvu "
                             "--backend cpu --threads 1 --time-every 1 --time-budget 0 --no-progress -q --out " + out.path.string());
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    std::vector<std::string> tokens;   // bandwidth.csv's tokens column (step,sim_time_s,cache,n_kv,tokens,...)
    for (const std::string & line : lines_of(read_text(out / "bandwidth.csv"))) {
        std::stringstream ls(line);
        std::string col;
        for (int i = 0; i < 5; ++i) std::getline(ls, col, ',');
        tokens.push_back(col);
    }
    CHECK(tokens == std::vector<std::string>{"tokens", "32", "32", "32", "4", "32", "32", "32", "4", "32", "18",
                                             "1", "1", "1", "1", "1", "1", "10"});
    const json s = json::parse(read_text(out / "summary.json"));
    CHECK(s.at("bandwidth").at("ubatches_timed").get<size_t>() == 17);
    const json & by = s.at("bandwidth").at("attention_by_tokens");
    CHECK(by.at("one_per_stream").at("ubatches").get<size_t>() == 6);
    CHECK(by.at("several_per_stream").at("ubatches").get<size_t>() == 11);
}

// a profile without a K-shift price (every GPU profile: nothing measured there) says its times leave the shifts out
TEST_CASE("context shifts under a profile that does not price the K-shift: a time-model warning") {
    const std::string base = "replay traces/requests/azure_sample.csv --model tiny-llama -c 512 -np 2 --context-shift --backend none "
                             "--no-progress --out ";
    scratch_dir dir("cli_kshift_warning");
    const auto gpu = run_kvsim(base + (dir / "gpu") + " --device h200");
    REQUIRE_MESSAGE(gpu.rc == 0, gpu.err);
    CHECK(gpu.out.find("context shifts          1") != std::string::npos);
    CHECK_MESSAGE(gpu.out.find("1 context shift(s): this profile does not price llama.cpp's K-shift") != std::string::npos, gpu.out);
    const auto s = nlohmann::json::parse(read_text(dir / "gpu/summary.json"));
    CHECK(s["time_model_warnings"].dump().find("K-shift") != std::string::npos);
    const auto cpu = run_kvsim(base + (dir / "cpu") + " --device cpu");
    REQUIRE_MESSAGE(cpu.rc == 0, cpu.err);
    CHECK(cpu.out.find("K-shift") == std::string::npos);   // the cpu profile prices it
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
    // a RAM-cache restore is written as decode calls R<n>.<k> (one ubatch each): llama_decode
    // calls in the op trace, not in the scheduler's count
    std::set<std::string> restore_calls;
    for (const auto & l : lines_of(read_text(dir / "ops.csv"))) {
        if (!l.empty() && l[0] == 'R') restore_calls.insert(l.substr(0, l.find(',')));
    }
    CHECK(sa.at("totals").at("ram_cache").at("restores").get<uint64_t>() > 0);
    const uint64_t n_restore = restore_calls.size();
    CHECK(sa.at("totals").at("decode_calls").get<uint64_t>() + n_restore == sb.at("totals").at("decode_calls").get<uint64_t>());
    CHECK(sa.at("totals").at("decode_no_slot") == sb.at("totals").at("decode_no_slot"));
    CHECK(sa.at("peaks").at("used_cells") == sb.at("peaks").at("used_cells"));
    CHECK(sa.at("peaks").at("n_kv") == sb.at("peaks").at("n_kv"));
    CHECK(sa.at("peaks").at("ubatches").get<uint64_t>() + n_restore == sb.at("peaks").at("ubatches").get<uint64_t>());
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
        // the library's checks (server_params::validate, compute_context_sizes) said in the flags' names
        {"traces/requests/azure_sample.csv --context-shift --keep -2", {"--keep must be >= -1 (-1 = the whole prompt), got -2"}},
        {"traces/requests/azure_sample.csv -sps 1.5", {"--slot-prompt-similarity must be in [0, 1], got 1.5"}},
        {"traces/requests/azure_sample.csv -c 2000000000", {"-c must be in [1, 2^30], got 2000000000"}},
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
        {ops + " --bandwidth-gbs 100 --tflops 50 --no-cache-prompt --slot-prompt-similarity 0.5",
         {"--no-cache-prompt", "--slot-prompt-similarity", "--bandwidth-gbs", "--tflops"}},
        {"replay traces/ops/context_shift.csv --model tiny-gemma3-swa -c 256 -np 2 -kvu" + std::string(k_fast) +
             " --cache-ram 100 --no-cache-idle-slots --ctx-checkpoints 4 --checkpoint-min-step 16",
         {"--cache-ram", "--cache-idle-slots", "--ctx-checkpoints", "--checkpoint-min-step"}},
        {ops + " --context-shift --keep 4 --n-discard 2", {"--context-shift, --keep, --n-discard apply"}},
        {ops + " --format ops --arrivals trace", {"--arrivals applies to request traces only"}},
        {ops + " --keep 4", {"--keep only applies with --context-shift"}},
        {req + " --cache-ram 0 --cache-idle-slots", {"--cache-idle-slots saves idle slots", "--cache-ram 0"}},
        {"replay traces/requests/azure_sample.csv --model tiny-llama -no-kvu" + std::string(k_fast), {"-no-kvu: with -np auto"}},
        {req + " --ctx-checkpoints 4", {"--ctx-checkpoints: llama-server makes context checkpoints only for a model with sliding-window"}},
        {req + " --checkpoint-min-step 64", {"--checkpoint-min-step: llama-server makes context checkpoints only"}},
        {req + " --keep 64", {"--keep only applies with --context-shift"}},
        {req + " --n-discard 8", {"--n-discard only applies with --context-shift"}},
        {ops + " --time-layers 0", {"--time-layers must be >= 1"}},  // was taken silently as 1
        {ops + " -fit off --device-memory 24GiB", {"--fit, --device-memory apply to request traces only"}},
        {ops + " --kv-unified-per-slot 128", {"--kv-unified-per-slot applies to request traces only"}},
        {req + " -fitc 0", {"--fit-ctx must be > 0"}},
        {req + " -fitt -1", {"--fit-target must be 0 to 2^40 MiB, got -1"}},
        {req + " --device-memory 12Q", {"--device-memory: ", "12Q"}},
        {req + " --fit maybe", {"--fit: maybe not in {on,off}"}},
        {req + " --kv-unified-per-slot -5", {"--kv-unified-per-slot must be >= 0"}},
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
                                 req + " --arrivals saturate --limit 5 --device a100-datasheet --step-time roofline --no-cache-prompt"}) {
        CAPTURE(ok);
        const auto r = run_kvsim(ok);
        CHECK_MESSAGE(r.rc == 0, r.err);
    }
}

// ---- bad-input run 2 (docs/reliability.md, bad-input section): fixes 1-9 ----

namespace {
// Writes `text` to dir/name and returns the path.
std::string write_file(const scratch_dir & dir, const std::string & name, const std::string & text) {
    std::ofstream(dir / name, std::ios::binary) << text;
    return dir / name;
}
const char * const k_ops_header = "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n";
const char * const k_azure_hdr = "TIMESTAMP,ContextTokens,GeneratedTokens\n";

// Names of regular files under `dir` containing ".tmp-" (leftover temporaries).
size_t temp_files_in(const std::string & dir) {
    if (!fs::exists(dir)) return 0;
    size_t n = 0;
    for (const auto & e : fs::recursive_directory_iterator(dir)) n += e.path().filename().string().find(".tmp-") != std::string::npos;
    return n;
}
}  // namespace

// Used to fail with exit 1 after the replay and leave x.jsonl corrupted: the "given twice" check
// compared weakly_canonical("x") (relative) with weakly_canonical("./x") (absolute).
TEST_CASE("two outputs naming one file, spelled differently, are refused before any work") {
    scratch_dir dir("cli_same_file");
    const std::string req = "traces/requests/azure_sample.csv --model tiny-llama" + std::string(k_fast);
    const fs::path cwd = fs::current_path();
    const std::string rel = fs::relative(dir.path, cwd).string();   // the scratch dir, relative to the cwd
    const std::vector<std::string> cases = {
        " --dump-cells " + rel + "/x.jsonl --trace-json " + rel + "/./x.jsonl",
        " --dump-cells " + rel + "/x.jsonl --trace-json " + (dir / "x.jsonl"),
        " --emit-ops " + rel + "/x.jsonl --dump-cells " + rel + "/sub/../x.jsonl",
        " --out " + rel + "/o --trace-json " + (dir / "o") + "/summary.json",
        " --out " + (dir / "o") + " --emit-ops " + rel + "/./o/requests.csv",
    };
    for (const auto & c : cases) {
        CAPTURE(c);
        std::ofstream(dir / "x.jsonl") << "keep\n";
        const auto r = run_kvsim("replay " + req + c);
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find("same file") != std::string::npos, r.err);
        CHECK(read_text(dir / "x.jsonl") == "keep\n");
        CHECK_FALSE(fs::exists(dir / "o"));
        CHECK(temp_files_in(dir.path.string()) == 0);
    }
    // relative and "./" spellings where nothing exists yet
    const auto r = run_kvsim("replay " + req + " --dump-cells a_" + std::to_string(getpid()) + ".jsonl --trace-json ./a_" +
                             std::to_string(getpid()) + ".jsonl");
    CHECK(r.rc == 2);
    CHECK_FALSE(fs::exists("a_" + std::to_string(getpid()) + ".jsonl"));
}

// Used to die of SIGPIPE (exit 141) with o/*.tmp-PID left behind.
namespace {
// Runs the built binary argv[0] with its standard output a pipe nobody reads (the first write gets EPIPE, or SIGPIPE
// when not ignored) and its standard error into `err`; the wait status.
int run_into_closed_pipe(std::vector<const char *> argv, const std::string & err) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    ::close(fds[0]);
    const std::string bin = std::string(KVSIM_BINARY_DIR) + "/" + argv.front();
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::dup2(fds[1], 1);
        const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(e, 2);
        ::execv(bin.c_str(), const_cast<char * const *>(argv.data()));
        ::_exit(127);
    }
    ::close(fds[1]);
    int st = 0;
    REQUIRE(::waitpid(pid, &st, 0) == pid);
    return st;
}
}  // namespace

TEST_CASE("a closed pipe on --emit-ops /dev/stdout is a write error that leaves no temporary files") {
    scratch_dir dir("cli_sigpipe");
    const std::string out = dir / "o", err = dir / "err.txt";
    const int st = run_into_closed_pipe({"kvsim", "replay", "traces/requests/azure_sample.csv", "--model", "tiny-llama", "--backend", "none",
                                         "--no-progress", "--out", out.c_str(), "--emit-ops", "/dev/stdout"},
                                        err);
    CHECK_MESSAGE(WIFEXITED(st), "killed by signal ", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    CHECK(WEXITSTATUS(st) == 1);
    CHECK_MESSAGE(read_text(err).find("Broken pipe") != std::string::npos, read_text(err));
    CHECK(temp_files_in(dir.path.string()) == 0);
    CHECK(files_in(out) == 0);
}

// Hostile check, session 32: kvbench did not ignore SIGPIPE (killed by the signal, status 141, no message).
TEST_CASE("kvbench into a closed pipe is a write error naming it, not a kill") {
    scratch_dir dir("kvbench_sigpipe");
    const std::string err = dir / "err.txt";
    const int st = run_into_closed_pipe({"kvbench", "--help"}, err);
    CHECK_MESSAGE(WIFEXITED(st), "killed by signal ", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    CHECK(WEXITSTATUS(st) == 1);
    CHECK_MESSAGE(read_text(err).find("kvbench: error: cannot write standard output: Broken pipe") != std::string::npos, read_text(err));
}

// Used to overflow int32 positions (UB) in the op replay: pos + 1, a decode continuing past
// INT32_MAX, and seq_add moving a cell past it (kv_cells::pos_add).
TEST_CASE("op-trace positions past INT32_MAX are input errors naming the line") {
    scratch_dir dir("cli_pos_overflow");
    struct bad {
        std::string rows, in_err;
    };
    const std::vector<bad> cases = {
        {"1,decode,0,4,2147483647,,,\n", ".csv:2"},
        {"1,decode,0,4,2147483644,,,\n", ".csv:2"},
        {"1,decode,0,1,2147483646,,,\n2,decode,0,1,,,,\n", ".csv:3"},
        {"1,decode,0,4,0,,,\n2,add,0,,0,-1,2147483645,\n", ".csv:3"},
        {"1,decode,0,4,2147483000,,,\n2,add,0,,0,-1,1000,\n", ".csv:3"},
        // div keeps the position small but grows the pending shift: the shift would overflow
        {"1,decode,0,4,2147483000,,,\n2,div,0,,0,-1,2,\n3,div,0,,0,-1,2,\n4,add,0,,0,-1,600000000,\n", ".csv:5"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.rows);
        const std::string t = write_file(dir, "t.csv", k_ops_header + c.rows);
        const auto r = run_kvsim("replay " + t + " --model tiny-llama --out " + (dir / "o") + k_fast);
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find(c.in_err) != std::string::npos, r.err);
        CHECK_FALSE(fs::exists(dir / "o"));
    }
    // the largest position itself is fine, and an add that stays in range
    const std::string ok = write_file(dir, "ok.csv", std::string(k_ops_header) + "1,decode,0,4,2147483643,,,\n2,add,0,,0,-1,-5,\n");
    const auto r = run_kvsim("replay " + ok + " --model tiny-llama" + k_fast);
    CHECK_MESSAGE(r.rc == 0, r.err);
}

// The position guard moved from the op replay into the op door (drive/op_runner): these texts were
// recorded from kvsim before the move (commit f203b56) and must not change. They name the first
// offending cell in cell order (case 2: cell 0 holds 2147483004 after the rm freed cells 0-1), both
// caches of an iSWA model, and a cell at INT32_MAX itself under an open end (case 6).
TEST_CASE("op-trace position errors: the texts of the position guard, per layout") {
    scratch_dir dir("cli_pos_texts");
    struct bad {
        std::string rows, flags, err;
    };
    const std::vector<bad> cases = {
        {"1,decode,0,4,2147483000,,,\n2,add,0,,0,-1,1000,\n", " --model tiny-llama",
         ".csv:3: add by 1000 moves seq 0 position 2147483000 (pending shift 0) outside the int32 range (value '1000')"},
        {"1,decode,0,4,2147483000,,,\n2,rm,0,,2147483000,2147483002,,\n3,decode,0,2,,,,\n4,add,0,,0,-1,1000,\n", " --model tiny-llama",
         ".csv:5: add by 1000 moves seq 0 position 2147483004 (pending shift 0) outside the int32 range (value '1000')"},
        {"1,decode,0,4,0,,,\n2,add,0,,0,-1,2147483645,\n", " --model tiny-llama",
         ".csv:3: add by 2147483645 moves seq 0 position 3 (pending shift 0) outside the int32 range (value '2147483645')"},
        {"1,decode,0,2,0,,,\n2,decode,1,4,2147483000,,,\n3,add,1,,-1,-1,1000,\n", " --model tiny-llama -np 2",
         ".csv:4: add by 1000 moves seq 1 position 2147483000 (pending shift 0) outside the int32 range (value '1000')"},
        {"1,decode,0,20,2147483000,,,\n2,div,0,,-1,-1,2,\n3,add,0,,2147483000,-1,-5,\n4,div,0,,0,-1,3,\n5,add,0,,0,-1,2147483000,\n",
         " --model tiny-gemma3-swa",
         ".csv:6: add by 2147483000 moves seq 0 position 357913833 (pending shift 1789569167) outside the int32 range (value '2147483000')"},
        {"1,decode,0,4,2147483643,,,\n2,add,0,,0,-1,1,\n3,add,0,,-1,-1,1,\n", " --model tiny-llama",
         ".csv:4: add by 1 moves seq 0 position 2147483647 (pending shift 1) outside the int32 range (value '1')"},
        {"1,decode,0,1,2147483646,,,\n2,decode,0,1,,,,\n", " --model tiny-llama",
         ".csv:3: decode positions 2147483647..2147483647 run past the largest position 2147483646 (int32) (value 'decode 0:1')"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.rows);
        const std::string t = write_file(dir, "t.csv", k_ops_header + c.rows);
        const auto r = run_kvsim("replay " + t + c.flags + k_fast);
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find(c.err + "\n") != std::string::npos, r.err);
    }
}

// --keep 2147483647: ++n_keep for the BOS token wrapped to INT32_MIN and every shift wiped the slot.
TEST_CASE("--context-shift --keep INT32_MAX clamps like llama-server (n_ctx_slot - 4) instead of overflowing") {
    scratch_dir dir("cli_keep_max");
    const std::string t = write_file(dir, "a.csv", std::string(k_azure_hdr) + "2023-11-16 18:15:46.0000000,100,600\n");
    const std::string base = "replay " + t + " --model tiny-llama -c 256 -np 1 --context-shift" + std::string(k_fast);
    // n_ctx_slot 256: n_keep = min(252, keep + add_bos) and tiny-llama adds no BOS, so --keep 252 gives the same shifts
    const auto a = run_kvsim(base + " --keep 2147483647 --emit-ops " + (dir / "a.ops"));
    const auto b = run_kvsim(base + " --keep 252 --emit-ops " + (dir / "b.ops"));
    REQUIRE_MESSAGE(a.rc == 0, a.err);
    REQUIRE_MESSAGE(b.rc == 0, b.err);
    CHECK(read_text(dir / "a.ops") == read_text(dir / "b.ops"));
    CHECK(read_text(dir / "a.ops").find(",rm,0,,-1,") == std::string::npos);
}

// Used to exit 1 at the first timed step ("flash_attn: head dims must be multiples of 32") with
// an empty --out directory left behind, or blame a correct op-trace line.
TEST_CASE("--head-dim not a multiple of 32 is refused up front with a kernel backend") {
    scratch_dir dir("cli_head_dim");
    for (const char * trace : {"traces/requests/azure_sample.csv", "traces/ops/context_shift.csv"}) {
        CAPTURE(trace);
        const auto r = run_kvsim(std::string("replay ") + trace + " --model tiny-llama --head-dim 80 --backend cpu --no-progress -q --out " + (dir / "o"));
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find("--head-dim 80") != std::string::npos, r.err);
        CHECK_FALSE(fs::exists(dir / "o"));
    }
    const auto ok = run_kvsim("replay traces/ops/context_shift.csv --model tiny-llama --head-dim 80" + std::string(k_fast));
    CHECK_MESSAGE(ok.rc == 0, ok.err);
}

// kvsim convert wrote files its own readers reject (garbage Azure dates, Total tokens over
// INT32_MAX, Mooncake lines over 1 MiB after allocating gigabytes, wrapped hash ids), exit 0.
// Hostile check, session 32: `convert IN -` wrote a file named '-' where calibrate -o - means standard output.
TEST_CASE("convert IN - writes the converted trace to standard output") {
    const auto r = run_kvsim("convert traces/requests/azure_sample.csv - --to burstgpt");
    CHECK_MESSAGE(r.rc == 0, r.err);
    CHECK(lines_of(r.out).size() > 10);
    CHECK(r.err.find("requests to /dev/stdout") != std::string::npos);
    CHECK_FALSE(fs::exists("-"));
}

// Hostile check, session 32 (open until session 33): `--emit-ops -` wrote a file named '-', and `--limit -1` replayed
// every request (CLI11 took -1 as the largest count).
TEST_CASE("replay: a file output named - is standard output, the summary then on standard error; --limit -1 refused") {
    const std::string trace = "replay traces/requests/mooncake_sample.jsonl --model tiny-llama -c 4096 -np 2" + std::string(k_fast);
    // without -q: the summary is there, on standard error
    const auto r = run_kvsim("replay traces/requests/mooncake_sample.jsonl --model tiny-llama -c 4096 -np 2 --backend none --no-progress "
                             "--emit-ops -");
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    const auto out = lines_of(r.out);
    REQUIRE(out.size() > 10);
    CHECK(out.front() == "batch,op,seq,n_tokens,p0,p1,delta,seq_dst");
    CHECK(r.out.find("kvsim replay") == std::string::npos);   // the summary is not in the op trace
    CHECK(r.err.find("kvsim replay traces/requests/mooncake_sample.jsonl") != std::string::npos);
    CHECK_FALSE(fs::exists("-"));
    const auto twice = run_kvsim(trace + " --emit-ops - --dump-cells -");
    CHECK(twice.rc == 2);
    CHECK_MESSAGE(twice.err.find("given twice") != std::string::npos, twice.err);

    const auto neg = run_kvsim(trace + " --limit -1");
    CHECK(neg.rc == 2);
    CHECK_MESSAGE(neg.err.find("--limit: '-1' is not a whole number >= 0") != std::string::npos, neg.err);
    CHECK(run_kvsim(trace + " --limit 3abc").err.find("'3abc' is not a whole number") != std::string::npos);
    CHECK(neg.out.empty());
}

TEST_CASE("convert refuses requests the target format cannot hold, naming the input line, and writes nothing") {
    scratch_dir dir("cli_convert_bad");
    const std::string bg_hdr = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
    struct bad {
        std::string name, text, to, extra, in_err;
    };
    const std::vector<bad> cases = {
        {"huge.csv", bg_hdr + "0,m,10,1,11,Conversation log\n1e308,m,10,1,11,Conversation log\n", "azure", "", "huge.csv:3"},
        {"span.csv", bg_hdr + "0,m,10,1,11,Conversation log\n8000000000,m,10,1,11,Conversation log\n", "azure", "", "span.csv:3"},
        {"total.csv", bg_hdr + "0,m,2147483647,5,2147483647,Conversation log\n", "burstgpt", "", "total.csv:2"},
        {"long.csv", bg_hdr + "0,m,2147483647,1,2147483647,Conversation log\n", "mooncake", " --block-tokens 1", "long.csv:2"},
        {"ids.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [18446744073709551615]}\n"
                      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": []}\n", "mooncake", "", "ids.jsonl:2"},
        {"ids2.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [18446744073709551614]}\n"
                       "{\"timestamp\": 1, \"input_length\": 1024, \"output_length\": 1, \"hash_ids\": []}\n", "mooncake", "", "ids2.jsonl:2"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.name);
        const std::string in = write_file(dir, c.name, c.text);
        const auto r = run_kvsim("convert " + in + " " + (dir / "out.txt") + " --to " + c.to + c.extra);
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find(c.in_err) != std::string::npos, r.err);
        CHECK_FALSE(fs::exists(dir / "out.txt"));
        CHECK(temp_files_in(dir.path.string()) == 0);
    }
    // a span the Azure format holds still converts and reads back
    const std::string in = write_file(dir, "ok.csv", bg_hdr + "0,m,10,1,11,Conversation log\n7000000000,m,10,1,11,Conversation log\n");
    const auto r = run_kvsim("convert " + in + " " + (dir / "ok_azure.csv") + " --to azure");
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    const auto back = run_kvsim("inspect " + (dir / "ok_azure.csv"));
    CHECK_MESSAGE(back.rc == 0, back.err);
}

// Mooncake: more hash_ids than prompt tokens made block lengths negative (prefix reuse of a
// negative length, `cp 0 -> 0`); a repeated key silently took the last value.
TEST_CASE("Mooncake lines with more hash_ids than prompt tokens or a duplicated key are refused") {
    scratch_dir dir("cli_mooncake_bad");
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"{\"timestamp\": 0, \"input_length\": 2, \"output_length\": 1, \"hash_ids\": [1,2,3]}\n", "3 hash_ids for input_length 2"},
        {"{\"timestamp\": 0, \"input_length\": 10, \"input_length\": 5000, \"output_length\": 1, \"hash_ids\": [1]}\n",
         "key \"input_length\" appears twice in one object"},
    };
    for (const auto & [text, msg] : cases) {
        const std::string t = write_file(dir, "m.jsonl", text);
        const auto r = run_kvsim("replay " + t + " --model tiny-llama --out " + (dir / "o") + k_fast);
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find("m.jsonl:1") != std::string::npos, r.err);
        CHECK_MESSAGE(r.err.find(msg) != std::string::npos, r.err);
        CHECK_FALSE(fs::exists(dir / "o"));
    }
}

// Report files are committed all or nothing, and a failed run removes the --out directories it
// created (occupancy.csv used to be renamed into place before requests.csv failed on /dev/full).
TEST_CASE("a failed run leaves no report from this run and no --out directory it created") {
    scratch_dir dir("cli_all_or_nothing");
    const std::string out = dir / "o";
    fs::create_directories(out);
    fs::create_symlink("/dev/full", out + "/requests.csv");
    const auto r = run_kvsim("replay traces/requests/azure_sample.csv --model tiny-llama --out " + out + k_fast);
    CHECK(r.rc == 1);
    CHECK_FALSE(fs::exists(out + "/occupancy.csv"));
    CHECK_FALSE(fs::exists(out + "/summary.json"));
    CHECK(temp_files_in(out) == 0);
    // an input error after the outputs were opened: the new nested --out directories go again
    const std::string t = write_file(dir, "t.csv", std::string(k_ops_header) + "1,decode,0,4,2147483647,,,\n");
    const auto e = run_kvsim("replay " + t + " --model tiny-llama --out " + (dir / "new/deeper") + k_fast);
    CHECK(e.rc == 2);
    CHECK_FALSE(fs::exists(dir / "new"));
}

// Control bytes in a value were printed raw ('4\r' moved the cursor back over the message).
TEST_CASE("control characters in an error's value are escaped") {
    scratch_dir dir("cli_ctrl");
    const std::string t = write_file(dir, "t.csv", std::string(k_ops_header) + "1,decode,0,4\x01,,,,\n");
    const auto r = run_kvsim("replay " + t + " --model tiny-llama" + k_fast);
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.find("'4\\x01'") != std::string::npos, r.err);
    CHECK(r.err.find('\x01') == std::string::npos);
}

// CLI11 quotes a bad option value as given; kvsim's own errors escape control bytes, and so do CLI11's now (a value
// holding ESC [ or CR reached the terminal raw: hostile check, session 31).
TEST_CASE("CLI11's parse errors show a value's control bytes escaped, for kvsim and kvbench") {
    for (const auto & r : {run_kvsim("inspect traces/requests/azure_sample.csv --format \"$(printf 'a\\033[31m\\r')\""),
                           run_kvbench("merge d -o o --format \"$(printf 'a\\033[31m')\"")}) {
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find("\\x1b[31m") != std::string::npos, r.err);
        CHECK(r.err.find('\x1b') == std::string::npos);
        CHECK(r.err.find('\r') == std::string::npos);
    }
}

// An output option given an empty value (an unset shell variable) used to mean "not given": the run wrote nothing.
TEST_CASE("output options given an empty name are refused before any work") {
    for (const std::string opt : {"--out", "--dump-cells", "--trace-json", "--emit-ops"}) {
        const auto r = run_kvsim("replay traces/requests/azure_sample.csv --model tiny-llama --backend none --no-progress " + opt + " ''");
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find(opt + ": an empty name") != std::string::npos, r.err);
        CHECK(r.out.empty());
    }
    CHECK(run_kvsim("plan traces/requests/azure_sample.csv --model tiny-llama --out ''").rc == 2);
    CHECK(run_kvsim("convert traces/requests/azure_sample.csv '' --to burstgpt").rc == 2);
    CHECK(run_kvbench("sweep --out ''").rc == 2);
}

// Hostile check, session 32: `--out=$DIR` with DIR unset made CLI11 take the next argument as the value (calibrate wrote
// its profile over the input a.json), and `-o=` wrote a file named '='.
TEST_CASE("an option spelled with '=' and no value is refused before parsing, for kvsim and kvbench") {
    scratch_dir dir("cli_eq");
    const std::string a = dir / "a.json", b = dir / "b.json";
    fs::copy_file("tests/data/llama-bench/synthetic-llama-3.2-1b-q4_0.json", a);
    fs::copy_file(a, b);
    const std::string before = read_text(a);
    for (const std::string opt : {"--out=", "-o="}) {
        const auto r = run_kvsim("calibrate --model llama-3.2-1b " + opt + " " + a + " " + b);
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err == "kvsim: error: " + opt + ": nothing after '=' (an unset shell variable?): give a value, or leave the "
                               "option out\n", r.err);
        CHECK(r.out.empty());
    }
    CHECK(read_text(a) == before);
    CHECK_FALSE(fs::exists("="));
    CHECK(run_kvsim("replay --out= traces/requests/azure_sample.csv --model tiny-llama").rc == 2);
    const auto k = run_kvbench("merge --out= " + (dir / "x") + " " + (dir / "y"));
    CHECK(k.rc == 2);
    CHECK(k.err.find("kvbench: error: --out=: nothing after '='") != std::string::npos);
    // after `--` an argument is a value, and a value may end with '=' (a file name); nor is it a llama.cpp alias
    CHECK(run_kvsim("inspect -- x=").err.find("nothing after") == std::string::npos);
    const auto dash = run_kvsim("inspect -- -np");
    CHECK(dash.rc == 2);
    CHECK_MESSAGE(dash.err.find("-np: cannot open trace file") != std::string::npos, dash.err);
    // a one-letter option glued to '=' took "=p.json" as its value (a file named so was written)
    const auto glued = run_kvsim("calibrate --model llama-3.2-1b -o=p.json " + b);
    CHECK(glued.rc == 2);
    CHECK_MESSAGE(glued.err.find("-o=p.json: a one-letter option takes its value after a space (-o p.json)") != std::string::npos, glued.err);
    CHECK_FALSE(fs::exists("=p.json"));
    // llama.cpp's multi-letter aliases take '=' (rewritten to --long=VALUE), -n too
    CHECK(run_kvsim("replay traces/requests/azure_sample.csv --model tiny-llama --backend none --no-progress -np=2 -n=8").rc == 0);
}

// Hostile check, session 32: a newline in a value let CLI11's error forge a second line; a 100 KB value made a 100 KB
// error line.
TEST_CASE("CLI11's errors escape a value's newlines and cut a long value") {
    auto r = run_kvsim("replay traces/requests/azure_sample.csv --model tiny-llama --flash-attn \"$(printf 'x\\nkvsim: wrote /etc/passwd')\"");
    CHECK(r.rc == 2);
    CHECK_MESSAGE(lines_of(r.err).size() == 2, r.err);   // the error and CLI11's "Run with --help" line
    CHECK(r.err.find("x\\nkvsim: wrote") != std::string::npos);
    r = run_kvsim("inspect traces/requests/azure_sample.csv --format " + std::string(100000, 'a'));
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.size() < 1000, r.err.size());
    CHECK(r.err.find("(100") != std::string::npos);   // the cut says how long the message was
    // bytes that escape to 4 each: cut after escaping, the value still shown
    r = run_kvsim("inspect traces/requests/azure_sample.csv --format \"$(head -c 600 /dev/zero | tr '\\0' '\\200')\"");
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.size() < 1000, r.err.size());
    CHECK(r.err.find("\\x80\\x80") != std::string::npos);
}

// Hostile check, session 32: the replay's title and "outputs in" line, inspect's header and convert's note printed a
// file name's control bytes raw.
TEST_CASE("a trace named with control bytes is shown escaped in replay, inspect and convert output") {
    scratch_dir dir("cli_name_ctrl");
    const std::string t = dir / "t\x1b[31m\r.csv";
    fs::copy_file("traces/requests/azure_sample.csv", t);
    const std::string q = "'" + t + "'";
    for (const auto & r : {run_kvsim("replay " + q + " --model tiny-llama --backend none --no-progress --out '" + (dir / "o\x1b") + "'"),
                           run_kvsim("inspect " + q), run_kvsim("convert " + q + " " + (dir / "m.jsonl") + " --to mooncake")}) {
        CHECK_MESSAGE(r.rc == 0, r.err);
        CHECK(r.out.find('\x1b') == std::string::npos);
        CHECK(r.err.find('\x1b') == std::string::npos);
        CHECK((r.out + r.err).find("t\\x1b[31m\\r.csv") != std::string::npos);
    }
}

// A report standard output cannot take is lost: exit 1 with the reason, as coreutils do (it was exit 0 on a full
// disk or a closed descriptor).
TEST_CASE("a report that standard output cannot take is exit 1 naming why, for kvsim and kvbench") {
    scratch_dir dir("cli_stdout");
    const std::string err = dir / "err";
    auto run = [&](const std::string & tool, const std::string & args, const std::string & redirect) {
        const std::string cmd = std::string(KVSIM_BINARY_DIR) + "/" + tool + " " + args + " " + redirect + " 2>" + err;
        const int st = std::system(cmd.c_str());
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    };
    if (fs::exists("/dev/full")) {
        CHECK(run("kvsim", "inspect traces/requests/azure_sample.csv", ">/dev/full") == 1);
        CHECK_MESSAGE(read_text(err) == "kvsim: error: cannot write standard output: No space left on device\n", read_text(err));
        CHECK(run("kvsim", "--help", ">/dev/full") == 1);
        CHECK(run("kvbench", "--help", ">/dev/full") == 1);
        CHECK(read_text(err).find("kvbench: error: cannot write standard output") != std::string::npos);
    }
    CHECK(run("kvsim", "devices", ">&-") == 1);
    CHECK_MESSAGE(read_text(err).find("kvsim: error: cannot write standard output") != std::string::npos, read_text(err));
    // a file output named - on a closed standard output: the same words and status (it was exit 2, "cannot write
    // /dev/stdout: No such file or directory")
    CHECK(run("kvsim", "replay traces/requests/azure_sample.csv --model tiny-llama --backend none --no-progress --emit-ops -", ">&-") == 1);
    CHECK_MESSAGE(read_text(err) == "kvsim: error: cannot write standard output: Bad file descriptor\n", read_text(err));
    // written whole: exit 0, nothing on standard error
    CHECK(run("kvsim", "devices", ">/dev/null") == 0);
    CHECK(read_text(err).empty());
}

// llama_batch_allocr::init refuses a negative seq id with -1 (the server oracle records such rows);
// the file itself is well-formed.
TEST_CASE("an op trace decode row with a negative seq id replays as llama_decode rc -1") {
    scratch_dir dir("cli_neg_seq");
    const std::string t = write_file(dir, "n.csv", std::string(k_ops_header) + "1,decode,0,4,0,,,\n2,decode,-1,1,4,,,\n3,decode,0;-2,1,,,,\n"
                                                                               "4,decode,0,1,,,,\n");
    const auto r = run_kvsim("replay " + t + " --model tiny-llama -c 256 --dump-cells " + (dir / "d.jsonl") + k_fast);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    std::vector<int> rcs;
    for (const auto & l : lines_of(read_text(dir / "d.jsonl"))) {
        const json j = json::parse(l);
        if (j.value("ev", "") == "state" && j.contains("rc")) rcs.push_back(j["rc"].get<int>());
    }
    CHECK(rcs == std::vector<int>{0, -1, -1, 0});
}

// Issue 15: every sample at one simulated time (tiny steps) made the chart's x ticks loop until
// std::bad_alloc (v += step no longer moved v); degenerate charts must render.
TEST_CASE("regression: four tiny Mooncake requests on two slots render report.html") {
    scratch_dir dir("cli_tiny_chart");
    std::string rows;
    for (int h : {10, 20, 30, 40}) rows += "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": [" + std::to_string(h) + "]}\n";
    const std::string t = write_file(dir, "m.jsonl", rows);
    const auto r = run_kvsim("replay " + t + " --model tiny-llama -c 2048 -np 2 --out " + (dir / "o") + k_fast);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    const std::string html = read_text(dir / "o/report.html");
    CHECK(html.find("</html>") != std::string::npos);
    CHECK(html.size() < (size_t(8) << 20));
    // the RAM prompt cache's totals, flattened into the summary table
    CHECK(html.find("ram_cache.saves") != std::string::npos);
    CHECK(html.find("context_checkpoints.created") != std::string::npos);
}

// A RAM-cache restore places cells without llama_decode: the kernel hooks must still write their
// K/V (and the verify shadow), or --verify reports stale cells (found by a hostile-input pass:
// request 3 restored request 0's 301 cells from slot 1 into slot 0).
TEST_CASE("--verify holds across a RAM-cache restore into another slot") {
    scratch_dir dir("cli_restore_verify");
    const std::string t = write_file(dir, "r.jsonl",
                                     "{\"timestamp\": 0, \"input_length\": 300, \"output_length\": 2, \"hash_ids\": [1]}\n"
                                     "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 50, \"hash_ids\": [2]}\n"
                                     "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 200, \"hash_ids\": [3]}\n"
                                     "{\"timestamp\": 10000, \"input_length\": 350, \"output_length\": 4, \"hash_ids\": [1]}\n");
    for (const char * kvu : {" -kvu", " -no-kvu"}) {
        CAPTURE(kvu);
        const std::string out = dir / (std::string("o") + (kvu[2] == 'k' ? "u" : "n"));
        const auto r = run_kvsim("replay " + t + " --model tiny-llama -c 2048 -np 2" + kvu + " --backend cpu --verify -t 1 -q --no-progress --out " + out);
        REQUIRE_MESSAGE(r.rc == 0, r.err);
        const json s = json::parse(read_text(out + "/summary.json"));
        CHECK(s.at("totals").at("ram_cache").at("restores").get<uint64_t>() == 1);
        CHECK(s.at("bandwidth").at("verify").at("failures").get<uint64_t>() == 0);
        CHECK(s.at("bandwidth").at("verify").at("steps").get<uint64_t>() > 0);
    }
}

TEST_CASE("KVSIM_CPU_ISA naming no level is one usage error before any work; a known level runs") {
    scratch_dir d("cpu_isa_env");
    const std::string out = d / "o";
    const std::string cmd = "replay traces/ops/two_seq_interleave.csv --model tiny-llama -c 256 -np 2 -kvu --backend cpu "
                            "--no-progress -q --out " + out;
    for (const char * bad : {"AVX2", "sclar", "avx512f"}) {
        CAPTURE(bad);
        ::setenv("KVSIM_CPU_ISA", bad, 1);
        const auto r = run_kvsim(cmd);
        CHECK(r.rc == 2);
        CHECK(r.err == "kvsim: error: KVSIM_CPU_ISA='" + std::string(bad) +
                           "' is not a level: scalar, avx2, avx512, neon or neon_dotprod\n");
        CHECK_FALSE(fs::exists(out));
    }
    for (const char * good : {"scalar", "avx512", ""}) {   // avx512 on a CPU without it: ignored, as documented
        CAPTURE(good);
        ::setenv("KVSIM_CPU_ISA", good, 1);
        const auto r = run_kvsim(cmd);
        CHECK_MESSAGE(r.rc == 0, r.err);
    }
    ::unsetenv("KVSIM_CPU_ISA");
}
