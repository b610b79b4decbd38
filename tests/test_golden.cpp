// Golden traces: kvsim's cache, replayed op by op, against the real llama.cpp (kvoracle).
//
// tests/golden/manifest.tsv lists the scenarios (name, model, kvoracle flags, kvsim flags);
// NAME.csv is the op trace, NAME.oracle.jsonl what llama.cpp de3ff815 did with it
// (scripts/make-golden.sh regenerates them; docs/golden.md describes each scenario).
#include <doctest/doctest.h>

#include "test_skip.h"
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char * const kGoldenDir = "tests/golden";
const char * const kOracleDir = "../shared/tools/kvoracle";
const char * const kOracleWork = "/tmp/oracle-work";

struct scenario {
    std::string name, model, oracle_flags, kvsim_flags;
};

std::vector<scenario> read_manifest() {
    std::ifstream in(std::string(kGoldenDir) + "/manifest.tsv");
    REQUIRE_MESSAGE(in.good(), "cannot read tests/golden/manifest.tsv (tests run from the repo root)");
    std::vector<scenario> out;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> f;
        std::stringstream ss(line);
        std::string x;
        while (std::getline(ss, x, '\t')) f.push_back(x);
        REQUIRE_MESSAGE(f.size() == 4, "manifest line without 4 tab-separated fields: " << line);
        out.push_back({f[0], f[1], f[2], f[3]});
    }
    return out;
}

// The 'apply' and 'state' events of a kvoracle-format JSON-lines file, in order.
struct trace_events {
    std::vector<json> apply, state;
    json config;  // null when absent (kvsim does not have to write one)
};

trace_events load_events(const std::string & path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), "cannot read " << path);
    trace_events t;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] != '{') continue;
        json e = json::parse(line);
        const std::string ev = e.value("ev", "");
        if (ev == "apply") t.apply.push_back(std::move(e));
        else if (ev == "state") t.state.push_back(std::move(e));
        else if (ev == "config") t.config = std::move(e);
    }
    return t;
}

// One stream as compared: [stream, used, cells], every cell [idx, pos, sorted seq ids] plus the
// pending shift only when it is non-zero (the oracle omits a zero shift).
json stream_key(const json & s) {
    json cells = json::array();
    for (const auto & c : s.at("cells")) {
        std::vector<int> seqs = c.at(2).get<std::vector<int>>();
        std::sort(seqs.begin(), seqs.end());
        json k = json::array({c.at(0), c.at(1), seqs});
        if (c.size() > 3 && c.at(3).get<long>() != 0) k.push_back(c.at(3));
        cells.push_back(std::move(k));
    }
    return json::array({s.at("stream"), s.at("used"), std::move(cells)});
}

json streams_key(const json & cache) {
    json out = json::array();
    for (const auto & s : cache.at("streams")) out.push_back(stream_key(s));
    return out;
}

json apply_key(const json & e) {
    return json::array({e.at("cache"), e.at("placed"), streams_key(e.at("after"))});
}

// rc is compared only when the oracle reports one (decodes); seqs keyed by integer seq id.
json state_key(const json & e, bool with_rc) {
    std::map<int, json> seqs;
    if (e.contains("seqs"))
        for (const auto & [k, v] : e.at("seqs").items()) seqs[std::stoi(k)] = v;
    json jseqs = json::array();
    for (const auto & [k, v] : seqs) jseqs.push_back(json::array({k, v}));
    json caches = json::array();
    if (e.contains("caches"))
        for (const auto & c : e.at("caches")) caches.push_back(json::array({c.at("cache"), streams_key(c)}));
    return json::array({with_rc ? e.value("rc", json()) : json(), std::move(jseqs), std::move(caches)});
}

struct comparison {
    int passed = 0, failed = 0;
    std::string report;  // the first difference of each event kind, empty when equal
};

std::string clip(const json & j, size_t n = 600) {
    std::string s = j.dump();
    return s.size() > n ? s.substr(0, n) + "..." : s;
}

// Compares a kvsim dump with the oracle exactly as tools/kvoracle/compare.py does: same number of
// apply and state events, and each event's key equal; reports the first difference per kind.
comparison compare_traces(const trace_events & oracle, const trace_events & other) {
    comparison r;
    auto run = [&](const char * kind, const std::vector<json> & a, const std::vector<json> & b, auto key) {
        if (a.size() != b.size()) {
            r.failed++;
            r.report += std::string(kind) + ": " + std::to_string(a.size()) + " events in llama.cpp, " +
                        std::to_string(b.size()) + " in kvsim\n";
        }
        for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
            const bool with_rc = a[i].contains("rc");
            const json ka = key(a[i], with_rc), kb = key(b[i], with_rc);
            if (ka == kb) {
                r.passed++;
                continue;
            }
            r.failed++;
            r.report += std::string(kind) + " event #" + std::to_string(i) + " differs (script line " +
                        std::to_string(a[i].value("line", -1)) +
                        (a[i].contains("op") ? ", op '" + a[i]["op"].get<std::string>() + "'" : std::string()) +
                        ")\n  llama.cpp: " + clip(ka) + "\n  kvsim:     " + clip(kb) + "\n";
            break;
        }
    };
    run("apply", oracle.apply, other.apply, [](const json & e, bool) { return apply_key(e); });
    run("state", oracle.state, other.state, state_key);
    return r;
}

std::string quote(const std::string & s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string tmpl = "/tmp/kvsim-golden-XXXXXX";
        REQUIRE(mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::string golden_path(const scenario & s, const char * suffix) {
    return std::string(kGoldenDir) + "/" + s.name + suffix;
}

std::string read_text(const fs::path & p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The kvoracle binary, built (at most 120 s) when ../shared is there; empty when unavailable.
std::string find_or_build_oracle() {
    const std::string bin = std::string(kOracleWork) + "/kvoracle";
    if (fs::exists(bin)) return bin;
    const std::string build = std::string(kOracleDir) + "/build.sh";
    if (!fs::exists(build)) return "";
    const std::string cmd = "WORK=" + quote(kOracleWork) + " timeout 120 " + quote(build) + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return "";
    return fs::exists(bin) ? bin : "";
}

}  // namespace

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
