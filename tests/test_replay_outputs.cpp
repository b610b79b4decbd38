// replay_outputs (lib/replay/replay_outputs.h): the output files of one replay as one transaction,
// held to its contract directly (the CLI tests see it only through whole runs).
#include "replay/replay_outputs.h"

#include "cli_test_util.h"
#include "core/errors.h"

#include <doctest/doctest.h>

using namespace kvsim;
using kvsim_test::read_text;
using kvsim_test::scratch_dir;
namespace fs = std::filesystem;

namespace {
void write_text(const std::string & path, const std::string & text) {
    std::ofstream(path, std::ios::binary) << text;
}

size_t n_entries(const fs::path & dir) {
    size_t n = 0;
    for ([[maybe_unused]] const auto & e : fs::directory_iterator(dir)) ++n;
    return n;
}
}  // namespace

TEST_CASE("replay_outputs: commit renames every file into place, then removes only stale kvsim files") {
    scratch_dir d("outputs_commit");
    replay_options o;
    o.out_dir = d / "out";
    o.dump_cells = d / "dump.jsonl";
    o.steps_csv = true;
    {   // a timed request-trace run with --steps-csv: every file of --out
        replay_outputs out(o, true, true);
        REQUIRE(out.requests);
        REQUIRE(out.steps);
        REQUIRE(out.bandwidth);
        CHECK_FALSE(out.emit);
        CHECK_FALSE(out.timeline);
        out.summary->out() << R"({"tool": "kvsim 0.1.0"})";
        out.dump->out() << "dump";
        CHECK_FALSE(fs::exists(o.out_dir + "/summary.json"));   // nothing in place before commit
        out.commit();
    }
    for (const char * f : k_out_files) CHECK(fs::is_regular_file(o.out_dir + "/" + f));
    CHECK(read_text(o.out_dir + "/summary.json") == R"({"tool": "kvsim 0.1.0"})");
    CHECK(read_text(o.dump_cells) == "dump");

    write_text(o.out_dir + "/notes.txt", "mine");             // not a kvsim name: never touched
    fs::remove(o.out_dir + "/bandwidth.csv");
    fs::create_symlink("notes.txt", o.out_dir + "/bandwidth.csv");   // a link with a kvsim name: removed, not its target
    o.dump_cells.clear();
    o.steps_csv = false;
    {   // an untimed op-trace run
        replay_outputs out(o, false, false);
        CHECK_FALSE(out.requests);
        CHECK_FALSE(out.steps);
        CHECK_FALSE(out.bandwidth);
        out.summary->out() << "second";
        out.commit();
    }
    CHECK(read_text(o.out_dir + "/summary.json") == "second");
    CHECK_FALSE(fs::exists(o.out_dir + "/requests.csv"));
    CHECK_FALSE(fs::exists(o.out_dir + "/steps.csv"));
    CHECK_FALSE(fs::exists(fs::symlink_status(o.out_dir + "/bandwidth.csv")));
    CHECK(read_text(o.out_dir + "/notes.txt") == "mine");
}

TEST_CASE("replay_outputs: steps.csv only with steps_csv; a request-trace run without it removes an earlier run's") {
    scratch_dir d("outputs_steps");
    replay_options o;
    o.out_dir = d / "out";
    o.steps_csv = true;
    {
        replay_outputs out(o, true, false);
        REQUIRE(out.steps);
        out.summary->out() << R"({"tool": "kvsim 0.1.0"})";
        out.steps->out() << "step\n";
        out.commit();
    }
    CHECK(read_text(o.out_dir + "/steps.csv") == "step\n");
    o.steps_csv = false;
    {
        replay_outputs out(o, true, false);
        CHECK(out.requests);
        CHECK_FALSE(out.steps);
        out.summary->out() << R"({"tool": "kvsim 0.1.0"})";
        out.commit();
    }
    CHECK_FALSE(fs::exists(o.out_dir + "/steps.csv"));   // one run per directory: this run wrote none
    CHECK(fs::exists(o.out_dir + "/requests.csv"));
}

