#include "report/html_report.h"
#include "util/xml_escape.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <string>

namespace kvsim {

namespace {
using json = nlohmann::json;

// Distinct colours for sequence ids (id mod 12); shared cells grey, empty white.
const char * const k_seq_colors[12] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                       "#e377c2", "#17becf", "#bcbd22", "#393b79", "#e7ba52", "#637939"};
constexpr const char * k_shared_color = "#9e9e9e";

std::string esc(const std::string & s) { return xml_escape(s); }

std::string num(double v) {
    if (v == 0) return "0";
    const double a = std::fabs(v);
    if (a >= 1e6 || a < 1e-3) return fmt::format("{:.3g}", v);
    if (a >= 100) return fmt::format("{:.0f}", v);
    return fmt::format("{:.4g}", v);
}

std::string json_text(const json & v) {
    if (v.is_number_float()) return num(v.get<double>());
    if (v.is_string()) return v.get<std::string>();
    if (v.is_null()) return "-";
    return v.dump();
}

// 1-2-5 tick step giving about `n` ticks over `span`.
double tick_step(double span, int n) {
    const double raw = span / n, p = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0}) {
        if (m * p >= raw) return m * p;
    }
    return 10 * p;
}

// Tick values from lo to hi at a round step, at most 2n + 1 of them. Degenerate ranges (one point,
// a span below the doubles' resolution at that magnitude, non-finite values) give the ends only:
// a step that no longer moves v once added (v + step == v) used to loop until memory ran out.
std::vector<double> ticks(double lo, double hi, int n) {
    const double step = tick_step(hi - lo, n);
    std::vector<double> v;
    if (!(std::isfinite(step) && step > 0 && std::isfinite(lo) && std::isfinite(hi))) return {lo};
    const double first = std::ceil(lo / step) * step;
    for (int i = 0; i <= 2 * n; ++i) {
        const double x = first + i * step;
        if (x > hi + step * 1e-9 || (!v.empty() && x <= v.back())) break;
        v.push_back(x);
    }
    if (v.empty()) v.push_back(lo);
    return v;
}

struct series {
    std::string name, color;
    std::vector<std::pair<double, double>> pts;
    bool dashed = false;
    bool scatter = false;
};

struct marker {
    double x;
    std::string color, label;
};

struct chart {
    std::string title, xlabel, ylabel;
    std::vector<series> lines;
    std::vector<marker> markers;
    double width = 1200, height = 300;
};

