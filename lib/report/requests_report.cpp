#include "report/requests_report.h"

#include "util/row_writer.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {
namespace {
// A time that may not have happened: written as nothing when negative, else with microseconds.
struct opt_time {
    double t;
};
}  // namespace
}  // namespace kvsim

template <> struct fmt::formatter<kvsim::opt_time> : fmt::formatter<fmt::string_view> {
    template <typename FormatContext> auto format(kvsim::opt_time v, FormatContext & ctx) const -> decltype(ctx.out()) {
        return v.t < 0 ? ctx.out() : fmt::format_to(ctx.out(), FMT_COMPILE("{:.6f}"), v.t);
    }
};

namespace kvsim {

namespace {

nlohmann::json stats(std::vector<double> v) {
    if (v.empty()) return {{"n", 0}};
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return v[std::min(v.size() - 1, (size_t) (f * (double) (v.size() - 1) + 0.5))]; };
    double sum = 0;
    for (double x : v) sum += x;
    return {{"n", v.size()}, {"mean", sum / (double) v.size()}, {"p50", q(0.5)}, {"p90", q(0.9)}, {"p99", q(0.99)}, {"max", v.back()}};
}
}  // namespace

double request_tpot(const request_result & r) {
    if (r.outcome == request_outcome::failed || r.n_gen < 2 || r.first_token < 0) return -1;
    return (r.finish - r.first_token) / (r.n_gen - 1);
}

void write_requests_csv(std::ostream & out, const std::vector<request_result> & rs, bool speculative) {
    const bool cmpl = std::any_of(rs.begin(), rs.end(), [](const request_result & r) { return r.parent >= 0; });
    out << "request,line,slot,n_prompt,n_gen_target,n_gen,prefix_reused,ram_restored_cells,context_shifts,arrival_s,"
           "admission_s,first_token_s,finish_s,queue_delay_s,ttft_s,tpot_s,outcome,error"
        << (speculative ? ",draft_n,draft_n_accepted" : "") << (cmpl ? ",cmpl_of\n" : "\n");
    row_writer w(out);
    for (size_t i = 0; i < rs.size(); ++i) {
        const auto & r = rs[i];
        w.row(FMT_COMPILE("{},{},{},{},{},{},{},{},{},{:.6f},{},{},{},{},{},{},{},\"{}\""), i, r.line, r.slot, r.n_prompt,
              r.n_gen_target, r.n_gen, r.n_prefix_reused, r.n_ram_restored, r.n_shifts, r.arrival, opt_time{r.admission},
              opt_time{r.first_token}, opt_time{r.finish}, opt_time{r.admission < 0 ? -1 : r.admission - r.arrival},
              opt_time{r.first_token < 0 ? -1 : r.first_token - r.arrival}, opt_time{request_tpot(r)},
              request_outcome_name(r.outcome), r.error);
        if (speculative) w.row(FMT_COMPILE(",{},{}"), r.n_drafted, r.n_draft_accepted);
        if (cmpl) w.row(FMT_COMPILE(",{}"), r.parent >= 0 ? std::to_string(r.parent) : std::string());
        w.row(FMT_COMPILE("\n"));
    }
}

nlohmann::json latency_summary(const std::vector<request_result> & rs) {
    std::vector<double> ttft, tp, qd;
    uint64_t done = 0, trunc = 0, failed = 0, pending = 0;
    for (const auto & r : rs) {
        done += r.outcome == request_outcome::done;
        trunc += r.outcome == request_outcome::truncated;
        failed += r.outcome == request_outcome::failed;
        pending += r.outcome == request_outcome::pending;
        if (r.first_token >= 0) ttft.push_back(r.first_token - r.arrival);
        if (request_tpot(r) >= 0) tp.push_back(request_tpot(r));
        if (r.admission >= 0) qd.push_back(r.admission - r.arrival);
    }
    return {{"outcomes", {{"done", done}, {"truncated", trunc}, {"failed", failed}, {"pending", pending}}},
            {"ttft_s", stats(ttft)},
            {"tpot_s", stats(tp)},
            {"queue_delay_s", stats(qd)}};
}

nlohmann::json load_summary(const std::vector<request_result> & rs, uint32_t n_slots) {
    if (rs.empty()) return {{"offered_rps", 0}, {"served_rps", 0}, {"queue_max", 0}, {"backlog_at_last_arrival", 0}, {"overloaded", false}};
    double first = rs.front().arrival, last = first, last_finish = first;
    uint64_t served = 0;
    std::vector<std::pair<double, int>> events;   // (time, +1 arrival / -1 admission): the waiting queue
    for (const auto & r : rs) {
        first = std::min(first, r.arrival);
        last = std::max(last, r.arrival);
        if (r.finish >= 0) last_finish = std::max(last_finish, r.finish);
        served += r.outcome == request_outcome::done || r.outcome == request_outcome::truncated;
        events.emplace_back(r.arrival, +1);
        if (r.admission >= 0) events.emplace_back(r.admission, -1);
    }
    std::sort(events.begin(), events.end());   // at one time admissions (-1) before arrivals: a request admitted on arrival never waits
    int64_t q = 0, q_max = 0;
    for (const auto & e : events) q_max = std::max(q_max, q += e.second);
    uint64_t backlog = 0;
    for (const auto & r : rs) backlog += r.arrival <= last && !(r.finish >= 0 && r.finish <= last) && r.outcome != request_outcome::failed;
    const uint64_t limit = std::max<uint64_t>(4 * (uint64_t) n_slots, rs.size() / 20);
    return {{"offered_rps", last > first ? (double) rs.size() / (last - first) : 0.0},
            {"served_rps", last_finish > first ? (double) served / (last_finish - first) : 0.0},
            {"queue_max", q_max},
            {"backlog_at_last_arrival", backlog},
            {"overloaded", backlog > limit}};
}

}  // namespace kvsim
