#include "plan/plan_report.h"
#include "core/errors.h"

#include "util/xml_escape.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <map>

namespace kvsim {

namespace {
constexpr double k_gib = 1024.0 * 1024.0 * 1024.0;

std::string slo_text(const plan_slo & s) {
    if (s.ttft_s <= 0 && s.tpot_s <= 0) return "none: goodput = requests done per simulated second";
    std::string t;
    if (s.ttft_s > 0) t += fmt::format("TTFT <= {:g} s", s.ttft_s);
    if (s.tpot_s > 0) t += fmt::format("{}TPOT <= {:g} s", t.empty() ? "" : ", ", s.tpot_s);
    return t;
}

nlohmann::json config_json(const plan_config & c) {
    return {{"n_parallel", c.n_parallel}, {"n_ctx", c.n_ctx},           {"type_k", ggml_type_name(c.type_k)},
            {"type_v", ggml_type_name(c.type_v)}, {"kv_unified", c.kv_unified}, {"n_ubatch", c.n_ubatch},
            {"cache_ram_mib", c.cache_ram_mib}};
}

nlohmann::json metrics_json(const plan_metrics & m) {
    nlohmann::json j = {{"rate_capped", m.rate_capped}};
    for (const auto & [key, member] : k_plan_metric_counts) j[key] = m.*member;
    for (const auto & [key, member] : k_plan_metric_reals) j[key] = m.*member;
    return j;
}

std::string ms(double s) { return fmt::format("{:.0f}", s * 1e3); }

std::vector<const plan_point *> ok_points(const plan_result & r) {
    std::vector<const plan_point *> v;
    for (const auto & p : r.points) {
        if (p.status == plan_status::ok) v.push_back(&p);
    }
    return v;
}
}  // namespace

std::string plan_config_flags(const plan_config & c) {
    return fmt::format("-np {} -c {} -ctk {} -ctv {} {} -ub {} -cram {}", c.n_parallel, c.n_ctx, ggml_type_name(c.type_k),
                       ggml_type_name(c.type_v), c.kv_unified ? "-kvu" : "-no-kvu", c.n_ubatch, c.cache_ram_mib);
}

void print_plan_table(std::ostream & out, const plan_result & r, size_t max_rows) {
    const plan_header & h = r.header;
    out << fmt::format("kvsim plan {}: {} points{}, model {}, weights {}, device {} ({}), memory {:.1f} GiB - margin {:.1f} GiB\n",
                       escape_controls(h.trace), r.points.size(), h.shard.count > 1 ? " (shard " + shard_text(h.shard) + ")" : "", h.model, h.weights,
                       h.device, h.device_source, h.memory_bytes / k_gib, h.margin_bytes / k_gib);
    if (!h.device_accuracy.empty()) out << "  time accuracy: " << h.device_accuracy << '\n';
    out << fmt::format("  objectives: {}; * = Pareto front (goodput, TTFT p99, device memory)\n", slo_text(h.slo));
    for (const auto & w : h.warnings) out << "  WARNING: " << w << '\n';
    const auto ok = ok_points(r);
    const bool rates = h.options.contains("find_rate");
    out << fmt::format("  {:>4} {:1} {:<56} {:>7} {:>6} {:>5} {:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6}{}\n", "rank", "", "configuration",
                       "dev GiB", "done", "trunc", "fail", "goodput/s", "TTFT50ms", "TTFT99ms", "TPOT50ms", "TPOT99ms", "purges",
                       rates ? fmt::format(" {:>10}", "max req/s") : "");
    const size_t n = max_rows ? std::min(max_rows, ok.size()) : ok.size();
    for (size_t i = 0; i < n; ++i) {
        const plan_point & p = *ok[i];
        const plan_metrics & m = p.metrics;
        out << fmt::format("  {:>4} {:1} {:<56} {:>7.2f} {:>6} {:>5} {:>5} {:>9.3f} {:>8} {:>8} {:>8} {:>8} {:>6}{}\n", p.rank,
                           p.pareto ? "*" : "", plan_config_flags(p.config), p.memory.device() / k_gib, m.done, m.truncated,
                           m.failed, m.goodput_rps, ms(m.ttft_p50), ms(m.ttft_p99), ms(m.tpot_p50), ms(m.tpot_p99),
                           m.idle_slot_purges, rates ? fmt::format(" {:>9.3f}{}", m.max_rate_rps, m.rate_capped ? "+" : " ") : "");
    }
    if (n < ok.size()) out << fmt::format("  ... {} more ok points in plan.csv\n", ok.size() - n);
    std::map<plan_status, std::pair<size_t, std::string>> others;
    for (const auto & p : r.points) {
        if (p.status == plan_status::ok) continue;
        auto & o = others[p.status];
        if (o.first++ == 0) o.second = plan_config_flags(p.config) + (p.reason.empty() ? "" : ": " + p.reason);
    }
    for (const auto & [s, o] : others) out << fmt::format("  {} {}, e.g. {}\n", o.first, plan_status_name(s), o.second);
    if (r.points.empty()) {
        out << fmt::format("  this shard ({}) holds none of the grid's {} points\n", shard_text(h.shard), h.n_points);
    } else if (ok.empty()) {
        const bool all_no_fit = others.size() == 1 && others.count(plan_status::no_fit);
        out << (all_no_fit ? "  nothing fits: no point leaves the margin free within the memory\n"
                           : "  no point could be replayed (the reasons above)\n");
    }
    if (r.interrupted) out << "  INTERRUPTED: points not run are listed as not_run\n";
    out << fmt::format("  wall time {:.1f} s\n", r.wall_seconds);
}

void write_plan_csv(std::ostream & out, const plan_result & r) {
    out << "rank,pareto,status,n_parallel,n_ctx,type_k,type_v,kv_unified,n_ubatch,cache_ram_mib,device_bytes,model_bytes,"
           "context_bytes,compute_bytes,requests,done,truncated,failed,pending,slo_met,goodput_rps,ttft_p50_s,ttft_p99_s,"
           "tpot_p50_s,tpot_p99_s,gen_tokens_per_s,sim_seconds,idle_slot_purges,ram_restores,prefix_tokens_reused,max_rate_scale,"
           "max_rate_rps,rate_capped,reason\n";
    for (const auto & p : r.points) {
        const plan_config & c = p.config;
        const plan_metrics & m = p.metrics;
        std::string reason = p.reason;
        std::replace(reason.begin(), reason.end(), '"', '\'');
        out << fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.3f},{:.6f},{},{},{},"
                           "{:.6g},{:.6f},{},\"{}\"\n",
                           p.rank, p.pareto ? 1 : 0, plan_status_name(p.status), c.n_parallel, c.n_ctx, ggml_type_name(c.type_k),
                           ggml_type_name(c.type_v), c.kv_unified ? 1 : 0, c.n_ubatch, c.cache_ram_mib, p.memory.device(),
                           p.memory.model, p.memory.context, p.memory.compute, m.requests, m.done, m.truncated, m.failed,
                           m.pending, m.slo_met, m.goodput_rps, m.ttft_p50, m.ttft_p99, m.tpot_p50, m.tpot_p99,
                           m.gen_tokens_per_s, m.sim_seconds, m.idle_slot_purges, m.ram_restores, m.prefix_tokens_reused,
                           m.max_rate_scale, m.max_rate_rps, m.rate_capped ? 1 : 0, reason);
    }
}

