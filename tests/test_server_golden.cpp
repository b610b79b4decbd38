// kvsim's scheduler against the real llama-server, op for op. Every tests/server_golden/*.scn was
// recorded from llama-server (llama.cpp de3ff815, CPU) by ../shared/tools/server-oracle/record.sh
// (two identical runs each; `record.sh tests/server_golden` re-records, see
// tests/server_golden/README.md). For each scenario this runs `kvsim replay TRACE <kvsim flags>
// --emit-ops` and compares its op trace with expected/NAME.ops.csv after the oracle's
// canonicalisation (compare.py: decode calls renumbered, consecutive rows of a call with the same
// sequences and contiguous positions merged, open range ends written -1), then each request's
// outcome with the client's view (expected/NAME.results.jsonl: slot, cached prompt tokens, tokens
// generated, truncated, error text).
#include "cli_test_util.h"

#include <doctest/doctest.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

using namespace kvsim_test;

namespace {

const fs::path k_dir = fs::path(KVSIM_SOURCE_DIR) / "tests" / "server_golden";

std::map<std::string, std::string> read_scn(const fs::path & p) {
    std::map<std::string, std::string> d;
    std::ifstream in(p);
    std::string l;
    while (std::getline(in, l)) {
        if (l.empty() || l[0] == '#') continue;
        const auto c = l.find(':');
        if (c == std::string::npos) continue;
        std::string v = l.substr(c + 1);
        v.erase(0, v.find_first_not_of(" \t"));
        d[l.substr(0, c)] = v;
    }
    return d;
}

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> v;
    std::string cur;
    std::istringstream is(s);
    while (std::getline(is, cur, sep)) v.push_back(cur);
    if (!s.empty() && s.back() == sep) v.emplace_back();
    return v;
}

std::string norm_range(const std::string & v) {
    if (v.empty() || std::stol(v) < 0) return "-1";
    return std::to_string(std::stol(v));
}

struct canon_row {
    std::string op, seqs, a, b, c;   // the fields that identify the op
    long call = 0;
    int n = 0, p0 = -1;
    int line = 0;
    std::string text;
    std::string key() const {
        if (op == "decode") return "decode " + std::to_string(call) + " " + seqs + " " + std::to_string(n) + "@" + std::to_string(p0);
        return op + " " + seqs + " " + a + " " + b + " " + c;
    }
};

// compare.py's read_ops.
std::vector<canon_row> read_ops(const fs::path & path) {
    std::ifstream in(path);
    std::string l;
    std::getline(in, l);
    REQUIRE_MESSAGE(l == "batch,op,seq,n_tokens,p0,p1,delta,seq_dst", path.string(), ": not an op trace");
    std::vector<canon_row> out;
    long call = 0;
    std::string prev_label;
    bool prev_decode = false;
    for (int no = 2; std::getline(in, l); ++no) {
        if (l.find_first_not_of(" \r") == std::string::npos) continue;
        const auto f = split(l, ',');
        REQUIRE_MESSAGE(f.size() == 8, path.string(), " line ", no);
        canon_row r;
        r.op = f[1];
        r.line = no;
        r.text = l;
        if (r.op == "decode") {
            if (!(prev_decode && f[0] == prev_label)) ++call;
            prev_decode = true;
            prev_label = f[0];
            r.call = call;
            r.seqs = f[2];
            r.n = std::stoi(f[3]);
            r.p0 = f[4].empty() ? -1 : std::stoi(f[4]);
            if (!out.empty()) {
                canon_row & last = out.back();
                if (last.op == "decode" && last.call == call && last.seqs == r.seqs && r.p0 >= 0 && last.p0 >= 0 &&
                    last.p0 + last.n == r.p0) {
                    last.n += r.n;
                    last.text += " + " + l;
                    continue;
                }
            }
            out.push_back(r);
            continue;
        }
        prev_decode = false;
        if (r.op == "rm") {
            r.seqs = f[2].empty() ? "-1" : norm_range(f[2]);
            r.a = norm_range(f[4]);
            r.b = norm_range(f[5]);
        } else if (r.op == "cp") {
            r.seqs = f[2] + ">" + f[7];
            r.a = norm_range(f[4]);
            r.b = norm_range(f[5]);
        } else if (r.op == "add" || r.op == "div") {
            r.seqs = f[2];
            r.a = norm_range(f[4]);
            r.b = norm_range(f[5]);
            r.c = std::to_string(std::stol(f[6]));
        } else if (r.op == "keep") {
            r.seqs = f[2];
        }
        out.push_back(r);
    }
    return out;
}

std::string fmt_row(bool mark, const char * who, const canon_row & r) {
    return std::string(mark ? "  >> " : "     ") + who + " line " + std::to_string(r.line) + ": " + r.text + "\n";
}