// Found by a hostile-input pass: `--out proj` deleted the user's own proj/requests.csv and steps.csv.
TEST_CASE("replay_outputs: files with kvsim's names are removed only from a directory an earlier kvsim run wrote") {
    scratch_dir d("outputs_user_dir");
    replay_options o;
    o.out_dir = d / "proj";
    fs::create_directories(o.out_dir);
    write_text(o.out_dir + "/requests.csv", "the user's");
    write_text(o.out_dir + "/steps.csv", "the user's");
    write_text(o.out_dir + "/summary.json", R"({"tool": "something else"})");
    CHECK_FALSE(holds_kvsim_summary(o.out_dir));
    {   // an op-trace run writes no requests.csv or steps.csv
        replay_outputs out(o, false, false);
        out.summary->out() << R"({"tool": "kvsim 0.1.0"})";
        out.commit();
    }
    CHECK(read_text(o.out_dir + "/requests.csv") == "the user's");
    CHECK(read_text(o.out_dir + "/steps.csv") == "the user's");
    CHECK(holds_kvsim_summary(o.out_dir));   // from now on the directory holds a kvsim run
    {
        replay_outputs out(o, false, false);
        out.summary->out() << R"({"tool": "kvsim 0.1.0"})";
        out.commit();
    }
    CHECK_FALSE(fs::exists(o.out_dir + "/requests.csv"));
    CHECK_FALSE(fs::exists(o.out_dir + "/steps.csv"));
    write_text(o.out_dir + "/summary.json", "[[[[");   // not JSON
    CHECK_FALSE(holds_kvsim_summary(o.out_dir));
    // a second hostile-input pass: another tool's name that starts with kvsim, and a link to a real run's
    // summary.json (which made a fresh directory look like a run's) are no mark
    write_text(o.out_dir + "/summary.json", R"({"tool": "kvsimXYZ"})");
    CHECK_FALSE(holds_kvsim_summary(o.out_dir));
    fs::create_directories(d / "run");
    write_text(d / "run/summary.json", R"({"tool": "kvsim 0.1.0"})");
    CHECK(holds_kvsim_summary(d / "run"));
    fs::remove(o.out_dir + "/summary.json");
    fs::create_symlink(d / "run/summary.json", o.out_dir + "/summary.json");
    CHECK_FALSE(holds_kvsim_summary(o.out_dir));
}

TEST_CASE("replay_outputs: a symbolic-link loop on an output path is a usage error (exit 2), not a filesystem_error") {
    scratch_dir d("outputs_loop");
    fs::create_symlink(d / "b", d / "a");
    fs::create_symlink(d / "a", d / "b");
    replay_options o;
    o.out_dir = d / "a";
    CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("symbolic links"), usage_error);
    o.out_dir.clear();
    o.dump_cells = d / "a";
    CHECK_THROWS_AS(check_paths(o, true), usage_error);
}

TEST_CASE("replay_outputs: without commit the temporaries and the created directories go, the previous files stay") {
    scratch_dir d("outputs_abort");
    replay_options o;
    o.out_dir = d / "a/b/c";   // three directories this run creates
    {
        replay_outputs out(o, true, false);
        CHECK(fs::is_directory(o.out_dir));
        out.summary->out() << "never";
    }
    CHECK_FALSE(fs::exists(d / "a"));
    CHECK(n_entries(d.path) == 0);

    fs::create_directories(o.out_dir);
    write_text(o.out_dir + "/summary.json", "previous");
    {
        replay_outputs out(o, false, false);
        out.summary->out() << "never";
    }
    CHECK(read_text(o.out_dir + "/summary.json") == "previous");
    CHECK(n_entries(o.out_dir) == 1);   // no temporary left beside it
}