// An SVG line/scatter chart with axes, ticks, legend and vertical event markers.
std::string render_chart(const chart & c) {
    const double l = 80, r = 20, t = 30, b = 45, w = c.width - l - r, h = c.height - t - b;
    double x0 = INFINITY, x1 = -INFINITY, y1 = 0;
    for (const auto & s : c.lines) {
        for (auto [x, y] : s.pts) {
            x0 = std::min(x0, x);
            x1 = std::max(x1, x);
            y1 = std::max(y1, y);
        }
    }
    for (const auto & m : c.markers) {
        x0 = std::min(x0, m.x);
        x1 = std::max(x1, m.x);
    }
    if (!std::isfinite(x0)) x0 = 0, x1 = 1;
    if (!(x1 - x0 > std::abs(x0) * 1e-9)) x1 = x0 + std::max(1.0, std::abs(x0) * 1e-6);
    if (y1 <= 0) y1 = 1;
    y1 *= 1.05;
    auto X = [&](double x) { return l + (x - x0) / (x1 - x0) * w; };
    auto Y = [&](double y) { return t + h - y / y1 * h; };
    std::string o = fmt::format("<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\">\n",
                                c.width, c.height);
    o += fmt::format("<text x=\"{}\" y=\"18\" class=\"title\">{}</text>\n", l, esc(c.title));
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"plot\"/>\n", l, t, w, h);
    for (double v : ticks(0, y1, 5)) {
        o += fmt::format("<line x1=\"{0}\" x2=\"{1}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\" class=\"grid\"/><text x=\"{3}\" y=\"{4:.1f}\" class=\"yt\">{5}</text>\n",
                         l, l + w, Y(v), l - 6, Y(v) + 4, num(v));
    }
    for (double v : ticks(x0, x1, 8)) {
        o += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" class=\"grid\"/><text x=\"{0:.1f}\" y=\"{3}\" class=\"xt\">{4}</text>\n",
                         X(v), t, t + h, t + h + 16, num(v));
    }
    o += fmt::format("<text x=\"{}\" y=\"{}\" class=\"xl\">{}</text>\n", l + w / 2, c.height - 6, esc(c.xlabel));
    o += fmt::format("<text x=\"14\" y=\"{0}\" class=\"yl\" transform=\"rotate(-90 14 {0})\">{1}</text>\n", t + h / 2, esc(c.ylabel));
    for (const auto & m : c.markers) {
        o += fmt::format("<line x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2}\" stroke=\"{3}\" class=\"marker\"><title>{4}</title></line>\n",
                         X(m.x), t, t + h, m.color, esc(m.label));
    }
    double lx = l + 12 + 7.5 * (double) c.title.size();   // legend on the title line, clear of the data
    for (const auto & s : c.lines) {
        if (s.scatter) {
            o += fmt::format("<g data-series=\"{}\" fill=\"{}\">", esc(s.name), s.color);
            for (auto [x, y] : s.pts) o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\"/>", X(x), Y(y));
            o += "</g>\n";
        } else {
            o += fmt::format("<polyline data-series=\"{}\" stroke=\"{}\" class=\"line{}\" points=\"", esc(s.name), s.color,
                             s.dashed ? " dashed" : "");
            for (size_t i = 0; i < s.pts.size(); ++i) o += fmt::format("{}{:.1f},{:.1f}", i ? " " : "", X(s.pts[i].first), Y(s.pts[i].second));
            o += "\"/>\n";
        }
        o += fmt::format("<rect x=\"{:.0f}\" y=\"{}\" width=\"12\" height=\"4\" fill=\"{}\"/><text x=\"{:.0f}\" y=\"{}\" class=\"lg\">{}</text>\n",
                         lx, 12, s.color, lx + 16, 18, esc(s.name));
        lx += 30 + 7.0 * (double) s.name.size();
    }
    return o + "</svg>\n";
}

const json * find_cache(const json & summary, const std::string & name) {
    if (!summary.contains("config") || !summary["config"].contains("caches")) return nullptr;
    for (const auto & c : summary["config"]["caches"]) {
        if (c.value("name", "") == name) return &c;
    }
    return nullptr;
}

// Rows of obj, nested objects flattened to "outer.inner" keys (totals.ram_cache.saves, ...).
void kv_rows(const json & obj, const std::string & prefix, std::string & o) {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
        if (it.value().is_object()) {
            kv_rows(it.value(), prefix + it.key() + ".", o);
            continue;
        }
        o += fmt::format("<tr><th>{}</th><td>{}</td></tr>", esc(prefix + it.key()), esc(json_text(it.value())));
    }
}

std::string kv_table(const json & obj) {
    std::string o = "<table>";
    kv_rows(obj, "", o);
    return o + "</table>\n";
}

std::string header_section(const json & s) {
    std::string o = "<h1>kvsim report</h1>\n<p class=\"sub\">";
    if (s.contains("config")) {
        const json & cfg = s["config"];
        o += fmt::format("{} &middot; {} &middot; model {}", esc(json_text(cfg.value("trace", json()))), esc(json_text(s.value("kind", json()))),
                         esc(cfg.contains("model") ? json_text(cfg["model"].value("name", json())) : "-"));
    }
    o += "</p>\n<div class=\"tables\">";
    for (const char * k : {"totals", "peaks"}) {
        if (s.contains(k) && s[k].is_object()) o += fmt::format("<div><h3>{}</h3>{}</div>", k, kv_table(s[k]));
    }
    if (s.contains("config") && s["config"].contains("context")) o += fmt::format("<div><h3>context</h3>{}</div>", kv_table(s["config"]["context"]));
    return o + "</div>\n";
}

