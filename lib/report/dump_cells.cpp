#include "report/dump_cells.h"

#include <algorithm>
#include <cassert>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvsim {

namespace {
char map_char(const seq_set & s) {
    if (s.none()) return '.';
    if (s.count() > 1) return 'M';
    const size_t q = seq_first(s);
    return q < 10 ? (char) ('0' + q) : q < 36 ? (char) ('a' + q - 10) : '+';
}

std::string stream_json(const kv_cells & c, uint32_t stream) {
    const uint32_t n = c.used_max_p1();
    std::string map(n, '.');
    std::string cells;
    for (uint32_t i = 0; i < n; ++i) {
        if (c.is_empty(i)) continue;
        map[i] = map_char(c.seq_get_all(i));
        if (!cells.empty()) cells += ',';
        cells += fmt::format("[{},{},[", i, c.pos_get(i));
        const seq_set & b = c.seq_get_all(i);
        bool first = true;
        for (size_t q = seq_first(b); q < b.size(); q = seq_next(b, q)) {
            cells += fmt::format("{}{}", first ? "" : ",", q);
            first = false;
        }
        cells += c.get_shift(i) != 0 ? fmt::format("],{}]", c.get_shift(i)) : std::string("]]");
    }
    return fmt::format(R"({{"stream":{},"size":{},"used":{},"has_shift":{},"used_max_p1":{},"map":"{}","cells":[{}]}})", stream,
                       c.size(), c.get_used(), c.get_has_shift() ? "true" : "false", n, map, cells);
}
}  // namespace

std::string cache_state_json(const kv_cache & c) {
    std::string o = fmt::format(R"({{"cache":"{}","streams":[)", c.name());
    for (uint32_t s = 0; s < c.get_n_stream(); ++s) {
        if (s) o += ',';
        o += stream_json(c.cells(s), s);
    }
    return o + "]}";
}

void cell_dumper::config(const context & ctx) {
    ctx_ = &ctx;
    nlohmann::json caches = nlohmann::json::array();
    for (const kv_cache * c : ctx.memory().caches()) {
        caches.push_back({{"cache", c->name()}, {"n_stream", c->get_n_stream()}, {"size", c->get_size()}});
    }
    const auto & s = ctx.sizes();
    const auto & p = ctx.params();
    nlohmann::json j = {{"ev", "config"}, {"tool", "kvsim"},           {"model", ctx.model().name},
                        {"n_ctx", s.n_ctx}, {"n_ctx_seq", s.n_ctx_seq}, {"n_batch", s.n_batch},
                        {"n_ubatch", s.n_ubatch}, {"n_seq_max", p.n_seq_max}, {"kv_unified", p.kv_unified},
                        {"swa_full", p.swa_full}, {"type_k", ggml_type_name(p.type_k)},
                        {"type_v", ggml_type_name(p.type_v)}, {"n_swa", ctx.model().n_swa}, {"caches", caches}};
    out_ << j.dump() << '\n';
}

void cell_dumper::apply(long line, const kv_cache & c, const slot_info & sinfo) {
    std::string placed = "{\"strm\":[";
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) placed += fmt::format("{}{}", s ? "," : "", sinfo.strm[s]);
    placed += "],\"idxs\":[";
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) placed += fmt::format("{}[{}]", s ? "," : "", fmt::join(sinfo.idxs[s], ","));
    placed += "]}";
    out_ << fmt::format(R"({{"ev":"apply","line":{},"ubatch_no":{},"cache":"{}","placed":{},"after":{}}})", line, n_apply_++,
                        c.name(), placed, cache_state_json(c))
         << '\n';
}

void cell_dumper::state(long line, const std::string & op, const context & ctx, bool rc_valid, int rc) {
    const auto & p = ctx.params();
    const uint32_t n_report = p.kv_unified ? std::max<uint32_t>(p.n_seq_max, 16) : p.n_seq_max;
    std::string seqs;
    for (uint32_t s = 0; s < n_report; ++s) {
        const llama_pos mn = ctx.memory().seq_pos_min((llama_seq_id) s);
        const llama_pos mx = ctx.memory().seq_pos_max((llama_seq_id) s);
        if (mn < 0 && mx < 0) continue;
        seqs += fmt::format(R"({}"{}":[{},{}])", seqs.empty() ? "" : ",", s, mn, mx);
    }
    std::string caches;
    for (const kv_cache * c : ctx.memory().caches()) {
        if (!caches.empty()) caches += ',';
        caches += cache_state_json(*c);
    }
    out_ << fmt::format(R"({{"ev":"state","line":{},"op":{}{},"seqs":{{{}}},"caches":[{}]}})", line,
                        nlohmann::json(op).dump(), rc_valid ? fmt::format(",\"rc\":{}", rc) : std::string(), seqs, caches)
         << '\n';
}

void cell_dumper::on_op(const op_group & g, int rc) {
    assert(ctx_ && "cell_dumper::config first");
    state(g.line, op_text(g), *ctx_, g.op == op_kind::decode, rc);
}

}  // namespace kvsim
