// NVTX ranges without Nsight: builds the injection library in tests/nvtx_inject/ with the system compiler, runs a
// small op-trace replay with a context shift with NVTX_INJECTION64_PATH pointing at it, and checks the recorded
// range names, domain, balance, payloads and the nesting docs/profiling.md documents (step > decode > prepare >
// find_slot, step > decode > memory_update > k_shift, step > decode > kq_mask / attention, report outermost).
// Skipped (tests/test_skip.h) when NVTX3 headers, a C++ compiler or the kvsim binary are missing.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "test_skip.h"
#include "util/nvtx.h"

#if defined(KVSIM_HAVE_CUDA)
#include "cuda_backend.h"
#endif

namespace fs = std::filesystem;

#if !defined(KVSIM_HAVE_NVTX)

TEST_CASE("NVTX ranges") { KVSIM_SKIP_CASE("NVTX3 headers not found at build time: ranges are no-ops, nothing to test"); }

#else

namespace {

// Directory holding nvtx3/nvToolsExt.h for compiling the injection library (KVSIM_NVTX_INCLUDE overrides).
std::string nvtx_include_dir() {
    std::vector<std::string> dirs;
    if (const char * e = std::getenv("KVSIM_NVTX_INCLUDE")) dirs.push_back(e);
    dirs.insert(dirs.end(), {"/usr/local/cuda/include", "/usr/local/cuda/targets/x86_64-linux/include", "/usr/include"});
    for (const auto & d : dirs) {
        if (fs::exists(fs::path(d) / "nvtx3" / "nvToolsExt.h")) return d;
    }
    return {};
}

struct range_event {
    std::string domain, name;
    long long payload = 0;
    std::vector<std::string> ancestors;  // outermost first
};

// Parse the injection log into ranges with their ancestor chains (per thread); sets balanced = every push popped.
std::vector<range_event> parse_log(const fs::path & log, bool & balanced) {
    std::ifstream in(log);
    std::map<std::string, std::vector<std::string>> stacks;
    std::vector<range_event> out;
    std::string line;
    balanced = true;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        std::string kind, thread, domain;
        ls >> kind >> thread >> domain;
        auto & st = stacks[thread];
        if (kind == "push") {
            range_event ev;
            ev.domain = domain;
            ls >> ev.name >> ev.payload;
            ev.ancestors = st;
            st.push_back(ev.name);
            out.push_back(ev);
        } else if (kind == "pop") {
            if (st.empty()) balanced = false;
            else st.pop_back();
        }
    }
    for (const auto & [t, st] : stacks) balanced &= st.empty();
    return out;
}

bool has_chain(const std::vector<range_event> & evs, const std::vector<std::string> & chain) {
    for (const auto & e : evs) {
        if (e.name != chain.back() || e.ancestors.size() < chain.size() - 1) continue;
        const size_t off = e.ancestors.size() - (chain.size() - 1);
        bool ok = true;
        for (size_t i = 0; i + 1 < chain.size(); ++i) ok &= e.ancestors[off + i] == chain[i];
        if (ok) return true;
    }
    return false;
}

// What one replay under the injection library recorded.
struct recorded {
    std::vector<range_event> events;
    bool balanced = false;
};