// The first row where the two canonical traces differ, with context; "" when identical.
std::string first_difference(const std::vector<canon_row> & real, const std::vector<canon_row> & kv) {
    size_t i = 0;
    while (i < real.size() && i < kv.size() && real[i].key() == kv[i].key()) ++i;
    if (i == real.size() && i == kv.size()) return "";
    auto show = [&](const std::vector<canon_row> & v, const char * who) {
        std::string s;
        for (size_t j = i >= 2 ? i - 2 : 0; j < std::min(v.size(), i + 3); ++j) {
            s += fmt_row(j == i, who, v[j]);
        }
        if (i >= v.size()) s += std::string("  >> ") + who + ": (end)\n";
        return s;
    };
    return "op " + std::to_string(i + 1) + " of " + std::to_string(real.size()) + "/" + std::to_string(kv.size()) + "\n" +
           show(real, "server") + show(kv, "kvsim ");
}

// One request as kvsim's requests.csv reports it.
struct kv_request {
    int slot = -1, prefix_reused = 0, n_gen = 0;
    std::string outcome, error;
    int draft_n = -1, draft_n_accepted = -1;   // speculative decoding's two columns (-1: none)
    long cmpl_of = -1;                          // an extra completion (n_cmpl) of this request
};

std::vector<kv_request> read_requests_csv(const std::string & path) {
    std::ifstream in(path);
    std::string l;
    std::getline(in, l);
    // the columns some runs add after "error" (draft_n, draft_n_accepted, cmpl_of)
    const auto extra = split(l.substr(l.find(",error") + 6), ',');
    const auto col = [&](const char * name) { return (long) (std::find(extra.begin(), extra.end(), name) - extra.begin()); };
    std::vector<kv_request> v;
    while (std::getline(in, l)) {
        const auto q = l.find('"');
        const auto f = split(l.substr(0, q), ',');
        REQUIRE(f.size() >= 17);
        kv_request r;
        r.slot = std::stoi(f[2]);
        r.n_gen = std::stoi(f[5]);
        r.prefix_reused = std::stoi(f[6]);
        r.outcome = f[16];
        r.error = q == std::string::npos ? "" : l.substr(q + 1, l.rfind('"') - q - 1);
        const auto tail = split(l.substr(l.rfind('"') + 1), ',');
        REQUIRE(tail.size() == extra.size());
        if (col("draft_n") < (long) tail.size()) {
            r.draft_n = std::stoi(tail[(size_t) col("draft_n")]);
            r.draft_n_accepted = std::stoi(tail[(size_t) col("draft_n_accepted")]);
        }
        if (col("cmpl_of") < (long) tail.size() && !tail[(size_t) col("cmpl_of")].empty()) r.cmpl_of = std::stol(tail[(size_t) col("cmpl_of")]);
        v.push_back(r);
    }
    return v;
}

// One completion the server reported (a results line, or one of its "completions") against kvsim's row.
void compare_completion(const nlohmann::json & j, const kv_request & k, const std::string & who, std::vector<std::string> & bad) {
    const bool trunc = j.at("truncated").get<bool>();
    if (k.slot != j.at("slot").get<int>()) bad.push_back(who + "slot " + std::to_string(j["slot"].get<int>()) + " vs kvsim " + std::to_string(k.slot));
    if (k.prefix_reused != j.at("cache_n").get<int>()) {
        bad.push_back(who + "cache_n " + std::to_string(j["cache_n"].get<int>()) + " vs kvsim " + std::to_string(k.prefix_reused));
    }
    if (k.n_gen != j.at("predicted").get<int>()) {
        bad.push_back(who + "predicted " + std::to_string(j["predicted"].get<int>()) + " vs kvsim " + std::to_string(k.n_gen));
    }
    if (k.outcome != (trunc ? "truncated" : "done")) bad.push_back(who + "truncated " + std::to_string(trunc) + " vs kvsim " + k.outcome);
    // the server's timings carry them only when it drafted for the request
    const int draft_n = j.value("draft_n", 0), accepted = j.value("draft_n_accepted", 0);
    if (k.draft_n >= 0 && (k.draft_n != draft_n || k.draft_n_accepted != accepted)) {
        bad.push_back(who + "draft_n " + std::to_string(draft_n) + " accepted " + std::to_string(accepted) + " vs kvsim " +
                      std::to_string(k.draft_n) + " / " + std::to_string(k.draft_n_accepted));
    }
}

