// Determinism of `kvsim replay`: the same trace and options give byte-identical reports across
// runs and across kernel thread counts, for an op trace and a request trace, with the CPU
// kernels and with bookkeeping only. Timing fields are the only allowed difference:
// summary.json's wall_seconds, bookkeeping_tokens_per_second and the `bandwidth` section.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path k_tmp = fs::path(KVSIM_BINARY_DIR) / "test_determinism_tmp";

std::string read_file(const fs::path & p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// summary.json without the fields that measure wall time.
std::string summary_without_timing(const fs::path & p) {
    nlohmann::json j = nlohmann::json::parse(read_file(p));
    j.erase("wall_seconds");
    j.erase("bookkeeping_tokens_per_second");
    j.erase("bandwidth");
    return j.dump(2);
}

struct workload {
    std::string name;
    std::string trace;   // relative to the repo root (tests run there)
    std::string flags;   // model and context
    std::vector<std::string> reports;   // files compared byte for byte
};

const std::vector<workload> & workloads() {
    static const std::vector<workload> w = {
        // K-shift (seq_add), copies and removals on a unified two-sequence cache
        {"ops", "tests/golden/u_add_shift.csv", "--model tiny-llama -c 256 -np 2 -b 256 -ub 256 -kvu",
         {"occupancy.csv", "dump.jsonl"}},
        // the bundled Azure conversation trace through four server slots with context shift
        {"azure", "traces/azure/AzureLLMInferenceTrace_conv_2023.csv",
         "--model tiny-llama -c 1024 -np 4 --limit 60 --context-shift --arrivals saturate",
         {"occupancy.csv", "requests.csv", "dump.jsonl"}},
    };
    return w;
}

// Runs kvsim replay into k_tmp/<label>; returns the output directory. `extra` = backend/threads.
fs::path run(const workload & w, const std::string & label, const std::string & extra) {
    const fs::path out = k_tmp / (w.name + "-" + label);
    fs::remove_all(out);
    fs::create_directories(out);
    const std::string cmd = std::string("'") + KVSIM_BINARY_DIR + "/kvsim' replay '" + w.trace + "' " + w.flags + " " + extra +
                            " --time-budget 2 --no-progress -q --out '" + out.string() + "' --dump-cells '" +
                            (out / "dump.jsonl").string() + "' > '" + (out / "log.txt").string() + "' 2>&1";
    const int status = std::system(cmd.c_str());
    REQUIRE_MESSAGE(status == 0, "kvsim failed: " << cmd << "\n" << read_file(out / "log.txt"));
    return out;
}

void check_same(const workload & w, const fs::path & a, const fs::path & b) {
    INFO(w.name << ": " << a.filename().string() << " vs " << b.filename().string());
    for (const auto & f : w.reports) {
        INFO(f);
        const std::string x = read_file(a / f);
        CHECK_FALSE(x.empty());
        CHECK(x == read_file(b / f));
    }
    CHECK(summary_without_timing(a / "summary.json") == summary_without_timing(b / "summary.json"));
}

// The counts in the kernel section that do not depend on timing (which ubatches get timed does).
void check_same_kernel_counts(const fs::path & a, const fs::path & b) {
    const auto x = nlohmann::json::parse(read_file(a / "summary.json")).at("bandwidth");
    const auto y = nlohmann::json::parse(read_file(b / "summary.json")).at("bandwidth");
    for (const char * k : {"ubatches_seen", "k_shift_events"}) {
        INFO("bandwidth." << k);
        CHECK(x.at(k) == y.at(k));
    }
}

}  // namespace

TEST_CASE("determinism: repeated runs and thread counts give identical reports") {
    REQUIRE_MESSAGE(fs::exists(fs::path(KVSIM_BINARY_DIR) / "kvsim"), "kvsim is not built in " << KVSIM_BINARY_DIR);
    for (const auto & w : workloads()) {
        const fs::path none1 = run(w, "none-1", "--backend none");
        const fs::path none2 = run(w, "none-2", "--backend none");
        check_same(w, none1, none2);
        const fs::path cpu_t1a = run(w, "cpu-t1a", "--backend cpu --threads 1");
        const fs::path cpu_t1b = run(w, "cpu-t1b", "--backend cpu --threads 1");
        const fs::path cpu_t2 = run(w, "cpu-t2", "--backend cpu --threads 2");
        check_same(w, cpu_t1a, cpu_t1b);
        check_same(w, cpu_t1a, cpu_t2);
        check_same_kernel_counts(cpu_t1a, cpu_t1b);
        check_same_kernel_counts(cpu_t1a, cpu_t2);
        // the kernels only observe the cache: the simulation itself must not depend on them
        for (const auto & f : w.reports) {
            INFO(w.name << ": " << f << " with --backend none vs --backend cpu");
            CHECK(read_file(none1 / f) == read_file(cpu_t1a / f));
        }
    }
    fs::remove_all(k_tmp);
}