nlohmann::json plan_json(const plan_result & r) {
    const plan_header & h = r.header;
    nlohmann::json pts = nlohmann::json::array();
    for (const auto & p : r.points) {
        nlohmann::json j = {{"index", p.index},
                            {"rank", p.rank},
                            {"pareto", p.pareto},
                            {"status", plan_status_name(p.status)},
                            {"config", config_json(p.config)},
                            {"flags", plan_config_flags(p.config)},
                            {"memory", {{"device_bytes", p.memory.device()}, {"model_bytes", p.memory.model},
                                        {"context_bytes", p.memory.context}, {"compute_bytes", p.memory.compute}}}};
        if (p.status == plan_status::ok) j["metrics"] = metrics_json(p.metrics);
        if (!p.reason.empty()) j["reason"] = p.reason;
        pts.push_back(std::move(j));
    }
    return {{"tool", "kvsim 0.1.0"},
            {"kind", "plan"},
            {"trace", h.trace},
            {"model", h.model},
            {"weights", h.weights},
            {"device", {{"name", h.device}, {"source", h.device_source}, {"time_accuracy", h.device_accuracy}}},
            {"memory_bytes", h.memory_bytes},
            {"margin_bytes", h.margin_bytes},
            {"slo", {{"ttft_s", h.slo.ttft_s}, {"tpot_s", h.slo.tpot_s}}},
            {"n_points", h.n_points},
            {"shard", shard_text(h.shard)},
            {"options", h.options},
            {"warnings", h.warnings},
            {"interrupted", r.interrupted},
            {"points", pts}};
}