TEST_CASE("replay_outputs: bad paths are refused before anything is created") {
    scratch_dir d("outputs_paths");
    replay_options o;
    o.dump_cells = d / "x";
    o.trace_json = (d.path / "sub" / ".." / "x").string();
    CHECK_THROWS_AS(replay_outputs(o, true, false), usage_error);   // one file by two names
    o.trace_json = o.dump_cells;
    CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("is given twice"), usage_error);
    o.trace_json.clear();

    o.emit_ops = d / "ops.csv";
    CHECK_THROWS_WITH_AS(check_paths(o, false), doctest::Contains("--emit-ops applies to request traces"), usage_error);
    CHECK_NOTHROW(check_paths(o, true));
    o.emit_ops.clear();

    o.steps_csv = true;   // steps.csv goes into --out: there is none
    CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("--steps-csv writes steps.csv into the --out directory"),
                         usage_error);
    o.steps_csv = false;

    write_text(d / "file", "");
    o.out_dir = d / "file";
    CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("exists and is not a directory"), usage_error);
    o.out_dir = d / "new";
    o.dump_cells = d.path.string();
    CHECK_THROWS_WITH_AS(replay_outputs(o, true, false), doctest::Contains("is a directory"), usage_error);
    CHECK_FALSE(fs::exists(d / "new"));   // refused before --out was created
}

TEST_CASE("replay_outputs: an output onto the trace itself is refused, by any name (it would replace the input)") {
    scratch_dir d("outputs_onto_trace");
    write_text(d / "ops.csv", "batch,op,seq,n_tokens,p0,p1,delta,seq_dst\n1,decode,0,1,,,,\n");
    fs::create_symlink("ops.csv", d / "link.csv");
    fs::create_hard_link(d / "ops.csv", d / "hard.csv");
    fs::create_directory(d / "sub");
    replay_options o;
    o.trace = d / "ops.csv";
    for (const std::string & p : {d / "ops.csv", (d.path / "sub" / ".." / "ops.csv").string(), d / "link.csv", d / "hard.csv"}) {
        CAPTURE(p);
        o.dump_cells = p;
        CHECK_THROWS_WITH_AS(replay_outputs(o, true, false), doctest::Contains("is the trace"), usage_error);
        o.dump_cells.clear();
        o.trace_json = p;
        CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("is the trace"), usage_error);
        o.trace_json.clear();
        o.emit_ops = p;
        CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("is the trace"), usage_error);
        o.emit_ops.clear();
    }
    o.trace = d / "summary.json";   // a trace with a kvsim name inside --out
    write_text(o.trace, "{}\n");
    o.out_dir = d.path.string();
    CHECK_THROWS_WITH_AS(check_paths(o, true), doctest::Contains("is the trace"), usage_error);
    CHECK(read_text(d / "ops.csv").rfind("batch,op", 0) == 0);
    CHECK(read_text(o.trace) == "{}\n");
}

TEST_CASE("replay_outputs: --out as a dangling symbolic link is a usage error, nothing created") {
    scratch_dir d("outputs_dangling");
    fs::create_symlink("nowhere", d / "L");
    replay_options o;
    o.out_dir = d / "L";
    CHECK_THROWS_WITH_AS(replay_outputs(o, true, false), doctest::Contains("symbolic link to a directory that does not exist"),
                         usage_error);
    CHECK_FALSE(fs::exists(d / "nowhere"));
    CHECK(n_entries(d.path) == 1);
}

TEST_CASE("replay_outputs: an --out that cannot be created is a usage error naming it, nothing left behind") {
    scratch_dir d("outputs_uncreatable");
    write_text(d / "f", "x");
    replay_options o;
    o.out_dir = d / "f/sub";   // a regular file on the way: "Not a directory"
    CHECK_THROWS_WITH_AS(replay_outputs(o, true, false), doctest::Contains("/f/sub: cannot create the directory"), usage_error);
    CHECK(n_entries(d.path) == 1);
    CHECK(read_text(d / "f") == "x");
}
