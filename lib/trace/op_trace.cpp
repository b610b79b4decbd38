// Reading uses fccp's io::LineReader for lines (BOM, CRLF, buffering) but splits fields with
// split_csv_line rather than io::CSVReader: CSVReader matches header columns by name (we need
// the exact order) and its too-few/too-many-columns errors do not carry the row text, which
// input_error must report as the value.
#include "trace/op_trace.h"

#include "trace/text_lines.h"
#include "core/errors.h"

#include <algorithm>
#include <array>
#include <optional>
#include <ostream>
#include <stdexcept>

namespace kvsim {

namespace {

constexpr std::array<const char *, 8> k_columns = {"batch", "op", "seq", "n_tokens", "p0", "p1", "delta", "seq_dst"};
enum col { c_batch, c_op, c_seq, c_n_tokens, c_p0, c_p1, c_delta, c_seq_dst };

constexpr std::array<op_kind, 7> k_ops = {op_kind::decode, op_kind::rm, op_kind::cp, op_kind::keep,
                                          op_kind::add, op_kind::div, op_kind::clear};

std::string header_text() {
    std::string h;
    for (const char * c : k_columns) {
        if (!h.empty()) h += ',';
        h += c;
    }
    return h;
}

void check_header(const std::vector<std::string> & f, const std::string & file, long line, const std::string & raw) {
    const std::string expect = " (expected header '" + header_text() + "')";
    for (size_t i = 0; i < std::max(f.size(), k_columns.size()); ++i) {
        if (i >= f.size()) throw input_error(file, line, raw, std::string("missing column '") + k_columns[i] + "'" + expect);
        if (i >= k_columns.size()) throw input_error(file, line, f[i], "extra column" + expect);
        if (f[i] != k_columns[i]) {
            throw input_error(file, line, f[i], "column " + std::to_string(i + 1) + " should be '" + k_columns[i] + "'" + expect);
        }
    }
}

// Parses one data row's fields; every check names the offending field's text.
class row_parser {
public:
    row_parser(const std::vector<std::string> & f, const std::string & file, long line) : f_(f), file_(file), line_(line) {}

    op_row parse() {
        op_row r;
        r.line = line_;
        r.batch = f_[c_batch];
        r.op = parse_op();
        // csv2script.py ignores columns an op does not use; we still reject non-numbers there.
        const auto n_tokens = num(c_n_tokens);
        const auto p0 = num(c_p0), p1 = num(c_p1), delta = num(c_delta), seq_dst = num(c_seq_dst);
        const std::vector<llama_seq_id> seqs = parse_seqs();

        if (r.op == op_kind::decode) {
            if (seqs.empty()) fail(c_seq, "decode needs at least one seq id");
            // A negative id or one >= n_seq_max (even >= LLAMA_MAX_SEQ) is not a file error:
            // llama_decode rejects the batch with -1 (llama_batch_allocr::init) and the replay
            // reproduces that.
            if (!n_tokens) fail(c_n_tokens, "decode needs n_tokens");
            if (*n_tokens < 0) fail(c_n_tokens, "n_tokens is negative");
            if (*n_tokens == 0) fail(c_n_tokens, "n_tokens must be > 0 for decode");
            r.seqs = seqs;
            r.n_tokens = *n_tokens;
            // kvoracle do_batch: a negative start means "next position", like an empty one.
            r.has_p0 = p0 && *p0 >= 0;
            r.p0 = r.has_p0 ? *p0 : -1;
            return r;
        }
        if (seqs.size() > 1) fail(c_seq, "only decode rows may list several sequences");
        if (r.op == op_kind::clear) return r;

        // csv2script.py writes an empty seq as -1; llama.cpp accepts -1 (all sequences) in seq_rm only.
        const llama_seq_id seq = seqs.empty() ? -1 : seqs[0];
        // Out-of-range ids make llama.cpp's seq ops abort (GGML_ASSERT), so they are file errors.
        if (seq < -1 || seq >= LLAMA_MAX_SEQ) fail(c_seq, "id out of range [-1, 256)");
        if (seq < 0 && r.op != op_kind::rm) fail(c_seq, std::string("seq -1 (all sequences) is only allowed for rm, not ") + op_kind_name(r.op));
        r.seqs = {seq};
        if (r.op == op_kind::keep) return r;

        // llama_kv_cache::seq_rm/cp/add/div map any negative bound to 0 / +inf.
        r.p0 = p0 && *p0 >= 0 ? *p0 : -1;
        r.p1 = p1 && *p1 >= 0 ? *p1 : -1;
        if (r.op == op_kind::cp) {
            if (!seq_dst) fail(c_seq_dst, "cp needs seq_dst");
            if (*seq_dst < 0 || *seq_dst >= LLAMA_MAX_SEQ) fail(c_seq_dst, "seq_dst out of range [0, 256)");
            r.seq_dst = *seq_dst;
        }
        if (r.op == op_kind::add) {
            if (!delta) fail(c_delta, "add needs delta (the position shift)");
            r.delta = *delta;
        }
        if (r.op == op_kind::div) {
            if (!delta) fail(c_delta, "div needs delta (the divisor)");
            if (*delta <= 0) fail(c_delta, "div delta must be > 0");
            r.delta = *delta;
        }
        return r;
    }

private:
    [[noreturn]] void fail(col c, const std::string & why) const {
        throw input_error(file_, line_, f_[c], std::string(k_columns[c]) + ": " + why);
    }

    op_kind parse_op() const {
        for (op_kind k : k_ops) {
            if (f_[c_op] == op_kind_name(k)) return k;
        }
        fail(c_op, "unknown op (expected decode, rm, cp, keep, add, div or clear)");
    }

