// Shared by the golden tests (test_golden.cpp: kvsim against the committed oracle traces; test_golden_oracle.cpp:
// the committed traces against the live llama.cpp, a test of its own so that ctest reports it skipped where
// ../shared is missing): the manifest, the trace loader and the comparator.
#pragma once

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace golden {

namespace fs = std::filesystem;
using nlohmann::json;


inline const char * const kGoldenDir = "tests/golden";
inline const char * const kOracleDir = "../shared/tools/kvoracle";
inline const char * const kOracleWork = "/tmp/oracle-work";

struct scenario {
    std::string name, model, oracle_flags, kvsim_flags;
};

inline std::vector<scenario> read_manifest() {
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

inline trace_events load_events(const std::string & path) {
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
inline json stream_key(const json & s) {
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

inline json streams_key(const json & cache) {
    json out = json::array();
    for (const auto & s : cache.at("streams")) out.push_back(stream_key(s));
    return out;
}

inline json apply_key(const json & e) {
    return json::array({e.at("cache"), e.at("placed"), streams_key(e.at("after"))});
}

// rc is compared only when the oracle reports one (decodes); seqs keyed by integer seq id.
inline json state_key(const json & e, bool with_rc) {
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

inline std::string clip(const json & j, size_t n = 600) {
    std::string s = j.dump();
    return s.size() > n ? s.substr(0, n) + "..." : s;
}

// Compares a kvsim dump with the oracle exactly as tools/kvoracle/compare.py does: same number of
// apply and state events, and each event's key equal; reports the first difference per kind.
inline comparison compare_traces(const trace_events & oracle, const trace_events & other) {
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

inline std::string quote(const std::string & s) {
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

inline std::string golden_path(const scenario & s, const char * suffix) {
    return std::string(kGoldenDir) + "/" + s.name + suffix;
}

inline std::string read_text(const fs::path & p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The kvoracle binary, built (at most 120 s) when ../shared is there; empty when unavailable.
inline std::string find_or_build_oracle() {
    const std::string bin = std::string(kOracleWork) + "/kvoracle";
    if (fs::exists(bin)) return bin;
    const std::string build = std::string(kOracleDir) + "/build.sh";
    if (!fs::exists(build)) return "";
    const std::string cmd = "WORK=" + quote(kOracleWork) + " timeout 120 " + quote(build) + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return "";
    return fs::exists(bin) ? bin : "";
}

}  // namespace golden
