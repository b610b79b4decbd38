#include "time/llama_bench_markdown.h"

#include "core/errors.h"
#include "util/json_read.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

namespace kvsim {

namespace {
std::string trim(const std::string & s) {
    const size_t a = s.find_first_not_of(" \t\r");
    if (a == std::string::npos) return "";
    return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// The cells of a "| a | b |" line, trimmed.
std::vector<std::string> cells_of(const std::string & line) {
    std::vector<std::string> c;
    std::string t = trim(line);
    if (!t.empty() && t.front() == '|') t.erase(0, 1);
    if (!t.empty() && t.back() == '|') t.pop_back();
    std::stringstream ss(t);
    for (std::string cell; std::getline(ss, cell, '|');) c.push_back(trim(cell));
    return c;
}

// The longest cell a table may hold (a model name, a build, "636.18 MiB", "12.45 ± 0.31").
constexpr size_t k_max_cell = 256;

bool is_separator(const std::vector<std::string> & cells) {
    static const std::regex sep(":?-+:?");
    for (const auto & c : cells) {
        if (!std::regex_match(c, sep)) return false;
    }
    return !cells.empty();
}

struct reader {
    const std::string & path;
    long line = 0;

    [[noreturn]] void fail(const std::string & value, const std::string & why) const { throw input_error(path, line, cut_text(value), why); }

    // "4.58 GiB", "636.18 MiB" (size) or "8.03 B", "494.03 M" (params): the number times its unit.
    double scaled(const std::string & cell, const std::map<std::string, double> & units, const char * what) const {
        static const std::regex re(R"(([0-9]+(?:\.[0-9]+)?) *([A-Za-z]+))");
        std::smatch m;
        if (!std::regex_match(cell, m, re) || !units.count(m[2].str())) fail(cell, fmt::format("{} is not a number with a unit", what));
        return std::stod(m[1].str()) * units.at(m[2].str());
    }

    void test(const std::string & cell, nlohmann::json & o) const {
        static const std::regex re(R"((pp|tg) ?([0-9]{1,7})(?:\+tg ?([0-9]{1,7}))?(?: @ d([0-9]{1,7}))?)");
        std::smatch m;
        if (!std::regex_match(cell, m, re)) fail(cell, "test is not ppN, tgN or ppN+tgM (with ' @ dD')");
        const long n = std::stol(m[2].str());
        o["n_prompt"] = m[1] == "pp" ? n : 0;
        o["n_gen"] = m[1] == "tg" ? n : (m[3].matched ? std::stol(m[3].str()) : 0);
        if (m[1] == "tg" && m[3].matched) fail(cell, "test is not ppN, tgN or ppN+tgM (with ' @ dD')");
        o["n_depth"] = m[4].matched ? std::stol(m[4].str()) : 0;
    }

    // "A ± S" tokens per second: avg_ns and stddev_ns of the run's n_prompt + n_gen tokens.
    void rate(const std::string & cell, nlohmann::json & o) const {
        static const std::regex re("([0-9]+(?:\\.[0-9]+)?) *(?:\xC2\xB1|\\+/-) *([0-9]+(?:\\.[0-9]+)?)");
        std::smatch m;
        if (!std::regex_match(cell, m, re)) fail(cell, "t/s is not 'A ± S'");
        const double ts = std::stod(m[1].str()), sd = std::stod(m[2].str());
        if (!(ts > 0)) fail(cell, "t/s must be > 0");
        const double tokens = o["n_prompt"].get<double>() + o["n_gen"].get<double>();
        const double avg_ns = tokens / ts * 1e9, sd_ns = avg_ns * sd / ts;
        // checked here, before llround: a value past int64 came out as -9223372036854775808, and the row's later check
        // named that instead of the cell
        if (!(avg_ns >= 1 && avg_ns <= 1e15)) {
            fail(cell, fmt::format("t/s gives {:g} ns for the run's {:g} tokens, outside [1, 1e15]", avg_ns, tokens));
        }
        if (!(sd_ns <= 1e15)) fail(cell, fmt::format("the spread after the t/s gives {:g} ns, above 1e15", sd_ns));
        o["avg_ns"] = (int64_t) std::llround(avg_ns);
        o["stddev_ns"] = (int64_t) std::llround(sd_ns);
    }

    int64_t whole(const std::string & cell, const char * what) const {
        static const std::regex re("[0-9]{1,9}");
        if (!std::regex_match(cell, re)) fail(cell, fmt::format("{} is not a whole number", what));
        return std::stoll(cell);
    }

    int flash_attn(const std::string & cell) const {
        if (cell == "1" || cell == "on" || cell == "true") return 1;
        if (cell == "0" || cell == "off" || cell == "false") return 0;
        if (cell == "-1" || cell == "auto") return -1;
        fail(cell, "fa is not 0, 1 or auto");
    }

    nlohmann::json row(const std::map<std::string, size_t> & col, const std::vector<std::string> & c) const {
        const auto at = [&](const char * name) -> const std::string * { return col.count(name) ? &c[col.at(name)] : nullptr; };
        const double gib = 1024.0 * 1024.0 * 1024.0;
        nlohmann::json o = {{"_line", line}, {"model_type", *at("model")}, {"n_batch", 2048}, {"n_ubatch", 512}, {"n_threads", 0},
                            {"type_k", "f16"}, {"type_v", "f16"}, {"flash_attn", -1}};
        if (const auto * s = at("size")) o["model_size"] = std::llround(scaled(*s, {{"GiB", gib}, {"MiB", gib / 1024}}, "size"));
        if (const auto * s = at("params")) o["model_n_params"] = std::llround(scaled(*s, {{"B", 1e9}, {"M", 1e6}}, "params"));
        if (const auto * s = at("n_batch")) o["n_batch"] = whole(*s, "n_batch");
        if (const auto * s = at("n_ubatch")) o["n_ubatch"] = whole(*s, "n_ubatch");
        if (const auto * s = at("threads")) o["n_threads"] = whole(*s, "threads");
        if (const auto * s = at("type_k")) o["type_k"] = *s;
        if (const auto * s = at("type_v")) o["type_v"] = *s;
        if (const auto * s = at("fa")) o["flash_attn"] = flash_attn(*s);
        test(*at("test"), o);
        rate(*at("t/s"), o);
        return o;
    }
};
}  // namespace

// "build: 4426e298 (2824)" -> "4426e298"; "" unless the line is exactly that shape (hex commit, decimal number).
std::string build_commit_of(const std::string & t) {
    std::istringstream in(t.substr(6));
    std::string commit, number, rest;
    in >> commit >> number;
    const bool hex = !commit.empty() && commit.size() <= 40 &&
                     std::all_of(commit.begin(), commit.end(), [](unsigned char c) { return std::isxdigit(c) != 0; });
    const bool num = number.size() >= 3 && number.size() <= 12 && number.front() == '(' && number.back() == ')' &&
                     std::all_of(number.begin() + 1, number.end() - 1, [](unsigned char c) { return std::isdigit(c) != 0; });
    return hex && num && !(in >> rest) ? commit : std::string();
}

bool looks_like_llama_bench_markdown(const std::string & text) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        const std::string t = trim(line);
        if (!t.empty() && t.front() == '|') return true;
    }
    return false;
}