namespace {
// The scatter's coordinates: x = TTFT p99 (log scale when it spans more than 10x), y = goodput.
struct axes {
    double x0, x1, y1;
    bool log_x;
    double x(double v) const {
        const double a = log_x ? std::log10(std::max(v, x0)) : v, lo = log_x ? std::log10(x0) : x0, hi = log_x ? std::log10(x1) : x1;
        return 60 + 620 * (hi > lo ? (a - lo) / (hi - lo) : 0.5);
    }
    double y(double v) const { return 340 - 300 * (y1 > 0 ? v / y1 : 0); }
};

axes scatter_axes(const std::vector<const plan_point *> & ok) {
    double x0 = 1e300, x1 = 0, y1 = 0;
    for (const plan_point * p : ok) {
        x0 = std::min(x0, std::max(p->metrics.ttft_p99, 1e-6));
        x1 = std::max(x1, p->metrics.ttft_p99);
        y1 = std::max(y1, p->metrics.goodput_rps);
    }
    return {x0, std::max(x1, x0), y1 * 1.05, x1 > 10 * x0};
}

void write_scatter(std::ostream & out, const std::vector<const plan_point *> & ok) {
    out << "<svg width=\"720\" height=\"380\" xmlns=\"http://www.w3.org/2000/svg\" font-family=\"sans-serif\" font-size=\"11\">\n"
           "<line x1=\"60\" y1=\"340\" x2=\"690\" y2=\"340\" stroke=\"#888\"/><line x1=\"60\" y1=\"30\" x2=\"60\" y2=\"340\" stroke=\"#888\"/>\n";
    if (ok.empty()) {
        out << "<text x=\"200\" y=\"190\">no point fits: nothing to plot</text></svg>\n";
        return;
    }
    const axes a = scatter_axes(ok);
    out << fmt::format("<text x=\"360\" y=\"372\" text-anchor=\"middle\">TTFT p99 (s{})</text>\n", a.log_x ? ", log scale" : "");
    out << "<text x=\"14\" y=\"190\" transform=\"rotate(-90 14 190)\" text-anchor=\"middle\">goodput (requests/s)</text>\n";
    out << fmt::format("<text x=\"60\" y=\"354\">{:.3g}</text><text x=\"680\" y=\"354\" text-anchor=\"end\">{:.3g}</text>"
                       "<text x=\"56\" y=\"44\" text-anchor=\"end\">{:.3g}</text>\n", a.x0, a.x1, a.y1);
    std::vector<const plan_point *> front;
    for (const plan_point * p : ok) {
        if (p->pareto) front.push_back(p);
        out << fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"><title>#{} {}</title></circle>\n",
                           a.x(p->metrics.ttft_p99), a.y(p->metrics.goodput_rps), p->pareto ? 5 : 3,
                           p->pareto ? "#c0392b" : "#7f8c8d", p->rank, xml_escape(plan_config_flags(p->config)));
    }
    std::sort(front.begin(), front.end(), [](auto * l, auto * r) { return l->metrics.ttft_p99 < r->metrics.ttft_p99; });
    out << "<polyline fill=\"none\" stroke=\"#c0392b\" points=\"";
    for (const plan_point * p : front) out << fmt::format("{:.1f},{:.1f} ", a.x(p->metrics.ttft_p99), a.y(p->metrics.goodput_rps));
    out << "\"/>\n</svg>\n";
}
}  // namespace

void write_plan_html(std::ostream & out, const plan_result & r) {
    const plan_header & h = r.header;
    const auto ok = ok_points(r);
    out << "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>kvsim plan</title>\n"
           "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:12px}"
           "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.l{text-align:left}tr.p{background:#fdecea}</style>"
           "</head><body>\n";
    out << fmt::format("<h1>kvsim plan</h1>\n<p>{} &mdash; model {}, weights {}, device {} ({}), memory {:.1f} GiB, margin {:.1f} "
                       "GiB; objectives: {}. {} points, {} replayed.</p>\n",
                       xml_escape(h.trace), xml_escape(h.model), xml_escape(h.weights), xml_escape(h.device),
                       xml_escape(h.device_source), h.memory_bytes / k_gib, h.margin_bytes / k_gib, xml_escape(slo_text(h.slo)),
                       r.points.size(), ok.size());
    if (!h.device_accuracy.empty()) out << "<p>Time accuracy: " << xml_escape(h.device_accuracy) << "</p>\n";
    for (const auto & w : h.warnings) out << "<p><b>Warning:</b> " << xml_escape(w) << "</p>\n";
    out << "<h2>Goodput against TTFT p99 (red: the Pareto front)</h2>\n";
    write_scatter(out, ok);
    out << "<h2>Ranked configurations</h2>\n<table><tr><th>rank</th><th>configuration</th><th>device GiB</th><th>done</th>"
           "<th>truncated</th><th>failed</th><th>goodput/s</th><th>TTFT p50 s</th><th>TTFT p99 s</th><th>TPOT p50 s</th>"
           "<th>TPOT p99 s</th><th>status</th></tr>\n";
    for (const auto & p : r.points) {
        const plan_metrics & m = p.metrics;
        out << fmt::format("<tr{}><td>{}</td><td class=\"l\">{}</td><td>{:.2f}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3f}</td>"
                           "<td>{:.3f}</td><td>{:.3f}</td><td>{:.4f}</td><td>{:.4f}</td><td class=\"l\">{}</td></tr>\n",
                           p.pareto ? " class=\"p\"" : "", p.rank ? std::to_string(p.rank) : "-",
                           xml_escape(plan_config_flags(p.config)), p.memory.device() / k_gib, m.done, m.truncated, m.failed,
                           m.goodput_rps, m.ttft_p50, m.ttft_p99, m.tpot_p50, m.tpot_p99,
                           xml_escape(plan_status_name(p.status) + (p.reason.empty() ? std::string() : ": " + p.reason)));
    }
    out << "</table>\n</body></html>\n";
}

}  // namespace kvsim
