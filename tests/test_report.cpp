// report.html and the cell-map sampler behind its heat strip.
#include "kv/context.h"
#include "drive/op_runner.h"
#include "report/cell_map_sampler.h"
#include "report/html_report.h"
#include "report/occupancy.h"
#include "report/requests_report.h"
#include "sched/server_sim.h"
#include "trace/request_trace.h"

#include <doctest/doctest.h>

#include <fmt/format.h>
#include <fstream>
#include <cctype>
#include <sstream>

using namespace kvsim;

namespace {
llama_batch_in run(llama_seq_id s, llama_pos p0, uint32_t n) {
    llama_batch_in b;
    for (uint32_t i = 0; i < n; ++i) b.add(p0 + (llama_pos) i, {s});
    return b;
}

context_params params(uint32_t n_ctx, uint32_t n_seq_max, bool unified) {
    context_params p;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max;
    p.kv_unified = unified;
    return p;
}

class fanout : public decode_observer {
public:
    explicit fanout(std::vector<decode_observer *> o) : obs_(std::move(o)) {}
    void on_update(const kv_memory & m) override {
        for (auto * o : obs_) o->on_update(m);
    }
    void on_apply(const kv_cache & c, const slot_info & si, const ubatch & ub, uint32_t n_kv) override {
        for (auto * o : obs_) o->on_apply(c, si, ub, n_kv);
    }

private:
    std::vector<decode_observer *> obs_;
};

bool name_start(char c) { return std::isalpha((unsigned char) c) || c == '_' || c == ':'; }
bool name_char(char c) { return name_start(c) || std::isdigit((unsigned char) c) || c == '-' || c == '.'; }

// Attributes of a tag: ( spaces name="value" )* spaces, value without '"' or '<'. A hand scanner:
// std::regex recurses per character and overflows the stack on long attribute values.
bool attributes_ok(const std::string & rest) {
    size_t i = 0;
    while (i < rest.size()) {
        const size_t ws = i;
        while (i < rest.size() && std::isspace((unsigned char) rest[i])) ++i;
        if (i == rest.size()) return true;
        if (i == ws || !name_start(rest[i])) return false;
        while (i < rest.size() && name_char(rest[i])) ++i;
        if (i + 1 >= rest.size() || rest[i] != '=' || rest[i + 1] != '"') return false;
        const size_t close = rest.find('"', i + 2);
        if (close == std::string::npos || rest.find('<', i + 2) < close) return false;
        i = close + 1;
    }
    return true;
}

// Minimal XML well-formedness check: every tag closed in order, attributes quoted, no stray
// '<' or '&' in text. Returns "" when well formed, else what is wrong and where.
std::string xml_problem(const std::string & s) {
    std::vector<std::string> open;
    for (size_t i = 0; i < s.size();) {
        if (s[i] == '&') {
            const size_t e = s.find(';', i);
            if (e == std::string::npos || e - i > 10 || e == i + 1) return fmt::format("bad entity at {}", i);
            i = e + 1;
            continue;
        }
        if (s[i] != '<') {
            ++i;
            continue;
        }
        const size_t e = s.find('>', i);
        if (e == std::string::npos) return fmt::format("unterminated tag at {}", i);
        std::string tag = s.substr(i + 1, e - i - 1);
        i = e + 1;
        if (tag.rfind("!DOCTYPE", 0) == 0) continue;
        if (!tag.empty() && tag[0] == '/') {
            if (open.empty() || open.back() != tag.substr(1)) return fmt::format("</{}> closes <{}>", tag.substr(1), open.empty() ? "" : open.back());
            open.pop_back();
            continue;
        }
        const bool self = !tag.empty() && tag.back() == '/';
        if (self) tag.pop_back();
        if (tag.empty() || !name_start(tag[0])) return "bad tag name: " + tag.substr(0, 40);
        size_t n = 1;
        while (n < tag.size() && name_char(tag[n])) ++n;
        const std::string name = tag.substr(0, n), rest = tag.substr(n);
        if (!attributes_ok(rest)) return "bad attributes in <" + name + ">: " + rest.substr(0, 60);
        if (!self) open.push_back(name);
        if (!self && (name == "style" || name == "script")) {
            const size_t c = s.find("</" + name + ">", i);
            if (c == std::string::npos) return "unclosed " + name;
            if (s.substr(i, c - i).find('<') != std::string::npos) return "'<' inside " + name;
            i = c;
        }
    }
    return open.empty() ? std::string() : "unclosed <" + open.back() + ">";
}

size_t polyline_points(const std::string & html, const std::string & series, size_t nth = 0) {
    size_t at = 0;
    for (size_t k = 0; k <= nth; ++k) {
        at = html.find("data-series=\"" + series + "\"", at);
        if (at == std::string::npos) return 0;
        at += 1;
    }
    const size_t b = html.find("points=\"", at) + 8, e = html.find('"', b);
    std::istringstream in(html.substr(b, e - b));
    size_t n = 0;
    std::string p;
    while (in >> p) n += p.find(',') != std::string::npos;
    return n;
}

size_t count(const std::string & s, const std::string & what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}
}  // namespace