nlohmann::json llama_bench_markdown_to_json(const std::string & text, const std::string & path) {
    reader rd{path};
    nlohmann::json out = nlohmann::json::array();
    std::map<std::string, size_t> col;   // the current table's columns
    size_t table_start = 0;              // the current table's first row in `out`
    std::string device;                  // "Device 0: NVIDIA GeForce RTX 4090, compute capability ..." (llama-bench's stderr)
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        ++rd.line;
        if (trim(line).empty() || trim(line).front() != '|') {
            col.clear();   // a table ends at its first other line (its "build:" line, a blank)
            const std::string t = trim(line);
            if (t.rfind("build:", 0) == 0) {   // the build of the table above it
                const std::string commit = build_commit_of(t);
                if (commit.empty()) rd.fail(t, "a build line reads 'build: <commit> (<number>)'");
                for (size_t i = table_start; i < out.size(); ++i) out[i]["build_commit"] = commit;
                table_start = out.size();
            } else if (const size_t at = t.find("Device 0:"); at != std::string::npos) {
                const size_t comma = t.find(',', at);
                device = trim(t.substr(at + 9, comma == std::string::npos ? std::string::npos : comma - at - 9));
            }
            continue;
        }
        const std::vector<std::string> c = cells_of(line);
        // before any regex: libstdc++'s std::regex_match recurses once per character and overflowed the stack on a cell
        // of 50,000 (hostile check, session 30); llama-bench's cells are a few dozen characters
        for (const auto & cell : c) {
            if (cell.size() > k_max_cell) rd.fail(cell, fmt::format("a cell of {} characters (at most {})", cell.size(), k_max_cell));
        }
        if (is_separator(c)) continue;
        if (col.empty()) {
            for (size_t i = 0; i < c.size(); ++i) {
                if (!col.emplace(c[i], i).second) rd.fail(trim(line), fmt::format("column '{}' appears twice in the header", cut_text(c[i], 40)));
            }
            for (const char * need : {"model", "test", "t/s"}) {
                if (!col.count(need)) rd.fail(trim(line), fmt::format("a llama-bench table header needs a '{}' column", need));
            }
            continue;
        }
        if (c.size() != col.size()) rd.fail(trim(line), fmt::format("{} cells where the header has {}", c.size(), col.size()));
        out.push_back(rd.row(col, c));
        if (!device.empty()) out.back()["gpu_info"] = device;
    }
    if (out.empty()) throw input_error(path, 0, "", "holds no llama-bench result rows (a markdown table with a model, test and t/s column)");
    return out;
}

}  // namespace kvsim
