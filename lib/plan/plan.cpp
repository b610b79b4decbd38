#include "plan/plan.h"

#include "core/errors.h"
#include "replay/run_replay.h"
#include "report/requests_report.h"
#include "trace/op_trace.h"
#include "trace/text_lines.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <fmt/format.h>
#include <mutex>
#include <thread>
#include <tuple>

namespace kvsim {

const char * plan_status_name(plan_status s) {
    switch (s) {
        case plan_status::ok: return "ok";
        case plan_status::no_fit: return "no_fit";
        case plan_status::refused: return "refused";
        case plan_status::not_run: return "not_run";
    }
    return "?";
}

namespace {
struct point_interrupted {};

bool within_slo(const request_result & r, const plan_slo & slo) {
    if (r.outcome != request_outcome::done || r.first_token < 0) return false;
    if (slo.ttft_s > 0 && r.first_token - r.arrival > slo.ttft_s) return false;
    const double tpot = request_tpot(r);
    return !(slo.tpot_s > 0 && tpot >= 0 && tpot > slo.tpot_s);
}

// The device memory of a point, without building its cache; no_fit when it leaves less than the margin.
void size_point(const plan_options & opt, plan_point & p) {
    const replay_options r = opt.replay_of(p.config);
    const context_sizes s = compute_context_sizes(r.model, r.ctx);
    p.memory = replay_memory(r, r.ctx, s, true);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    if ((double) p.memory.device() + (double) opt.margin_bytes > (double) opt.memory_bytes) {
        p.status = plan_status::no_fit;
        p.reason = fmt::format("needs {:.2f} GiB (weights {:.2f} + K/V {:.2f} + compute {:.2f}) + margin {:.2f} GiB > {:.2f} GiB", p.memory.device() / gib, p.memory.model / gib, p.memory.context / gib,
                               p.memory.compute / gib, opt.margin_bytes / gib, opt.memory_bytes / gib);
    }
}

plan_metrics replay_metrics(const plan_options & opt, const plan_config & c, double rate_scale, replay_result * keep = nullptr) {
    replay_options r = opt.replay_of(c);
    r.rate_scale = rate_scale;
    replay_result rr = run_replay_quiet(r);
    // a replay stopped by a signal has pending requests: not a result to rank
    if (rr.summary.contains("interrupted")) throw point_interrupted();
    const auto & t = rr.summary.at("totals");
    const plan_metrics m = plan_metrics_of(rr.requests, t.at("sim_seconds").get<double>(), t.at("gen_tokens_decoded").get<uint64_t>(),
                                           opt.slo, t.at("idle_slot_purges").get<uint64_t>(),
                                           t.at("ram_cache").at("restores").get<uint64_t>(), t.at("prefix_tokens_reused").get<uint64_t>());
    if (keep) *keep = std::move(rr);
    return m;
}

bool attained(const plan_metrics & m, double attainment) {
    return m.requests > 0 && (double) m.slo_met >= attainment * (double) m.requests;
}

// Requests per second the trace offers at its replayed scale: requests over the span of their arrivals.
double offered_rps(const std::vector<request_result> & rs) {
    if (rs.size() < 2) return 0;
    double lo = rs.front().arrival, hi = lo;
    for (const auto & r : rs) {
        lo = std::min(lo, r.arrival);
        hi = std::max(hi, r.arrival);
    }
    return hi > lo ? (double) rs.size() / (hi - lo) : 0;
}

// The highest rate scale within the objectives: a bracket by doubling or halving from the trace's own
// rate (scale 1, whatever --rate-scale the plan's points ran at: the answer must not depend on it),
// then rate_steps geometric bisections. Each probe is a replay; `at_s0` is the point's own result at
// the plan's scale.
void find_max_rate(const plan_options & opt, plan_point & p, double base_rps) {
    const double s0 = opt.base.rate_scale, limit = 1 << 20;
    const auto met = [&](double scale) {
        return attained(scale == s0 ? p.metrics : replay_metrics(opt, p.config, scale), opt.slo_attainment);
    };
    double lo = 0, hi = 0;
    if (met(1.0)) {
        lo = 1.0;
        for (hi = 2.0; met(hi); hi *= 2) {
            lo = hi;
            if (hi >= limit) {
                p.metrics.rate_capped = true;
                break;
            }
        }
    } else {
        hi = 1.0;
        for (lo = 0.5; !met(lo); lo /= 2) {
            hi = lo;
            if (lo <= 1.0 / limit) return;   // not met even at 2^-20 of the trace's rate: 0
        }
    }
    for (int k = 0; k < opt.rate_steps && !p.metrics.rate_capped; ++k) {
        const double mid = std::sqrt(lo * hi);
        (attained(replay_metrics(opt, p.config, mid), opt.slo_attainment) ? lo : hi) = mid;
    }
    p.metrics.max_rate_scale = lo;
    p.metrics.max_rate_rps = base_rps * lo / s0;
}

void replay_point(const plan_options & opt, plan_point & p) {
    replay_result rr;
    p.metrics = replay_metrics(opt, p.config, opt.base.rate_scale, &rr);
    p.status = plan_status::ok;
    if (opt.find_rate) find_max_rate(opt, p, offered_rps(rr.requests));
}

// One point, start to end: an option the library refuses for this point (a context too small for
// its slots, n_ubatch over n_batch) makes it refused, not the plan.
void run_point(const plan_options & opt, plan_point & p) {
    try {
        size_point(opt, p);
        if (p.status == plan_status::no_fit) return;
        replay_point(opt, p);
    } catch (const point_interrupted &) {
        p.status = plan_status::not_run;
        p.metrics = {};
        p.reason = "interrupted";
    } catch (const input_error &) {
        throw;   // the trace: every point would fail alike
    } catch (const usage_error & e) {
        p.status = plan_status::refused;
        p.reason = e.what();
    }
}

void check_request_trace(const replay_options & o) {
    const bool op = o.format == "auto" ? looks_like_op_trace(read_first_line(o.trace)) : o.format == "ops";
    if (op) throw usage_error(fmt::format("{}: an op trace has no requests to plan a server for; give a request trace", o.trace));
}

// Points taken in grid order by `jobs` threads; the first exception that is not a point's own
// refusal stops the others and is rethrown.
void run_points(const plan_options & opt, std::vector<plan_point> & pts, const std::function<void(size_t, size_t)> & progress,
                const std::function<bool()> & stop, bool & interrupted) {
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    std::exception_ptr error;
    std::mutex mu;
    size_t done = 0;
    auto worker = [&] {
        for (;;) {
            if (failed || (stop && stop())) return;
            const size_t i = next++;
            if (i >= pts.size()) return;
            try {
                run_point(opt, pts[i]);
            } catch (...) {
                std::lock_guard<std::mutex> lock(mu);
                if (!error) error = std::current_exception();
                failed = true;
                return;
            }
            std::lock_guard<std::mutex> lock(mu);
            ++done;
            if (progress) progress(done, pts.size());
        }
    };
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    const unsigned n = (unsigned) std::min<size_t>(opt.jobs ? opt.jobs : hw, pts.size());
    std::vector<std::thread> threads;
    for (unsigned k = 1; k < n; ++k) threads.emplace_back(worker);
    worker();
    for (auto & t : threads) t.join();
    if (error) std::rethrow_exception(error);
    interrupted = done < pts.size();
}
}  // namespace

plan_metrics plan_metrics_of(const std::vector<request_result> & requests, double sim_seconds, uint64_t gen_tokens,
                             const plan_slo & slo, uint64_t idle_purges, uint64_t ram_restores, uint64_t prefix_reused) {
    plan_metrics m;
    for (const auto & r : requests) {
        ++m.requests;
        m.done += r.outcome == request_outcome::done;
        m.truncated += r.outcome == request_outcome::truncated;
        m.failed += r.outcome == request_outcome::failed;
        m.pending += r.outcome == request_outcome::pending;
        m.slo_met += within_slo(r, slo);
    }
    // the percentiles of summary.json (one definition for replay and plan); 0 when no request got there
    const nlohmann::json lat = latency_summary(requests);
    m.ttft_p50 = lat["ttft_s"].value("p50", 0.0);
    m.ttft_p99 = lat["ttft_s"].value("p99", 0.0);
    m.tpot_p50 = lat["tpot_s"].value("p50", 0.0);
    m.tpot_p99 = lat["tpot_s"].value("p99", 0.0);
    m.sim_seconds = sim_seconds;
    m.gen_tokens_per_s = sim_seconds > 0 ? (double) gen_tokens / sim_seconds : 0;
    m.goodput_rps = sim_seconds > 0 ? (double) m.slo_met / sim_seconds : 0;
    m.idle_slot_purges = idle_purges;
    m.ram_restores = ram_restores;
    m.prefix_tokens_reused = prefix_reused;
    return m;
}

void rank_plan_points(std::vector<plan_point> & pts) {
    const auto key = [](const plan_point & p) {
        return std::make_tuple(p.status != plan_status::ok, -p.metrics.goodput_rps, p.metrics.ttft_p99, p.metrics.tpot_p99,
                               p.memory.device(), (int) p.status, p.index);
    };
    std::sort(pts.begin(), pts.end(), [&](const plan_point & a, const plan_point & b) { return key(a) < key(b); });
    size_t rank = 0;
    for (auto & p : pts) p.rank = p.status == plan_status::ok ? ++rank : 0;
    for (auto & p : pts) {
        if (p.status != plan_status::ok) continue;
        p.pareto = std::none_of(pts.begin(), pts.end(), [&](const plan_point & q) {
            if (q.status != plan_status::ok || &q == &p) return false;
            const bool no_worse = q.metrics.goodput_rps >= p.metrics.goodput_rps && q.metrics.ttft_p99 <= p.metrics.ttft_p99 &&
                                  q.memory.device() <= p.memory.device();
            const bool better = q.metrics.goodput_rps > p.metrics.goodput_rps || q.metrics.ttft_p99 < p.metrics.ttft_p99 ||
                                q.memory.device() < p.memory.device();
            return no_worse && better;
        });
    }
}

plan_result run_plan(const plan_options & opt, const std::function<void(size_t, size_t)> & progress,
                     const std::function<bool()> & stop) {
    opt.validate();
    check_request_trace(opt.base);
    const auto t0 = std::chrono::steady_clock::now();
    plan_result res;
    res.header = plan_header_of(opt);
    const std::vector<plan_config> cfg = opt.points();
    for (size_t i = 0; i < cfg.size(); ++i) {
        if (!opt.shard.takes(i)) continue;
        plan_point p;
        p.index = i;
        p.config = cfg[i];
        res.points.push_back(p);
    }
    run_points(opt, res.points, progress, stop, res.interrupted);
    rank_plan_points(res.points);
    res.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

}  // namespace kvsim
