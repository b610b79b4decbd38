#include "trace/inspect.h"

#include "trace/text_lines.h"
#include "core/errors.h"
#include "util/json_read.h"

#include <algorithm>
#include <bit>
#include <fmt/format.h>
#include <fstream>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace kvsim {

namespace {
using json = nlohmann::json;

json distribution(std::vector<double> v) {
    if (v.empty()) return {{"total", 0}, {"mean", 0}, {"min", 0}, {"p50", 0}, {"p90", 0}, {"p99", 0}, {"max", 0}};
    std::sort(v.begin(), v.end());
    double sum = 0;
    for (double x : v) sum += x;
    auto q = [&](double f) { return v[std::min(v.size() - 1, (size_t) (f * (double) (v.size() - 1) + 0.5))]; };
    return {{"total", sum}, {"mean", sum / (double) v.size()}, {"min", v.front()}, {"p50", q(0.5)}, {"p90", q(0.9)}, {"p99", q(0.99)},
            {"max", v.back()}};
}

// Bucket 0 holds 0; bucket k >= 1 holds [2^(k-1), 2^k - 1].
size_t log2_bucket(int32_t n) { return n <= 0 ? 0 : (size_t) std::bit_width((uint32_t) n); }

json length_histogram(const request_trace & t) {
    std::vector<uint64_t> p, g;
    for (const auto & r : t.requests) {
        for (auto [v, h] : {std::pair<int32_t, std::vector<uint64_t> *>{r.n_prompt, &p}, {r.n_gen, &g}}) {
            const size_t b = log2_bucket(v);
            if (h->size() <= b) h->resize(b + 1, 0);
            ++(*h)[b];
        }
    }
    json rows = json::array();
    for (size_t b = 0; b < std::max(p.size(), g.size()); ++b) {
        const uint64_t lo = b == 0 ? 0 : (uint64_t) 1 << (b - 1), hi = b == 0 ? 0 : ((uint64_t) 1 << b) - 1;
        rows.push_back({{"lo", lo}, {"hi", hi}, {"prompt", b < p.size() ? p[b] : 0}, {"gen", b < g.size() ? g[b] : 0}});
    }
    return rows;
}

struct pair_hash {
    size_t operator()(const std::pair<uint64_t, uint64_t> & p) const { return std::hash<uint64_t>()(p.first * 0x9e3779b97f4a7c15ULL ^ p.second); }
};

// Prefix sharing over hash_ids: a trie of the block-id sequences seen so far gives each
// request's longest prefix shared with an earlier one.
json prefix_sharing(const request_trace & t, int32_t block_tokens) {
    std::unordered_map<std::pair<uint64_t, uint64_t>, uint64_t, pair_hash> child;   // (node, block id) -> node
    std::unordered_set<uint64_t> seen;
    uint64_t next_node = 1, blocks = 0, seen_before = 0, shared_first = 0, longest = 0, sum_shared = 0, shareable = 0;
    for (const auto & r : t.requests) {
        uint64_t node = 0, depth = 0;
        bool walking = true;
        for (uint64_t id : r.hash_ids) {
            ++blocks;
            seen_before += !seen.insert(id).second;
            const auto key = std::make_pair(node, id);
            auto it = child.find(key);
            if (walking && it != child.end()) {
                ++depth;
                node = it->second;
                continue;
            }
            walking = false;
            node = child.emplace(key, next_node).first->second;
            next_node += node == next_node;
        }
        shared_first += depth > 0;
        longest = std::max(longest, depth);
        sum_shared += depth;
        shareable += std::min<uint64_t>((uint64_t) r.n_prompt, depth * (uint64_t) block_tokens);
    }
    return {{"block_tokens", block_tokens},
            {"blocks", blocks},
            {"blocks_seen_before_fraction", blocks ? (double) seen_before / (double) blocks : 0.0},
            {"requests_with_shared_first_block", shared_first},
            {"longest_shared_prefix_blocks", longest},
            {"mean_shared_prefix_blocks", t.requests.empty() ? 0.0 : (double) sum_shared / (double) t.requests.size()},
            {"shareable_prompt_tokens", shareable}};
}

std::string fmt_num(const json & v) {
    if (v.is_number_float()) {
        const double d = v.get<double>();
        return d == (double) (int64_t) d && std::abs(d) < 1e15 ? fmt::format("{}", (int64_t) d) : fmt::format("{:.3f}", d);
    }
    return v.is_string() ? v.get<std::string>() : json_text(v);
}
}  // namespace

json inspect_requests(const request_trace & t, int32_t block_tokens) {
    std::vector<double> p, g;
    std::map<int64_t, uint64_t> per_second;
    bool has_hash = false;
    for (const auto & r : t.requests) {
        p.push_back(r.n_prompt);
        g.push_back(r.n_gen);
        ++per_second[(int64_t) std::floor(r.arrival_s)];
        has_hash |= !r.hash_ids.empty();
    }
    const double dur = t.requests.empty() ? 0 : t.requests.back().arrival_s;
    uint64_t peak = 0;
    for (const auto & [s, n] : per_second) peak = std::max(peak, n);
    json j = {{"kind", "request_trace"},
              {"format", request_format_name(t.format)},
              {"requests", t.requests.size()},
              {"duration_s", dur},
              {"arrival_rate", {{"mean_per_s", dur > 0 ? (double) t.requests.size() / dur : 0.0}, {"peak_per_s", peak}}},
              {"prompt_tokens", distribution(p)},
              {"gen_tokens", distribution(g)},
              {"length_histogram", length_histogram(t)}};
    if (has_hash) j["prefix_sharing"] = prefix_sharing(t, block_tokens);
    return j;
}