TEST_CASE("xml_problem catches what it must (the checker itself can fail)") {
    CHECK(xml_problem("<a><b x=\"1\"/></a>").empty());
    CHECK(!xml_problem("<a><b></a></b>").empty());
    CHECK(!xml_problem("<a x=1></a>").empty());
    CHECK(!xml_problem("<a>1 & 2</a>").empty());
    CHECK(!xml_problem("<a>").empty());
}

TEST_CASE("downsample_indices: evenly spaced, first and last kept, never more than asked") {
    CHECK(downsample_indices(0, 10).empty());
    CHECK(downsample_indices(1, 10) == std::vector<size_t>{0});
    CHECK(downsample_indices(5, 10) == std::vector<size_t>{0, 1, 2, 3, 4});
    CHECK(downsample_indices(11, 3) == std::vector<size_t>{0, 5, 10});
    CHECK(downsample_indices(1000, 7).size() == 7);
    CHECK(downsample_indices(1000, 7).back() == 999);
}

TEST_CASE("cell_map_sampler: dominant state per column, shared cells, holes, K-shift events") {
    context ctx(model_preset("tiny-llama"), params(256, 4, true));
    const sim_clock clock;
    cell_map_sampler cm(clock, 64, 400, 1);
    REQUIRE(ctx.decode(run(0, 0, 10), &cm) == DECODE_OK);   // cells 0-9
    REQUIRE(ctx.decode(run(1, 0, 6), &cm) == DECODE_OK);    // cells 10-15
    REQUIRE(cm.maps().size() == 1);
    const cell_map & m = cm.maps()[0];
    CHECK(m.cache == "kv");
    CHECK(m.n_cells == 256);
    CHECK(m.cells_per_col == 4);
    CHECK(m.n_cols == 64);
    REQUIRE(m.rows.size() == 2);
    const auto & r1 = m.rows[1].cols;
    REQUIRE(r1.size() == 64);
    CHECK(r1[0] == 0);
    CHECK(r1[1] == 0);
    CHECK(r1[2] == 0);   // cells 8,9 seq 0 and 10,11 seq 1: the tie goes to the state seen first
    CHECK(r1[3] == 1);
    CHECK(r1[4] == CELL_COL_EMPTY);
    CHECK(m.rows[0].cols[2] == 0);
    CHECK(m.rows[0].cols[3] == CELL_COL_EMPTY);

    ctx.memory().seq_cp(0, 2, 0, 4);          // cells 0-3 now hold {0, 2}
    ctx.memory().seq_rm(0, 4, 8);             // a hole at cells 4-7
    ctx.memory().seq_add(1, 0, -1, 3);        // pending K-shift of seq 1's 6 cells
    REQUIRE(ctx.decode(run(1, 9, 1), &cm) == DECODE_OK);   // head 16 -> cell 16
    REQUIRE(m.rows.size() == 3);
    const auto & r2 = m.rows[2].cols;
    CHECK(r2[0] == CELL_COL_SHARED);
    CHECK(r2[1] == CELL_COL_EMPTY);
    CHECK(r2[4] == CELL_COL_EMPTY);   // cell 16 alone among 4
    CHECK(m.rows[2].ubatch == 3);
    REQUIRE(cm.k_shifts().size() == 1);
    CHECK(cm.k_shifts()[0].cells == 6);
    CHECK(cm.k_shifts()[0].ubatch == 2);
    CHECK(cm.k_shifts()[0].cache == "kv");
}