// Rows of one cache in time order.
std::map<std::string, std::vector<const occupancy_row *>> rows_by_cache(const std::vector<occupancy_row> & rows) {
    std::map<std::string, std::vector<const occupancy_row *>> m;
    for (const auto & r : rows) m[r.cache].push_back(&r);
    return m;
}

std::string occupancy_section(const html_report_input & in) {
    if (!in.occupancy || in.occupancy->empty()) return {};
    const bool by_time = std::any_of(in.occupancy->begin(), in.occupancy->end(), [](const auto & r) { return r.sim_time > 0; });
    std::string o = "<h2>Occupancy</h2>\n<p>Cells per cache after each sampled ubatch. Red lines: llama_decode returned 1 (no slot); "
                    "purple lines: K-shift applied (context shift).</p>\n";
    for (const auto & [name, rows] : rows_by_cache(*in.occupancy)) {
        chart c;
        c.title = fmt::format("cache '{}'", name);
        c.xlabel = by_time ? "simulated time (s)" : "ubatch";
        c.ylabel = "cells";
        auto xv = [&](const occupancy_row & r) { return by_time ? r.sim_time : (double) r.ubatch; };
        series used{"used cells", "#1f77b4", {}}, nkv{"n_kv", "#ff7f0e", {}};
        for (size_t i : downsample_indices(rows.size(), HTML_MAX_POINTS)) {
            used.pts.emplace_back(xv(*rows[i]), rows[i]->used);
            nkv.pts.emplace_back(xv(*rows[i]), rows[i]->n_kv);
        }
        c.lines = {used, nkv};
        if (const json * cj = find_cache(in.summary, name)) {
            const double kv = cj->value("kv_size", 0.0) * cj->value("n_stream", 1.0);
            c.lines.push_back({"kv_size", "#555", {{xv(*rows.front()), kv}, {xv(*rows.back()), kv}}, true});
        }
        for (size_t i = 1; i < rows.size(); ++i) {
            if (rows[i]->slot_failures > rows[i - 1]->slot_failures) {
                c.markers.push_back({xv(*rows[i]), "#d62728", fmt::format("{} slot failure(s)", rows[i]->slot_failures - rows[i - 1]->slot_failures)});
            }
        }
        if (in.cell_map) {
            for (const auto & k : in.cell_map->k_shifts()) {
                if (k.cache == name) c.markers.push_back({by_time ? k.sim_time : (double) k.ubatch, "#9467bd", fmt::format("K-shift of {} cells", k.cells)});
            }
        }
        o += render_chart(c);
        if (rows.back()->swa_reused > 0) {
            chart s;
            s.title = fmt::format("cache '{}': SWA-masked cells reused (cumulative)", name);
            s.xlabel = c.xlabel;
            s.ylabel = "cells";
            s.height = 220;
            series sr{"SWA-reused cells", "#2ca02c", {}};
            for (size_t i : downsample_indices(rows.size(), HTML_MAX_POINTS)) sr.pts.emplace_back(xv(*rows[i]), (double) rows[i]->swa_reused);
            s.lines = {sr};
            o += render_chart(s);
        }
    }
    return o;
}

std::string strip_svg(const cell_map & m) {
    const auto idx = downsample_indices(m.rows.size(), HTML_MAX_STRIP_ROWS);
    std::string times;
    for (size_t k = 0; k < idx.size(); ++k) times += fmt::format("{}{}", k ? "," : "", num(m.rows[idx[k]].sim_time));
    std::string o = fmt::format("<svg class=\"strip\" data-cache=\"{}\" data-cells-per-col=\"{}\" data-n-cols=\"{}\" data-times=\"{}\" "
                                "xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"400\" viewBox=\"0 0 {} {}\" "
                                "preserveAspectRatio=\"none\" shape-rendering=\"crispEdges\">\n",
                                esc(m.cache), m.cells_per_col, m.n_cols, times, m.n_cols, idx.size());
    for (size_t k = 0; k < idx.size(); ++k) {
        const auto & cols = m.rows[idx[k]].cols;
        for (size_t a = 0; a < cols.size();) {
            size_t b = a;
            while (b < cols.size() && cols[b] == cols[a]) ++b;
            if (cols[a] != CELL_COL_EMPTY) {
                o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"1\" class=\"{}\"/>", a, k, b - a,
                                 cols[a] == CELL_COL_SHARED ? std::string("csh") : fmt::format("c{}", cols[a] % 12));
            }
            a = b;
        }
        o += '\n';
    }
    return o + "</svg>\n";
}

