#include "bench/bench_writers.h"

#include "bench/bench_json.h"

#include "util/atomic_file.h"
#include "core/errors.h"
#include "util/xml_escape.h"

#include <fmt/ostream.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

namespace kvsim {

const char * const kvbench_csv_header =
    "index,ctx,kv_type,batch,status,kv_bytes,copies,fa_min_ns,fa_median_ns,fa_max_ns,gbs,gbs_best,limit_read_gbs,"
    "frac_limit,tokens_per_s,mask_full_median_ns,mask_update_median_ns,kshift_median_ns,eigen_median_ns,eigen_ratio,"
    "ref_median_ns,ref_ratio,err_vs_eigen,err_vs_ref,adj_read_gbs,adj_frac,roof_gbs,roof_frac,roof_ctx,note";

namespace {

std::string csv_quote(const std::string & s) {
    if (s.find_first_of(",\"\n") == std::string::npos) return s;
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

std::string us(const time_stats & t) { return t.n ? fmt::format("{:.1f}", t.median_ns / 1e3) : "-"; }
std::string ratio(double r) { return r > 0 ? fmt::format("{:.2f}", r) : "-"; }

double mean_read_gbs(const sweep_output & o) {
    double s = 0;
    for (const run_limit & l : o.limits) s += l.read_gbs;
    return o.limits.empty() ? 0.0 : s / (double) o.limits.size();
}

}  // namespace

void write_table(std::ostream & os, const sweep_output & o) {
    const sweep_config & c = o.config;
    fmt::print(os, "kvbench sweep: {} (head_dim {}, n_head {}, n_head_kv {}), backend {}, {} threads, {} repeats\n",
               c.model, c.head_dim, c.n_head, c.n_head_kv, c.backend, c.threads, c.repeats);
    fmt::print(os, "machine: {} ({} cores){}, {} build, commit {}, {}{}\n", o.machine.cpu_model, o.machine.cores,
               o.machine.gpu.empty() ? "" : ", GPU " + o.machine.gpu, o.machine.build_type, o.machine.git_commit,
               o.machine.date, o.machine.kernel_path.empty() ? "" : ", CPU kernels " + o.machine.kernel_path);
    for (const run_limit & l : o.limits) {
        fmt::print(os, "measured limit (shard {}, {}): read {:.1f} GB/s, copy {:.1f} GB/s ({} threads, {} MiB){}\n",
                   l.shard, l.host, l.read_gbs, l.copy_gbs, c.threads, c.limit_bytes >> 20,
                   l.read_gbs_one_thread > 0 && l.read_gbs > 0 ? fmt::format("; read on 1 thread {:.1f} GB/s (x{:.2f} with {})",
                                                           l.read_gbs_one_thread, l.read_gbs / l.read_gbs_one_thread,
                                                           c.threads)
                                             : "");
        if (probe_core_bound(l, c.threads)) {
            fmt::print(os, "note: the read probe scales with its threads: each core's own miss handling, not memory, "
                           "sets this limit, and a kernel computing on the same cores reaches it only if its arithmetic "
                           "hides completely under its loads (%roof below)\n");
        }
    }
    for (const std::string & n : o.notes) fmt::print(os, "note: {}\n", n);
    fmt::print(os, "{:>7} {:>5} {:>5} {:>6} {:>11} {:>7} {:>6} {:>6} {:>6} {:>10} {:>8} {:>7} {:>9} {:>9} {:>11}  {}\n",
               "ctx", "type", "batch", "copies", "fa_us(med)", "GB/s", "%lim", "%adj", "%roof", "tok/s", "xEigen", "xRef",
               "mask_us", "upd_us", "kshift_us", "note");
    for (const point_result & r : o.results) {
        fmt::print(os, "{:>7} {:>5} {:>5} {:>6} {:>11} {:>7} {:>6} {:>6} {:>6} {:>10} {:>8} {:>7} {:>9} {:>9} {:>11}  {}\n",
                   r.point.ctx, ggml_type_name(r.point.type), r.point.batch, r.copies, us(r.fa),
                   r.fa.n ? fmt::format("{:.2f}", r.gbs()) : "-",
                   r.fa.n ? fmt::format("{:.1f}", 100 * r.frac_limit()) : "-",
                   r.adj_frac > 0 ? fmt::format("{:.1f}", 100 * r.adj_frac) : "-",
                   r.roof_frac > 0 ? fmt::format("{:.0f}", 100 * r.roof_frac) : "-",
                   r.fa.n ? fmt::format("{:.0f}", r.tokens_per_s()) : "-", ratio(r.eigen_ratio()),
                   ratio(r.ref_ratio()), us(r.mask_full), us(r.mask_update), us(r.kshift),
                   r.status == point_status::ok ? r.note : std::string(to_string(r.status)) + ": " + r.note);
    }
    fmt::print(os, "xEigen / xRef = baseline median time / kernel median time (> 1: the kernel is faster).\n");
    if (o.interrupted) fmt::print(os, "INTERRUPTED: only the points above were measured.\n");
    const auto failed = std::count_if(o.results.begin(), o.results.end(), [](const point_result & r) { return r.status == point_status::failed; });
    if (failed > 0) {
        fmt::print(os, "FAILED: {} point(s) gave a wrong output (above): their times are not reported and kvbench exits 1.\n",
                   failed);
    }
}

void write_csv(std::ostream & os, const sweep_output & o) {
    os << kvbench_csv_header << '\n';
    for (const point_result & r : o.results) {
        fmt::print(os, "{},{},{},{},{},{},{},{:.0f},{:.0f},{:.0f},{:.4f},{:.4f},{:.3f},{:.5f},{:.2f},{:.0f},{:.0f},{:.0f},"
                       "{:.0f},{:.4f},{:.0f},{:.4f},{:.3g},{:.3g},{:.3f},{:.5f},{:.3f},{:.5f},{},{}\n",
                   r.point.index, r.point.ctx, ggml_type_name(r.point.type), r.point.batch, to_string(r.status), r.kv_bytes,
                   r.copies, r.fa.min_ns, r.fa.median_ns, r.fa.max_ns, r.gbs(), r.gbs_best(), r.limit_read_gbs,
                   r.frac_limit(), r.tokens_per_s(), r.mask_full.median_ns, r.mask_update.median_ns,
                   r.kshift.median_ns, r.eigen.median_ns, r.eigen_ratio(), r.ref.median_ns, r.ref_ratio(),
                   r.err_vs_eigen, r.err_vs_ref, r.adj_read_gbs, r.adj_frac, r.roof_gbs, r.roof_frac, r.roof_ctx, csv_quote(r.note));
    }
}

namespace {

struct panel {
    double x0, y0, w, h;               // pixel box
    double lx_min, lx_max, ly_min, ly_max;  // log2 ctx, y axis (log10 for time, linear for GB/s)
    double px(double lx) const { return x0 + (lx - lx_min) / std::max(1e-9, lx_max - lx_min) * w; }
    double py(double ly) const { return y0 + h - (ly - ly_min) / std::max(1e-9, ly_max - ly_min) * h; }
};

const char * const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"};
const char * const dashes[] = {"", "6,3", "2,3", "8,3,2,3"};

void draw_axes(std::ostream & os, const panel & p, const std::string & title, const std::string & ylabel,
               bool log_y) {
    fmt::print(os, "<rect x='{}' y='{}' width='{}' height='{}' fill='none' stroke='#444'/>\n", p.x0, p.y0, p.w, p.h);
    fmt::print(os, "<text x='{}' y='{}' font-size='14' text-anchor='middle'>{}</text>\n", p.x0 + p.w / 2, p.y0 - 10,
               title);
    fmt::print(os, "<text x='{}' y='{}' font-size='12' transform='rotate(-90 {} {})' text-anchor='middle'>{}</text>\n",
               p.x0 - 48, p.y0 + p.h / 2, p.x0 - 48, p.y0 + p.h / 2, ylabel);
    for (double lx = std::ceil(p.lx_min); lx <= p.lx_max + 1e-9; lx += 1) {
        const double x = p.px(lx);
        const double v = std::exp2(lx);
        const std::string label = v >= 1024 ? fmt::format("{:g}K", v / 1024) : fmt::format("{:g}", v);
        fmt::print(os, "<line x1='{:.1f}' y1='{}' x2='{:.1f}' y2='{}' stroke='#ddd'/>\n", x, p.y0, x, p.y0 + p.h);
        fmt::print(os, "<text x='{:.1f}' y='{}' font-size='10' text-anchor='middle'>{}</text>\n", x, p.y0 + p.h + 14,
                   label);
    }
    fmt::print(os, "<text x='{}' y='{}' font-size='12' text-anchor='middle'>context length (cells per sequence, log2)</text>\n",
               p.x0 + p.w / 2, p.y0 + p.h + 32);
    const int ticks = 5;
    for (int i = 0; i <= ticks; ++i) {
        const double ly = p.ly_min + (p.ly_max - p.ly_min) * i / ticks;
        const double y = p.py(ly);
        const double v = log_y ? std::pow(10.0, ly) : ly;
        fmt::print(os, "<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='#eee'/>\n", p.x0, y, p.x0 + p.w, y);
        fmt::print(os, "<text x='{}' y='{:.1f}' font-size='10' text-anchor='end'>{:.3g}</text>\n", p.x0 - 4, y + 3, v);
    }
}

}  // namespace

void write_svg(std::ostream & os, const sweep_output & o) {
    std::map<std::pair<int64_t, std::string>, std::vector<const point_result *>> lines;
    double lx_min = 1e9, lx_max = -1e9, t_min = 1e300, t_max = 0, g_max = 0;
    for (const point_result & r : o.results) {
        if (!r.fa.n) continue;
        lines[{r.point.batch, ggml_type_name(r.point.type)}].push_back(&r);
        lx_min = std::min(lx_min, std::log2((double) r.point.ctx));
        lx_max = std::max(lx_max, std::log2((double) r.point.ctx));
        t_min = std::min(t_min, r.fa.median_ns / 1e3);
        t_max = std::max(t_max, r.fa.median_ns / 1e3);
        g_max = std::max(g_max, r.gbs());
    }
    const double roof = mean_read_gbs(o);
    if (lines.empty()) lx_min = 9, lx_max = 17, t_min = 1, t_max = 10;
    if (lx_max - lx_min < 1) lx_max = lx_min + 1;
    const double W = 1000, H = 470;
    panel pt{70, 50, 380, 330, lx_min, lx_max, std::floor(std::log10(t_min)), std::ceil(std::log10(t_max) + 1e-9)};
    if (pt.ly_max <= pt.ly_min) pt.ly_max = pt.ly_min + 1;
    panel pg{580, 50, 380, 330, lx_min, lx_max, 0, std::max(1.0, std::max(g_max, roof) * 1.1)};
    fmt::print(os, "<svg xmlns='http://www.w3.org/2000/svg' width='{}' height='{}' viewBox='0 0 {} {}' "
                   "font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n",
               W, H, W, H);
    fmt::print(os, "<text x='{}' y='20' font-size='13' text-anchor='middle'>kvbench: {} decode attention, {}, {} threads, "
                   "{} ({})</text>\n",
               W / 2, xml_escape(o.config.model), xml_escape(o.config.backend), o.config.threads,
               xml_escape(o.machine.cpu_model), xml_escape(o.machine.date.substr(0, 10)));
    draw_axes(os, pt, "flash-attention time per call (median)", "time (us, log10)", true);
    draw_axes(os, pg, "K+V read bandwidth (median)", "GB/s", false);
    if (roof > 0) {
        fmt::print(os, "<line x1='{}' y1='{:.1f}' x2='{}' y2='{:.1f}' stroke='black' stroke-width='2' stroke-dasharray='10,4'/>\n",
                   pg.x0, pg.py(roof), pg.x0 + pg.w, pg.py(roof));
        fmt::print(os, "<text x='{}' y='{:.1f}' font-size='11' text-anchor='end'>measured read limit {:.1f} GB/s</text>\n",
                   pg.x0 + pg.w - 4, pg.py(roof) - 5, roof);
    }
    std::map<std::string, int> type_color;
    std::map<int64_t, int> batch_dash;
    int legend = 0;
    for (const auto & [key, pts] : lines) {
        const int ci = type_color.emplace(key.second, (int) type_color.size()).first->second % 6;
        const int di = batch_dash.emplace(key.first, (int) batch_dash.size()).first->second % 4;
        std::string path_t, path_g;
        for (const point_result * r : pts) {
            const double lx = std::log2((double) r->point.ctx);
            path_t += fmt::format("{}{:.1f},{:.1f}", path_t.empty() ? "" : " ", pt.px(lx), pt.py(std::log10(r->fa.median_ns / 1e3)));
            path_g += fmt::format("{}{:.1f},{:.1f}", path_g.empty() ? "" : " ", pg.px(lx), pg.py(r->gbs()));
        }
        for (const std::string * pth : {&path_t, &path_g}) {
            fmt::print(os, "<polyline points='{}' fill='none' stroke='{}' stroke-width='2' stroke-dasharray='{}'/>\n", *pth,
                       palette[ci], dashes[di]);
        }
        const double ly = H - 50 + 14 * (legend / 4);
        const double lx = 70 + 230 * (legend % 4);
        fmt::print(os, "<line x1='{}' y1='{}' x2='{}' y2='{}' stroke='{}' stroke-width='2' stroke-dasharray='{}'/>\n", lx,
                   ly - 4, lx + 30, ly - 4, palette[ci], dashes[di]);
        fmt::print(os, "<text x='{}' y='{}' font-size='11'>{} batch {}</text>\n", lx + 36, ly, key.second, key.first);
        ++legend;
    }
    os << "</svg>\n";
}

void write_outputs(const std::string & dir, const sweep_output & o) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {  // e.g. under /proc, which passes check_output_dir's permission test as root
        throw input_error("--out", 0, dir, fmt::format("cannot create the output directory: {}", ec.message()));
    }
    const std::filesystem::path d(dir);
    // all three written and closed before any is renamed into place: a failure leaves none of them
    atomic_file csv((d / "kvbench.csv").string());
    write_csv(csv.out(), o);
    atomic_file js((d / "kvbench.json").string());
    js.out() << to_json(o).dump(2) << '\n';
    atomic_file svg((d / "kvbench.svg").string());
    write_svg(svg.out(), o);
    for (atomic_file * f : {&csv, &js, &svg}) f->finish();
    for (atomic_file * f : {&csv, &js, &svg}) f->commit();
}

void check_output_dir(const std::string & option, const std::string & dir) {
    namespace fs = std::filesystem;
    if (dir.empty()) throw input_error(option, 0, dir, "the output directory name is empty");
    std::error_code ec;
    fs::path p = fs::absolute(fs::path(dir), ec);
    if (ec) throw input_error(option, 0, dir, fmt::format("cannot resolve the output directory: {}", ec.message()));
    // the path itself, or its nearest existing ancestor, must be a writable directory
    for (fs::path q = p;; q = q.parent_path()) {
        const fs::file_status st = fs::status(q, ec);
        if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
            throw input_error(option, 0, dir, fmt::format("cannot use {} as output directory: {}", q.string(), ec.message()));
        }
        if (fs::exists(st)) {
            if (!fs::is_directory(st)) {
                throw input_error(option, 0, dir,
                                  q == p ? std::string("exists and is not a directory")
                                         : fmt::format("{} exists and is not a directory", q.string()));
            }
            if (::access(q.c_str(), W_OK | X_OK) != 0) {
                throw input_error(option, 0, dir,
                                  q == p ? std::string("the output directory is not writable")
                                         : fmt::format("cannot create it: {} is not writable", q.string()));
            }
            // the files it will hold must not be directories (a rename onto one fails after the work is done)
            for (const char * f : {"kvbench.csv", "kvbench.json", "kvbench.svg"}) {
                if (q == p && fs::is_directory(p / f, ec)) {
                    throw input_error(option, 0, dir, fmt::format("{} is a directory", (p / f).string()));
                }
            }
            return;
        }
        if (!q.has_parent_path() || q.parent_path() == q) {
            throw input_error(option, 0, dir, "cannot create the output directory");
        }
    }
}

std::string kvbench_json_path(const std::string & dir_or_file) {
    std::filesystem::path p(dir_or_file);
    if (std::filesystem::is_directory(p)) p /= "kvbench.json";
    return p.string();
}

sweep_output read_output(const std::string & dir_or_file) {
    const std::filesystem::path p(kvbench_json_path(dir_or_file));
    std::error_code ec;
    if (std::filesystem::exists(p, ec) && !std::filesystem::is_regular_file(p, ec)) {
        // a FIFO without a writer would block the merge forever
        throw input_error(p.string(), 0, "", "not a regular file (a device, FIFO or socket): save the kvbench output to a file");
    }
    std::ifstream in(p);
    if (!in) throw input_error(p.string(), 0, "", "cannot open kvbench output");
    try {
        return sweep_output_from_json(nlohmann::json::parse(in));
    } catch (const nlohmann::json::exception & e) {
        throw input_error(p.string(), 0, "", e.what());
    } catch (const std::runtime_error & e) {
        throw input_error(p.string(), 0, "", e.what());
    }
}

}  // namespace kvsim