TEST_CASE("cell_map_sampler: the interval doubles and rows thin out, keeping multiples of it") {
    context ctx(model_preset("tiny-llama"), params(256, 1, false));
    sim_clock clock;
    for (int i = 0; i < 7; ++i) clock.begin_step();
    clock.advance(1.5);
    cell_map_sampler cm(clock, 512, 2, 1);
    for (int i = 0; i < 9; ++i) REQUIRE(ctx.decode(run(0, i, 1), &cm) == DECODE_OK);
    const auto & rows = cm.maps().at(0).rows;
    std::vector<uint64_t> ub;
    for (const auto & r : rows) ub.push_back(r.ubatch);
    CHECK(ub == std::vector<uint64_t>{1, 5, 9});
    CHECK(rows[0].step == 7);
    CHECK(rows[0].sim_time == 1.5);
    CHECK(cm.maps()[0].n_cols == 256);   // fewer cells than columns: one cell per column
}

// The snapshot walks the cells in runs of one state (and the empty tail past used_max_p1 as one run): each
// column's dominant state must still be the per-cell count's, ties to the state seen first, holes included.
TEST_CASE("cell_map_sampler: ties inside a column, holes below the last used cell, a column across two streams") {
    const sim_clock clock;
    {
        context ctx(model_preset("tiny-llama"), params(256, 4, true));
        cell_map_sampler cm(clock, 64, 400, 1);   // 4 cells per column
        REQUIRE(ctx.decode(run(1, 0, 1), &cm) == DECODE_OK);   // cell 0
        REQUIRE(ctx.decode(run(0, 0, 2), &cm) == DECODE_OK);   // cells 1-2
        REQUIRE(ctx.decode(run(1, 1, 1), &cm) == DECODE_OK);   // cell 3
        REQUIRE(ctx.decode(run(2, 0, 8), &cm) == DECODE_OK);   // cells 4-11
        ctx.memory().seq_rm(2, 2, 6);                          // positions 2-5: cells 6-9 empty
        REQUIRE(ctx.decode(run(3, 0, 2), &cm) == DECODE_OK);   // seq_rm moved the head back to cell 6: cells 6-7
        const auto & cols = cm.maps().at(0).rows.back().cols;
        CHECK(cols[0] == 1);                // 1 0 0 1: two each, seq 1 seen first
        CHECK(cols[1] == 2);                // 2 2 3 3
        CHECK(cols[2] == CELL_COL_EMPTY);   // - - 2 2: the hole below the last used cell wins the tie
        CHECK(cols[3] == CELL_COL_EMPTY);
        CHECK(cols[63] == CELL_COL_EMPTY);
    }
    {
        context ctx(model_preset("tiny-llama"), params(512, 2, false));   // two streams of 256 cells
        cell_map_sampler cm(clock, 200, 400, 1);                       // 3 cells per column, 171 columns
        REQUIRE(ctx.decode(run(0, 0, 4), &cm) == DECODE_OK);           // stream 0, cells 0-3
        REQUIRE(ctx.decode(run(1, 0, 2), &cm) == DECODE_OK);           // stream 1, cells 0-1 (cells 256-257 end to end)
        const cell_map & m = cm.maps().at(0);
        REQUIRE(m.cells_per_col == 3);
        REQUIRE(m.n_cols == 171);
        const auto & cols = m.rows.back().cols;
        REQUIRE(cols.size() == 171);
        CHECK(cols[0] == 0);
        CHECK(cols[1] == CELL_COL_EMPTY);   // cell 3 of seq 0, cells 4-5 empty
        CHECK(cols[84] == CELL_COL_EMPTY);
        CHECK(cols[85] == 1);               // cell 255 of stream 0 (empty), cells 0-1 of stream 1 (seq 1)
        CHECK(cols[86] == CELL_COL_EMPTY);
        CHECK(cols[170] == CELL_COL_EMPTY);   // the last column holds 2 cells
    }
}