std::string heat_section(const html_report_input & in) {
    if (!in.cell_map || in.cell_map->maps().empty()) return {};
    std::string o = "<h2>Cell map over time</h2>\n<p>Each row is a snapshot (time runs downwards), each column a group of adjacent "
                    "cells (streams end to end) coloured by the state most of its cells are in: a sequence, shared by several "
                    "sequences (grey), or empty (white). Holes between sequences are fragmentation.</p>\n<p class=\"legend\">";
    for (int s = 0; s < 12; ++s) o += fmt::format("<span class=\"sw\" style=\"background:{}\"></span>seq {}{} ", k_seq_colors[s], s, s == 11 ? "" : "");
    o += fmt::format("(id mod 12) <span class=\"sw\" style=\"background:{}\"></span>shared <span class=\"sw empty\"></span>empty</p>\n", k_shared_color);
    for (const auto & m : in.cell_map->maps()) {
        if (m.rows.empty()) continue;
        o += fmt::format("<h3>cache '{}': {} cells, {} per column, {} snapshots (ubatch {} to {})</h3>\n", esc(m.cache), m.n_cells,
                         m.cells_per_col, std::min(m.rows.size(), HTML_MAX_STRIP_ROWS), m.rows.front().ubatch, m.rows.back().ubatch);
        o += "<div class=\"stripbox\">" + strip_svg(m) + "<div class=\"hover\"></div></div>\n";
    }
    return o;
}

series cdf(const std::string & name, const std::string & color, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    series s{name, color, {}};
    for (size_t i : downsample_indices(v.size(), HTML_MAX_POINTS)) s.pts.emplace_back(v[i], (double) (i + 1) / (double) v.size());
    return s;
}

std::string latency_section(const html_report_input & in) {
    if (!in.requests || in.requests->empty()) return {};
    std::vector<double> ttft, tpot, queue;
    for (const auto & r : *in.requests) {
        if (r.first_token >= 0) ttft.push_back(r.first_token - r.arrival);
        if (r.admission >= 0) queue.push_back(r.admission - r.arrival);
        if (r.outcome != request_outcome::failed && r.n_gen >= 2 && r.first_token >= 0) tpot.push_back((r.finish - r.first_token) / (r.n_gen - 1));
    }
    std::string o = "<h2>Request latency</h2>\n<p>Cumulative distributions over the requests that reached each event (simulated "
                    "seconds; step times from the device profile's model or measured kernels).</p>\n";
    if (in.summary.contains("time_accuracy")) {
        const auto & t = in.summary["time_accuracy"];
        o += fmt::format("<p>Device profile <b>{}</b> ({}). Time accuracy: {}.</p>\n", esc(t.value("profile", "")),
                         esc(t.value("source", "")), esc(t.value("note", "")));
    }
    if (in.summary.contains("latency")) {
        o += "<div class=\"tables\">";
        for (const auto & [k, v] : in.summary["latency"].items()) {
            if (v.is_object()) o += fmt::format("<div><h3>{}</h3>{}</div>", esc(k), kv_table(v));
        }
        o += "</div>\n";
    }
    const struct {
        const char * title;
        std::vector<double> * v;
        const char * color;
    } parts[] = {{"time to first token (s)", &ttft, "#1f77b4"}, {"time per output token (s)", &tpot, "#2ca02c"},
                 {"queueing delay (s)", &queue, "#d62728"}};
    for (const auto & p : parts) {
        if (p.v->empty()) continue;
        chart c;
        c.title = fmt::format("{}: CDF of {} requests", p.title, p.v->size());
        c.xlabel = p.title;
        c.ylabel = "fraction of requests";
        c.height = 240;
        c.lines = {cdf(p.title, p.color, *p.v)};
        o += render_chart(c);
    }
    return o;
}

