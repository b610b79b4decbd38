#include "report/requests_report.h"

#include <algorithm>
#include <fmt/format.h>

namespace kvsim {

namespace {
std::string opt_time(double t) { return t < 0 ? std::string() : fmt::format("{:.6f}", t); }

double tpot(const request_result & r) {
    if (r.outcome == request_outcome::failed || r.n_gen < 2 || r.first_token < 0) return -1;
    return (r.finish - r.first_token) / (r.n_gen - 1);
}

nlohmann::json stats(std::vector<double> v) {
    if (v.empty()) return {{"n", 0}};
    std::sort(v.begin(), v.end());
    auto q = [&](double f) { return v[std::min(v.size() - 1, (size_t) (f * (double) (v.size() - 1) + 0.5))]; };
    double sum = 0;
    for (double x : v) sum += x;
    return {{"n", v.size()}, {"mean", sum / (double) v.size()}, {"p50", q(0.5)}, {"p90", q(0.9)}, {"p99", q(0.99)}, {"max", v.back()}};
}
}  // namespace

void write_requests_csv(std::ostream & out, const std::vector<request_result> & rs) {
    out << "request,line,slot,n_prompt,n_gen_target,n_gen,prefix_reused,ram_restored_cells,context_shifts,arrival_s,"
           "admission_s,first_token_s,finish_s,queue_delay_s,ttft_s,tpot_s,outcome,error\n";
    for (size_t i = 0; i < rs.size(); ++i) {
        const auto & r = rs[i];
        const double t = tpot(r);
        out << fmt::format("{},{},{},{},{},{},{},{},{},{:.6f},{},{},{},{},{},{},{},\"{}\"\n", i, r.line, r.slot, r.n_prompt,
                           r.n_gen_target, r.n_gen, r.n_prefix_reused, r.n_ram_restored, r.n_shifts, r.arrival,
                           opt_time(r.admission), opt_time(r.first_token), opt_time(r.finish),
                           r.admission < 0 ? "" : opt_time(r.admission - r.arrival),
                           r.first_token < 0 ? "" : opt_time(r.first_token - r.arrival), t < 0 ? "" : opt_time(t),
                           request_outcome_name(r.outcome), r.error);
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
        if (tpot(r) >= 0) tp.push_back(tpot(r));
        if (r.admission >= 0) qd.push_back(r.admission - r.arrival);
    }
    return {{"outcomes", {{"done", done}, {"truncated", trunc}, {"failed", failed}, {"pending", pending}}},
            {"ttft_s", stats(ttft)},
            {"tpot_s", stats(tp)},
            {"queue_delay_s", stats(qd)}};
}

}  // namespace kvsim
