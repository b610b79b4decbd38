// Golden traces: kvsim's cache, replayed op by op, against the real llama.cpp (kvoracle).
//
// tests/golden/manifest.tsv lists the scenarios (name, model, kvoracle flags, kvsim flags);
// NAME.csv is the op trace, NAME.oracle.jsonl what llama.cpp de3ff815 did with it
// (scripts/make-golden.sh regenerates them; docs/golden.md describes each scenario).
#include "golden_util.h"

#include <string>

using namespace golden;

TEST_CASE("golden comparator: equal traces pass, altered traces fail") {
    const auto scenarios = read_manifest();
    REQUIRE(scenarios.size() >= 24);
    for (const auto & s : scenarios) {
        INFO("scenario " << s.name);
        const trace_events g = load_events(golden_path(s, ".oracle.jsonl"));
        REQUIRE(!g.state.empty());
        REQUIRE(!g.apply.empty());

        const comparison same = compare_traces(g, g);
        CHECK_MESSAGE(same.failed == 0, same.report);
        CHECK(same.passed == static_cast<int>(g.apply.size() + g.state.size()));

        // kvsim may list seq ids in any order, write a zero shift, and give rc on non-decode ops
        trace_events relaxed = g;
        for (auto & e : relaxed.state) {
            if (!e.contains("rc")) e["rc"] = 0;
            for (auto & c : e["caches"])
                for (auto & st : c["streams"])
                    for (auto & cell : st["cells"]) {
                        auto & seqs = cell[2];
                        std::reverse(seqs.begin(), seqs.end());
                        if (cell.size() == 3) cell.push_back(0);
                    }
        }
        const comparison rel = compare_traces(g, relaxed);
        CHECK_MESSAGE(rel.failed == 0, rel.report);

        trace_events fewer = g;
        fewer.apply.pop_back();
        CHECK(compare_traces(g, fewer).failed == 1);

        trace_events moved = g;
        json * cell = nullptr;
        for (auto & c : moved.state.back()["caches"])
            for (auto & st : c["streams"])
                if (!st["cells"].empty()) cell = &st["cells"].back();
        if (cell) {
            (*cell)[1] = (*cell)[1].get<int>() + 1;
            const comparison r = compare_traces(g, moved);
            CHECK(r.failed == 1);
            CHECK(r.report.find("state event #" + std::to_string(g.state.size() - 1)) != std::string::npos);
        }

        trace_events placed = g;
        placed.apply.front()["placed"]["idxs"][0][0] = 100000;
        CHECK(compare_traces(g, placed).failed == 1);

        trace_events rc = g;
        for (auto & e : rc.state)
            if (e.contains("rc")) {
                e["rc"] = e["rc"].get<int>() == 0 ? 1 : 0;
                break;
            }
        CHECK(compare_traces(g, rc).failed == 1);
    }
}

TEST_CASE("golden: kvsim replay matches llama.cpp cell by cell") {
    const std::string kvsim = std::string(KVSIM_BINARY_DIR) + "/kvsim";
    REQUIRE_MESSAGE(fs::exists(kvsim), "kvsim is not built at " << kvsim);
    temp_dir tmp;
    int n_pass = 0;
    const auto scenarios = read_manifest();
    for (const auto & s : scenarios) {
        INFO("scenario " << s.name << " (kvsim replay " << golden_path(s, ".csv") << " --model " << s.model << " "
                         << s.kvsim_flags << ")");
        const fs::path dump = tmp.path / (s.name + ".kvsim.jsonl");
        const fs::path log = tmp.path / (s.name + ".log");
        const std::string cmd = quote(kvsim) + " replay " + quote(golden_path(s, ".csv")) + " --model " + quote(s.model) +
                                " " + s.kvsim_flags + " --dump-cells " + quote(dump.string()) + " > " +
                                quote(log.string()) + " 2>&1";
        const int status = std::system(cmd.c_str());
        if (status != 0 || !fs::exists(dump)) {
            FAIL_CHECK("kvsim failed (status " << status << "):\n" << read_text(log).substr(0, 2000));
            continue;
        }
        const comparison r = compare_traces(load_events(golden_path(s, ".oracle.jsonl")), load_events(dump.string()));
        CHECK_MESSAGE(r.failed == 0, r.passed << " passed, " << r.failed << " failed\n" << r.report);
        n_pass += r.failed == 0;
    }
    MESSAGE(n_pass << " of " << scenarios.size() << " scenarios match llama.cpp");
}
