// The committed golden oracle traces (tests/golden/*.oracle.jsonl) against what llama.cpp produces now: each
// scenario run again through the live kvoracle (../shared/tools/kvoracle, built when missing). Apart from
// test_golden so that ctest reports it skipped, not passed, where ../shared or python3 is missing.
#include "golden_util.h"
#include "test_skip.h"

#include <string>

using namespace golden;

TEST_CASE("golden: the committed oracle traces are what llama.cpp produces now") {
    const std::string oracle = find_or_build_oracle();
    if (oracle.empty()) {
        KVSIM_SKIP_CASE(std::string("no kvoracle at ") + kOracleWork + " and none could be built from " + kOracleDir);
    }
    if (std::system("python3 -c pass > /dev/null 2>&1") != 0 || !fs::exists(std::string(kOracleDir) + "/csv2script.py")) {
        KVSIM_SKIP_CASE(std::string("python3 or ") + kOracleDir + "/csv2script.py missing");
    }
    temp_dir tmp;
    for (const auto & s : read_manifest()) {
        INFO("scenario " << s.name);
        const fs::path script = tmp.path / (s.name + ".txt");
        const fs::path raw = tmp.path / (s.name + ".jsonl");
        const std::string cmd = "python3 " + quote(std::string(kOracleDir) + "/csv2script.py") + " " +
                                quote(golden_path(s, ".csv")) + " > " + quote(script.string()) +
                                " && LLAMA_KV_CACHE_DEBUG=3 " + quote(oracle) + " -m " +
                                quote(std::string(kOracleWork) + "/models/" + s.model + ".gguf") + " " +
                                s.oracle_flags + " --no-fs-state < " + quote(script.string()) + " > " +
                                quote(raw.string()) + " 2> /dev/null";
        REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "kvoracle failed: " << cmd);
        const trace_events committed = load_events(golden_path(s, ".oracle.jsonl"));
        const trace_events live = load_events(raw.string());
        CHECK(committed.config == live.config);
        const comparison r = compare_traces(committed, live);
        CHECK_MESSAGE(r.failed == 0, r.report);
    }
}