// expected/NAME.results.jsonl against kvsim's requests.csv; returns the mismatches. A request with several completions
// (n_cmpl) has them in "completions", the first its own; kvsim's rows of the others follow the trace's requests
// (cmpl_of = the request), in order.
std::vector<std::string> compare_results(const fs::path & results, const std::vector<kv_request> & kv) {
    std::vector<std::string> bad;
    std::ifstream in(results);
    std::string l;
    size_t n = 0;
    while (std::getline(in, l)) {
        const auto j = nlohmann::json::parse(l);
        const size_t i = j.at("i").get<size_t>();
        ++n;
        if (i >= kv.size()) {
            bad.push_back("request " + std::to_string(i) + " missing in kvsim's requests.csv");
            continue;
        }
        const kv_request & k = kv[i];
        const std::string who = "request " + std::to_string(i) + ": ";
        if (j.contains("error")) {
            std::string e = j["error"].get<std::string>();
            if (e.rfind("HTTP ", 0) == 0 && e.find(": ") != std::string::npos) e = e.substr(e.find(": ") + 2);
            if (k.outcome != "failed" || k.error != e) bad.push_back(who + "server error '" + e + "', kvsim " + k.outcome + " '" + k.error + "'");
            n += (size_t) std::count_if(kv.begin(), kv.end(), [&](const kv_request & r) { return r.cmpl_of == (long) i; });
            continue;
        }
        compare_completion(j, k, who, bad);
        std::vector<const kv_request *> extra;
        for (const auto & r : kv) {
            if (r.cmpl_of == (long) i) extra.push_back(&r);
        }
        const size_t n_cmpl = j.contains("completions") ? j["completions"].size() : 1;
        if (extra.size() + 1 != n_cmpl) {
            bad.push_back(who + std::to_string(n_cmpl) + " completions, kvsim " + std::to_string(extra.size() + 1));
            continue;
        }
        for (size_t c = 1; c < n_cmpl; ++c) {
            compare_completion(j["completions"][c], *extra[c - 1], who + "completion " + std::to_string(c) + ": ", bad);
        }
        n += extra.size();
    }
    if (n != kv.size()) bad.push_back("server answered " + std::to_string(n) + " completions, kvsim reports " + std::to_string(kv.size()));
    return bad;
}

std::vector<std::string> scenario_names() {
    std::vector<std::string> v;
    for (const auto & e : fs::directory_iterator(k_dir)) {
        if (e.path().extension() == ".scn") v.push_back(e.path().stem().string());
    }
    std::sort(v.begin(), v.end());
    return v;
}

}  // namespace

TEST_CASE("server golden scenarios: at least 20, each with its recording") {
    const auto names = scenario_names();
    CHECK(names.size() >= 20);
    for (const auto & n : names) {
        INFO(n);
        CHECK(fs::exists(k_dir / "expected" / (n + ".ops.csv")));
        CHECK(fs::exists(k_dir / "expected" / (n + ".results.jsonl")));
        const auto scn = read_scn(k_dir / (n + ".scn"));
        CHECK(scn.count("trace"));
        CHECK(scn.count("kvsim"));
        CHECK(fs::exists(k_dir / scn.at("trace")));
    }
}

TEST_CASE("kvsim's scheduler issues the real llama-server's cache operations, op for op") {
    for (const auto & name : scenario_names()) {
        SUBCASE(name.c_str()) {
            const auto scn = read_scn(k_dir / (name + ".scn"));
            scratch_dir d("golden_" + name);
            // speculative decoding scenarios: the draft context's op trace too
            const fs::path draft_expected = k_dir / "expected" / (name + ".draft.ops.csv");
            const bool draft = fs::exists(draft_expected);
            const std::string args = "replay " + (k_dir / scn.at("trace")).string() + " -q --no-progress --backend none --emit-ops " +
                                     (d / "ops.csv") + (draft ? " --emit-draft-ops " + (d / "draft.ops.csv") : std::string()) +
                                     " --out " + (d / "out") + " " + scn.at("kvsim");
            const cli_result r = run_kvsim(args);
            REQUIRE_MESSAGE(r.rc == 0, name, ": kvsim ", args, "\n", r.err);
            const std::string diff = first_difference(read_ops(k_dir / "expected" / (name + ".ops.csv")), read_ops(d / "ops.csv"));
            CHECK_MESSAGE(diff.empty(), name, ": the op traces differ at ", diff);
            if (draft) {
                const std::string ddiff = first_difference(read_ops(draft_expected), read_ops(d / "draft.ops.csv"));
                CHECK_MESSAGE(ddiff.empty(), name, ": the draft context's op traces differ at ", ddiff);
            }
            const auto bad = compare_results(k_dir / "expected" / (name + ".results.jsonl"), read_requests_csv(d / "out/requests.csv"));
            for (size_t i = 0; i < bad.size() && i < 5; ++i) FAIL_CHECK(name, ": ", bad[i]);
        }
    }
}