std::string bandwidth_section(const html_report_input & in) {
    if (!in.bandwidth || in.bandwidth->empty()) return {};
    std::map<std::string, series> by_cache;
    double xmax = 0;
    size_t i = 0;
    for (const auto & r : *in.bandwidth) {
        series & s = by_cache[r.cache];
        if (s.name.empty()) s = {"attention GB/s, cache " + r.cache, k_seq_colors[i++ % 12], {}, false, true};
        s.pts.emplace_back(r.n_kv, r.attn_gbs);
        xmax = std::max(xmax, (double) r.n_kv);
    }
    chart c;
    c.title = "Achieved flash-attention decode bandwidth (measured, one layer) vs n_kv";
    c.xlabel = "n_kv (cells read per stream)";
    c.ylabel = "GB/s";
    for (auto & [k, s] : by_cache) c.lines.push_back(std::move(s));
    if (in.read_gbs_limit > 0) c.lines.push_back({fmt::format("measured read limit {:.0f} GB/s", in.read_gbs_limit), "#555", {{0, in.read_gbs_limit}, {xmax, in.read_gbs_limit}}, true});
    return "<h2>Attention bandwidth</h2>\n" + render_chart(c);
}

constexpr const char * k_style = R"(<style>
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;max-width:1240px}
h1{margin:0}h2{margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:14px;margin:12px 0 4px}
.sub{color:#666}.tables{display:flex;flex-wrap:wrap;gap:24px}table{border-collapse:collapse;font-size:12px}
th{text-align:left;font-weight:normal;color:#555;padding:1px 10px 1px 0}td{font-variant-numeric:tabular-nums}
svg.chart text{font-size:11px;fill:#333}.title{font-size:13px!important;font-weight:600}.plot{fill:none;stroke:#bbb}
.grid{stroke:#eee}.yt{text-anchor:end}.xt,.xl,.yl{text-anchor:middle}.line{fill:none;stroke-width:1.5}.dashed{stroke-dasharray:6 4}
.marker{stroke-width:1;opacity:.6}.lg{font-size:11px}
.stripbox{position:relative}svg.strip{border:1px solid #bbb;background:#fff;display:block}.hover{font-size:12px;color:#555;height:16px}
.legend{font-size:12px}.sw{display:inline-block;width:12px;height:12px;margin:0 3px -2px 6px;border:1px solid #ccc}.sw.empty{background:#fff}
.csh{fill:#9e9e9e})";

constexpr const char * k_script = R"(<script>
for (const s of document.querySelectorAll('svg.strip')) {
  const t = s.dataset.times.split(','), n = +s.dataset.nCols, w = +s.dataset.cellsPerCol, h = s.parentNode.querySelector('.hover');
  s.addEventListener('mousemove', e => {
    const r = s.getBoundingClientRect(), c = Math.floor((e.clientX - r.left) / r.width * n), k = Math.floor((e.clientY - r.top) / r.height * t.length);
    h.textContent = 'cells ' + c * w + '-' + ((c + 1) * w - 1) + ', snapshot at t = ' + t[Math.min(k, t.length - 1)] + ' s';
  });
}
</script>)";
}  // namespace

std::vector<size_t> downsample_indices(size_t n, size_t max_points) {
    std::vector<size_t> idx;
    if (n == 0) return idx;
    const size_t k = std::min(n, std::max<size_t>(2, max_points));
    idx.reserve(k);
    if (k == 1) return {0};
    for (size_t i = 0; i < k; ++i) idx.push_back((size_t) ((double) i * (double) (n - 1) / (double) (k - 1) + 0.5));
    return idx;
}

void write_html_report(std::ostream & out, const html_report_input & in) {
    out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>kvsim report</title>\n" << k_style;
    for (int s = 0; s < 12; ++s) out << fmt::format("\n.c{}{{fill:{}}}", s, k_seq_colors[s]);
    out << "\n</style>\n</head>\n<body>\n";
    out << header_section(in.summary) << occupancy_section(in) << heat_section(in) << latency_section(in) << bandwidth_section(in);
    out << k_script << "\n</body>\n</html>\n";
}

}  // namespace kvsim