json inspect_ops(const op_trace & t) {
    std::map<std::string, uint64_t> ops;
    for (op_kind k : {op_kind::decode, op_kind::rm, op_kind::cp, op_kind::keep, op_kind::add, op_kind::div, op_kind::clear}) ops[op_kind_name(k)] = 0;
    std::set<llama_seq_id> ids;
    uint64_t rows = 0, tokens = 0, shared = 0, max_call = 0;
    for (const auto & g : t.groups) {
        ++ops[op_kind_name(g.op)];
        uint64_t call = 0;
        for (const auto & r : g.rows) {
            for (llama_seq_id s : r.seqs) {
                if (s >= 0) ids.insert(s);
            }
            if (g.op == op_kind::cp && r.seq_dst >= 0) ids.insert(r.seq_dst);
            if (g.op != op_kind::decode) continue;
            ++rows;
            call += (uint64_t) r.n_tokens;
            shared += r.seqs.size() > 1 ? (uint64_t) r.n_tokens : 0;
        }
        tokens += call;
        max_call = std::max(max_call, call);
    }
    return {{"kind", "op_trace"},
            {"groups", t.groups.size()},
            {"decode_calls", ops["decode"]},
            {"decode_rows", rows},
            {"tokens", tokens},
            {"max_tokens_per_decode", max_call},
            {"shared_tokens", shared},
            {"ops", ops},
            {"sequences", {{"count", ids.size()}, {"max_id", ids.empty() ? -1 : *ids.rbegin()}, {"ids", ids}}}};
}

json inspect_trace(const std::string & path, const std::string & format, int32_t block_tokens) {
    if (format == "ops" || (format == "auto" && looks_like_op_trace(read_first_line(path)))) return inspect_ops(read_op_trace(path));
    std::optional<request_format> f;
    if (format != "auto") f = parse_request_format(format);
    return inspect_requests(read_request_trace(path, f), block_tokens);
}

void print_inspect(std::ostream & out, const std::string & path, const json & j) {
    if (j.value("kind", "") == "op_trace") {
        out << fmt::format("{}: op trace\n", escape_controls(path));
        for (const char * k : {"groups", "decode_calls", "decode_rows", "tokens", "max_tokens_per_decode", "shared_tokens"}) {
            out << fmt::format("  {:<22} {}\n", k, fmt_num(j[k]));
        }
        std::string kinds;
        for (const auto & [k, v] : j["ops"].items()) kinds += fmt::format("{} {}, ", k, v.get<uint64_t>());
        out << fmt::format("  {:<22} {}\n", "ops by kind", kinds.substr(0, kinds.size() - 2));
        out << fmt::format("  {:<22} {} (max id {})\n", "sequences", fmt_num(j["sequences"]["count"]), fmt_num(j["sequences"]["max_id"]));
        return;
    }
    out << fmt::format("{}: {} request trace\n", escape_controls(path), j["format"].get<std::string>());
    out << fmt::format("  {:<22} {}\n", "requests", fmt_num(j["requests"]));
    out << fmt::format("  {:<22} {:.3f} s\n", "duration", j["duration_s"].get<double>());
    out << fmt::format("  {:<22} {:.3f} /s mean, {} /s peak (1 s windows)\n", "arrival rate", j["arrival_rate"]["mean_per_s"].get<double>(),
                       fmt_num(j["arrival_rate"]["peak_per_s"]));
    out << fmt::format("\n  {:<14} {:>12} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8}\n", "tokens", "total", "mean", "min", "p50", "p90", "p99", "max");
    for (const char * k : {"prompt_tokens", "gen_tokens"}) {
        const json & d = j[k];
        out << fmt::format("  {:<14} {:>12} {:>10.1f} {:>8} {:>8} {:>8} {:>8} {:>8}\n", k == std::string("prompt_tokens") ? "prompt" : "generated",
                           fmt_num(d["total"]), d["mean"].get<double>(), fmt_num(d["min"]), fmt_num(d["p50"]), fmt_num(d["p90"]), fmt_num(d["p99"]),
                           fmt_num(d["max"]));
    }
    out << fmt::format("\n  {:<16} {:>10} {:>10}\n", "length (tokens)", "prompt", "generated");
    for (const auto & b : j["length_histogram"]) {
        const std::string range = b["lo"] == b["hi"] ? fmt_num(b["lo"]) : fmt::format("{}-{}", fmt_num(b["lo"]), fmt_num(b["hi"]));
        out << fmt::format("  {:<16} {:>10} {:>10}\n", range, fmt_num(b["prompt"]), fmt_num(b["gen"]));
    }
    if (j.contains("prefix_sharing")) {
        const json & s = j["prefix_sharing"];
        out << fmt::format("\n  prefix sharing ({}-token hash_id blocks)\n", fmt_num(s["block_tokens"]));
        out << fmt::format("  {:<34} {}\n", "blocks", fmt_num(s["blocks"]));
        out << fmt::format("  {:<34} {:.1f} %\n", "blocks seen in an earlier request", 100.0 * s["blocks_seen_before_fraction"].get<double>());
        out << fmt::format("  {:<34} {}\n", "requests sharing their first block", fmt_num(s["requests_with_shared_first_block"]));
        out << fmt::format("  {:<34} {} blocks\n", "longest shared prefix", fmt_num(s["longest_shared_prefix_blocks"]));
        out << fmt::format("  {:<34} {:.2f} blocks\n", "mean shared prefix", s["mean_shared_prefix_blocks"].get<double>());
        out << fmt::format("  {:<34} {}\n", "shareable prompt tokens", fmt_num(s["shareable_prompt_tokens"]));
    }
}

}  // namespace kvsim