TEST_CASE("cell_map_sampler: one map per cache of an iSWA model, streams laid end to end") {
    context ctx(model_preset("tiny-gemma3-swa"), params(512, 2, false));
    const sim_clock clock;
    cell_map_sampler cm(clock, 100);
    REQUIRE(ctx.decode(run(1, 0, 12), &cm) == DECODE_OK);
    REQUIRE(cm.maps().size() == 2);
    CHECK(cm.maps()[0].cache == "base");
    CHECK(cm.maps()[1].cache == "swa");
    const cell_map & b = cm.maps()[0];
    CHECK(b.n_stream == 2);
    CHECK(b.n_cells == 2 * ctx.sizes().kv_size);
    CHECK(b.n_cols <= 100);
    const size_t col = (ctx.sizes().kv_size + b.cells_per_col - 1) / b.cells_per_col;   // first column all in stream 1
    CHECK(b.rows[0].cols[col] == 1);
    CHECK(b.rows[0].cols[0] == CELL_COL_EMPTY);
}

TEST_CASE("report.html from a scheduler replay: well-formed, one point per occupancy row, every section") {
    const std::string trace = std::string(KVSIM_SOURCE_DIR) + "/traces/requests/azure_sample.csv";
    const request_trace t = read_request_trace(trace);
    context ctx(model_preset("llama-3-8b"), params(4096, 4, true));
    op_runner run_ops(ctx, nullptr, nullptr, nullptr);
    step_time_model tm{device_preset("h200-datasheet"), ctx.model()};
    server_sim sim(run_ops, server_params{}, tm);
    occupancy_recorder occ(1, sim.clock(), &sim.totals().decode_no_slot);
    cell_map_sampler cm(sim.clock());
    fanout fan({&occ, &cm});
    run_ops.set_observer(&fan);
    sim.run(t);

    std::vector<bandwidth_row> bw(3);
    for (size_t i = 0; i < bw.size(); ++i) {
        bw[i].cache = "kv";
        bw[i].n_kv = 256 * (uint32_t) (i + 1);
        bw[i].attn_gbs = 100.0 * (double) (i + 1);
    }
    html_report_input in;
    in.summary = {{"kind", "request_trace"},
                  {"config", {{"trace", "a<b>&c"}, {"model", {{"name", "llama-3-8b"}}}, {"caches", {{{"name", "kv"}, {"kv_size", 4096}, {"n_stream", 1}}}}}},
                  {"totals", {{"requests", t.requests.size()}}},
                  {"latency", latency_summary(sim.results())}};
    in.occupancy = &occ.rows();
    in.requests = &sim.results();
    in.bandwidth = &bw;
    in.cell_map = &cm;
    in.read_gbs_limit = 400;
    std::ostringstream os;
    write_html_report(os, in);
    const std::string html = os.str();
    {
        std::ofstream f(std::string(KVSIM_BINARY_DIR) + "/report-example.html");
        f << html;
    }
    CHECK(xml_problem(html) == "");
    CHECK(html.find("http") == html.find("http://www.w3.org/2000/svg"));   // no link out but the SVG namespace
    CHECK(html.find("a&lt;b&gt;&amp;c") != std::string::npos);
    REQUIRE(occ.rows().size() > 100);
    CHECK(polyline_points(html, "used cells") == std::min(occ.rows().size(), HTML_MAX_POINTS));
    CHECK(polyline_points(html, "n_kv") == std::min(occ.rows().size(), HTML_MAX_POINTS));
    CHECK(polyline_points(html, "kv_size") == 2);
    CHECK(count(html, "<svg class=\"strip\"") == 1);
    const size_t strip_rows = std::min(cm.maps()[0].rows.size(), HTML_MAX_STRIP_ROWS);
    CHECK(html.find(fmt::format("viewBox=\"0 0 512 {}\"", strip_rows)) != std::string::npos);
    CHECK(html.find("time to first token") != std::string::npos);
    CHECK(html.find("queueing delay") != std::string::npos);
    CHECK(count(html, "<circle") == 3);
    CHECK(html.find("measured read limit 400 GB/s") != std::string::npos);
}