    std::optional<int32_t> num(col c) const {
        if (f_[c].empty()) return std::nullopt;
        return parse_int32_field(f_[c], file_, line_, k_columns[c]);
    }

    std::vector<llama_seq_id> parse_seqs() const {
        std::vector<llama_seq_id> out;
        const std::string & s = f_[c_seq];
        if (s.empty()) return out;
        size_t b = 0;
        for (;;) {
            const size_t e = s.find(';', b);
            std::string item = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
            item.erase(0, item.find_first_not_of(" \t"));
            item.erase(item.find_last_not_of(" \t") + 1);
            const int32_t id = parse_int32_field(item, file_, line_, "seq");
            if (std::find(out.begin(), out.end(), id) != out.end()) throw input_error(file_, line_, s, "seq: id listed twice");
            out.push_back(id);
            if (e == std::string::npos) return out;
            b = e + 1;
        }
    }

    const std::vector<std::string> & f_;
    const std::string & file_;
    long line_;
};

void add_row(op_trace & t, op_row && r) {
    auto & g = t.groups;
    if (r.op == op_kind::decode && !g.empty() && g.back().op == op_kind::decode && g.back().rows.back().batch == r.batch) {
        g.back().rows.push_back(std::move(r));
        return;
    }
    const long line = r.line;
    const op_kind op = r.op;
    g.push_back(op_group{op, {std::move(r)}, line});
}

op_trace parse_lines(text_lines & lines) {
    op_trace t;
    t.path = lines.name();
    const auto header = lines.next_nonblank();
    if (!header) throw input_error(t.path, 0, "", "empty file (expected header '" + header_text() + "')");
    const long header_line = lines.line();
    check_header(split_csv_line(*header, t.path, header_line), t.path, header_line, std::string(*header));

    while (const auto raw = lines.next_nonblank()) {
        const long line = lines.line();
        const std::vector<std::string> f = split_csv_line(*raw, t.path, line);
        if (f.size() < k_columns.size()) {
            throw input_error(t.path, line, std::string(*raw),
                              std::string("missing column '") + k_columns[f.size()] + "': row has " + std::to_string(f.size()) + " of 8 fields");
        }
        if (f.size() > k_columns.size()) {
            throw input_error(t.path, line, std::string(*raw), "extra field: row has " + std::to_string(f.size()) + " fields, header 8");
        }
        add_row(t, row_parser(f, t.path, line).parse());
    }
    if (t.groups.empty()) throw input_error(t.path, header_line, "", "header only, no op rows");
    return t;
}

std::string csv_field(const std::string & s) {
    if (s.find_first_of(",\"") == std::string::npos && s.find_first_of(" \t") != 0 && (s.empty() || s.find_last_of(" \t") != s.size() - 1)) return s;
    std::string q = "\"";
    for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    return q + "\"";
}

void write_row(std::ostream & out, const op_row & r) {
    std::string seqs;
    for (auto s : r.seqs) {
        if (!seqs.empty()) seqs += ';';
        seqs += std::to_string(s);
    }
    const bool range = r.op == op_kind::rm || r.op == op_kind::cp || r.op == op_kind::add || r.op == op_kind::div;
    const bool has_delta = r.op == op_kind::add || r.op == op_kind::div;
    out << csv_field(r.batch) << ',' << op_kind_name(r.op) << ',' << seqs << ',';
    if (r.op == op_kind::decode) out << r.n_tokens;
    out << ',';
    if (r.op == op_kind::decode ? r.has_p0 : range) out << r.p0;
    out << ',';
    if (range) out << r.p1;
    out << ',';
    if (has_delta) out << r.delta;
    out << ',';
    if (r.op == op_kind::cp) out << r.seq_dst;
    out << '\n';
}

}  // namespace

const char * op_kind_name(op_kind k) {
    switch (k) {
        case op_kind::decode: return "decode";
        case op_kind::rm: return "rm";
        case op_kind::cp: return "cp";
        case op_kind::keep: return "keep";
        case op_kind::add: return "add";
        case op_kind::div: return "div";
        case op_kind::clear: return "clear";
    }
    return "?";
}

op_trace read_op_trace(const std::string & path) {
    text_lines lines(path);
    return parse_lines(lines);
}

op_trace parse_op_trace(std::istream & in, const std::string & name) {
    text_lines lines(in, name);
    return parse_lines(lines);
}

void write_op_trace(std::ostream & out, const op_trace & t) {
    out << header_text() << '\n';
    const op_group * prev = nullptr;
    for (const auto & g : t.groups) {
        if (g.rows.empty()) throw std::invalid_argument("write_op_trace: group without rows");
        if (g.op == op_kind::decode) {
            for (const auto & r : g.rows) {
                if (r.batch != g.rows.front().batch) throw std::invalid_argument("write_op_trace: decode group mixes batch labels");
            }
            if (prev && prev->op == op_kind::decode && prev->rows.front().batch == g.rows.front().batch) {
                throw std::invalid_argument("write_op_trace: adjacent decode groups share batch label '" + g.rows.front().batch + "'");
            }
        }
        for (const auto & r : g.rows) write_row(out, r);
        prev = &g;
    }
}

bool looks_like_op_trace(const std::string & header_line) {
    std::string s = header_line;
    if (s.rfind("\xEF\xBB\xBF", 0) == 0) s.erase(0, 3);
    while (!s.empty() && (s.back() == '\r' || s.back() == '\n')) s.pop_back();
    try {
        check_header(split_csv_line(s, "", 1), "", 1, s);
        return true;
    } catch (const input_error &) {
        return false;
    }
}

}  // namespace kvsim