// Runs `kvsim replay ARGS --out <tmp>` with NVTX_INJECTION64_PATH set (the test fails on a nonzero exit) and returns
// the recorded ranges; sets skipped with the reason when the library cannot be built or kvsim is missing.
recorded replay_under_injection(const std::string & args, std::string & skipped) {
    recorded r;
    const std::string inc = nvtx_include_dir();
    const fs::path kvsim_bin = fs::path(KVSIM_BINARY_DIR) / "kvsim";
    if (inc.empty()) {
        skipped = "nvtx3/nvToolsExt.h not found (set KVSIM_NVTX_INCLUDE)";
    } else if (!fs::exists(kvsim_bin)) {
        skipped = "kvsim binary not built at " + kvsim_bin.string();
    } else if (std::system("command -v c++ > /dev/null 2>&1") != 0) {
        skipped = "no system C++ compiler (c++) to build the NVTX injection library";
    }
    if (!skipped.empty()) return r;
    static int n = 0;
    const fs::path dir = fs::temp_directory_path() / ("kvsim_nvtx_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::create_directories(dir);
    const fs::path so = dir / "libkvsim_nvtx_inject.so", log = dir / "nvtx.log", out = dir / "replay.out";
    const std::string src = std::string(KVSIM_SOURCE_DIR) + "/tests/nvtx_inject/nvtx_inject.cpp";
    const std::string build = "c++ -std=c++17 -O1 -shared -fPIC -I'" + inc + "' '" + src + "' -o '" + so.string() + "' -ldl";
    REQUIRE(std::system(build.c_str()) == 0);
    const std::string run = "NVTX_INJECTION64_PATH='" + so.string() + "' KVSIM_NVTX_LOG='" + log.string() + "' '" +
                            kvsim_bin.string() + "' replay " + args + " --no-progress --out '" + (dir / "out").string() +
                            "' > '" + out.string() + "' 2>&1";
    const int rc = std::system(run.c_str());
    std::ifstream ro(out);
    const std::string replay_out((std::istreambuf_iterator<char>(ro)), std::istreambuf_iterator<char>());
    INFO("replay output: " << replay_out);
    REQUIRE(rc == 0);
    REQUIRE(fs::exists(log));
    r.events = parse_log(log, r.balanced);
    fs::remove_all(dir);
    return r;
}

// The names and nesting docs/profiling.md documents, for a replay with a context shift.
void check_documented_ranges(const recorded & r) {
    CHECK(r.balanced);
    REQUIRE(!r.events.empty());
    std::set<std::string> names;
    for (const auto & e : r.events) {
        names.insert(e.name);
        CHECK(e.domain == "kvsim");
    }
    for (const std::string n : {"step", "decode", "memory_update", "prepare", "find_slot", "apply_ubatch", "kq_mask", "attention",
                                "k_shift", "report"}) {
        INFO("range " << n);
        CHECK(names.count(n) == 1);
    }
    CHECK(has_chain(r.events, {"step", "decode", "prepare", "find_slot"}));
    CHECK(has_chain(r.events, {"step", "decode", "apply_ubatch"}));
    CHECK(has_chain(r.events, {"step", "decode", "memory_update", "k_shift"}));
    CHECK(has_chain(r.events, {"step", "decode", "kq_mask"}));
    CHECK(has_chain(r.events, {"step", "decode", "attention"}));
    for (const auto & e : r.events) {
        INFO("range " << e.name << " payload " << e.payload);
        if (e.name == "step" || e.name == "report") CHECK(e.ancestors.empty());   // outermost
        if (e.name == "decode") CHECK(e.payload > 0);                               // n_tokens of the batch
        if (e.name == "kq_mask" || e.name == "attention") CHECK(e.payload > 0);     // n_kv
        if (e.name == "k_shift") CHECK(e.payload > 0);                              // cells shifted (every cell)
    }
    std::vector<long long> steps;
    for (const auto & e : r.events) {
        if (e.name == "step") steps.push_back(e.payload);
    }
    REQUIRE(!steps.empty());
    for (size_t i = 0; i < steps.size(); ++i) CHECK(steps[i] == (long long) i + 1);   // step numbers 1, 2, ...
}

}  // namespace

TEST_CASE("a replay with a context shift emits every documented NVTX range, nested as documented") {
    std::string skipped;
    const recorded r = replay_under_injection("traces/ops/context_shift.csv --model tiny-llama -c 256 -np 1 --backend cpu", skipped);
    if (!skipped.empty()) KVSIM_SKIP_CASE(skipped);
    check_documented_ranges(r);
}

// The GPU check (scripts/gpu-check.sh) runs this on a GPU host; elsewhere it is skipped.
TEST_CASE("the same ranges from a CUDA replay") {
#if !defined(KVSIM_HAVE_CUDA)
    KVSIM_SKIP_CASE("no CUDA device: kvsim was built without the CUDA backend");
#else
    std::string why;
    if (!kvsim::cuda_device_available(&why)) KVSIM_SKIP_CASE(why);
    std::string skipped;
    // head size 128: the CUDA kernels take 64/128/256 (tiny-llama's is 32)
    const recorded r =
        replay_under_injection("traces/ops/context_shift.csv --model llama-3-8b -c 4096 -np 1 --backend cuda", skipped);
    if (!skipped.empty()) KVSIM_SKIP_CASE(skipped);
    check_documented_ranges(r);
#endif
}

#endif