TEST_CASE("report.html: slot failures become markers; sections without data are left out") {
    std::vector<occupancy_row> rows(4);
    for (size_t i = 0; i < rows.size(); ++i) {
        rows[i].ubatch = i + 1;
        rows[i].cache = "kv";
        rows[i].used = 10 * (uint32_t) i;
        rows[i].n_kv = 256;
    }
    rows[2].slot_failures = 1;
    rows[3].slot_failures = 3;
    html_report_input in;
    in.occupancy = &rows;
    std::ostringstream os;
    write_html_report(os, in);
    const std::string html = os.str();
    CHECK(xml_problem(html) == "");
    CHECK(count(html, "class=\"marker\"") == 2);
    CHECK(html.find("2 slot failure(s)") != std::string::npos);
    CHECK(polyline_points(html, "used cells") == 4);
    CHECK(html.find("ubatch</text>") != std::string::npos);   // no simulated time: x is the ubatch
    CHECK(html.find("Cell map") == std::string::npos);
    CHECK(html.find("Request latency") == std::string::npos);
    CHECK(html.find("Attention bandwidth") == std::string::npos);
}

TEST_CASE("load_summary: offered and served rates, the waiting queue, overload by hand") {
    const auto r = [](double arrival, double admission, double finish, request_outcome o) {
        request_result x;
        x.arrival = arrival;
        x.admission = admission;
        x.finish = finish;
        x.outcome = o;
        return x;
    };
    // 5 requests over 4 s of arrivals; one slot. Waiting (arrived, not admitted): at t=1 request 1 waits
    // (admitted at 2), at t=2 request 2 arrives and waits (admitted 3.5), at t=3 request 3 too, so
    // the queue reaches 2 at t=3 (requests 2 and 3).
    const std::vector<request_result> rs = {
        r(0, 0, 2, request_outcome::done),          r(1, 2, 3.5, request_outcome::done),
        r(2, 3.5, 5, request_outcome::truncated),   r(3, 5, 6, request_outcome::done),
        r(4, -1, -1, request_outcome::failed),
    };
    const auto l = load_summary(rs, 1);
    CHECK(l["offered_rps"].get<double>() == doctest::Approx(5.0 / 4.0));   // 5 requests over arrivals 0..4
    CHECK(l["served_rps"].get<double>() == doctest::Approx(4.0 / 6.0));    // done + truncated over 0..6
    CHECK(l["queue_max"].get<int64_t>() == 2);
    // at t=4: requests 2 (finishes 5) and 3 (finishes 6) unfinished; 4 failed (not a backlog)
    CHECK(l["backlog_at_last_arrival"].get<uint64_t>() == 2);
    CHECK(!l["overloaded"].get<bool>());   // 2 <= max(4 x 1 slot, 5 % of 5)
    // 100 requests one per second, one slot, each served in 2 s: the backlog grows to half the trace
    std::vector<request_result> slow;
    for (int i = 0; i < 100; ++i) slow.push_back(r(i, 2.0 * i, 2.0 * i + 2, request_outcome::done));
    const auto s = load_summary(slow, 1);
    CHECK(s["served_rps"].get<double>() == doctest::Approx(100.0 / 200.0));
    CHECK(s["backlog_at_last_arrival"].get<uint64_t>() == 51);   // 100 arrived by t=99, finished: 2i+2 <= 99, i <= 48: 49
    CHECK(s["overloaded"].get<bool>());
}
