#include "report/trace_events.h"

#include "kv/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <numeric>
#include <tuple>

namespace kvsim {

namespace {
using json = nlohmann::json;

// Slices closer than this (us) count as back to back: start + (end - start) need not give end
// back exactly in floating point.
constexpr double k_touch_us = 1e-3;

json event_json(const trace_event & e) {
    json j = {{"name", e.name}, {"cat", "kvsim"}, {"ph", std::string(1, e.ph)}, {"pid", 1}, {"tid", e.tid}, {"ts", e.ts_us}};
    if (e.ph == 'X') j["dur"] = e.dur_us;
    if (e.ph == 'i') j["s"] = "t";
    if (!e.args.empty()) j["args"] = e.args;
    return j;
}

json track_name(int tid, const std::string & name) {
    return {{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}};
}

json track_order(int tid) {
    return {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}};
}
}  // namespace

trace_event_recorder::trace_event_recorder(const sim_clock & clock, uint64_t every)
    : clock_(clock), every_(std::max<uint64_t>(1, every)) {}

double trace_event_recorder::now() const { return clock_.timed() ? clock_.now() * 1e6 : (double) n_ops_; }

void trace_event_recorder::on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
    if (placed_.empty()) close_call(now());
    uint32_t used = 0;
    for (uint32_t st = 0; st < c.get_n_stream(); ++st) used += c.cells(st).get_used();
    placed_.push_back({c.name(), ub.n_tokens, n_kv, c.head(sinfo.strm.empty() ? 0 : sinfo.strm[0]), used});
}

void trace_event_recorder::on_op(const op_group & g, int rc) {
    const double t = now();
    close_call(t);
    if (g.op != op_kind::decode) {
        seq_op(g, t);
    } else if (rc == DECODE_OK) {
        call_ = {};
        call_.open = true;
        call_.start = t;
        call_.index = n_calls_;
        for (const op_row & r : g.rows) {
            call_.n_tokens += (uint32_t) r.n_tokens;
            for (llama_seq_id s : r.seqs) {
                auto it = std::find_if(call_.seq_tokens.begin(), call_.seq_tokens.end(), [s](const auto & p) { return p.first == s; });
                if (it == call_.seq_tokens.end()) call_.seq_tokens.emplace_back(s, (uint32_t) r.n_tokens);
                else it->second += (uint32_t) r.n_tokens;
            }
        }
        call_.ubatches = std::move(placed_);
    } else {
        uint32_t n = 0;
        for (const op_row & r : g.rows) n += (uint32_t) r.n_tokens;
        instant(TRACK_ALLOCATOR, rc == DECODE_NO_SLOT ? "find_slot" : "invalid batch", t,
                {{"result", rc == DECODE_NO_SLOT ? "no slot" : "invalid batch"}, {"rc", rc}, {"n_tokens", n}});
    }
    placed_.clear();
    if (g.op == op_kind::decode) ++n_calls_;
    ++n_ops_;
}

void trace_event_recorder::step_done() { close_call(now()); }

void trace_event_recorder::close_call(double end) {
    if (!call_.open) return;
    call_.open = false;
    const double t0 = call_.start, dur = std::max(0.0, end - t0);
    if (call_.index % every_ == 0) {
        events_.push_back({'X', "replay step", TRACK_STEPS, t0, dur,
                           {{"call", call_.index}, {"n_tokens", call_.n_tokens}, {"ubatches", call_.ubatches.size()}}});
        const double part = call_.ubatches.empty() ? 0 : dur / (double) call_.ubatches.size();
        json used = json::object(), n_kv = json::object();
        for (size_t i = 0; i < call_.ubatches.size(); ++i) {
            const ubatch_rec & u = call_.ubatches[i];
            events_.push_back({'X', "apply_ubatch", TRACK_ALLOCATOR, t0 + part * (double) i, part,
                               {{"cache", u.cache}, {"n_tokens", u.n_tokens}, {"n_kv", u.n_kv}, {"head", u.head}, {"used_cells", u.used}}});
            used[u.cache] = u.used;
            n_kv[u.cache] = u.n_kv;
        }
        if (!call_.ubatches.empty()) {
            events_.push_back({'C', "used cells", TRACK_ALLOCATOR, t0, 0, used});
            events_.push_back({'C', "n_kv", TRACK_ALLOCATOR, t0, 0, n_kv});
        }
    }
    for (const auto & [s, n] : call_.seq_tokens) seq_slice(s, n > 1 ? "prefill" : "decode", t0, dur, n);
}

int trace_event_recorder::seq_track(llama_seq_id s) {
    if ((size_t) s >= last_on_track_.size()) last_on_track_.resize((size_t) s + 1, -1);
    return TRACK_SEQ0 + s;
}

void trace_event_recorder::seq_slice(llama_seq_id s, const char * name, double start, double dur, uint32_t tokens) {
    const int tid = seq_track(s);
    const int64_t last = last_on_track_[(size_t) s];
    if (last >= 0) {
        trace_event & e = events_[(size_t) last];
        if (e.ph == 'X' && e.name == name && std::abs(e.ts_us + e.dur_us - start) < k_touch_us) {
            e.dur_us = start + dur - e.ts_us;
            e.args["tokens"] = e.args["tokens"].get<uint64_t>() + tokens;
            e.args["calls"] = e.args["calls"].get<uint64_t>() + 1;
            return;
        }
    }
    last_on_track_[(size_t) s] = (int64_t) events_.size();
    events_.push_back({'X', name, tid, start, dur, {{"tokens", tokens}, {"calls", 1}}});
}

void trace_event_recorder::instant(int tid, const std::string & name, double ts, json args) {
    if (tid >= TRACK_SEQ0) last_on_track_[(size_t) (tid - TRACK_SEQ0)] = (int64_t) events_.size();
    events_.push_back({'i', name, tid, ts, 0, std::move(args)});
}

void trace_event_recorder::seq_op(const op_group & g, double t) {
    const op_row & r = g.rows.front();
    const llama_seq_id s = r.seqs.empty() ? -1 : r.seqs.front();
    const json range = {{"p0", r.p0}, {"p1", r.p1}};
    switch (g.op) {
        case op_kind::rm:
            if (s < 0) instant(TRACK_ALLOCATOR, "evicted", t, {{"seq", "all"}, {"p0", r.p0}, {"p1", r.p1}});
            else instant(seq_track(s), "evicted", t, range);
            break;
        case op_kind::add: instant(seq_track(s), "shifted", t, {{"p0", r.p0}, {"p1", r.p1}, {"delta", r.delta}}); break;
        case op_kind::div: instant(seq_track(s), "divided", t, {{"p0", r.p0}, {"p1", r.p1}, {"divisor", r.delta}}); break;
        case op_kind::keep: instant(seq_track(s), "kept", t, json::object()); break;
        case op_kind::cp: instant(seq_track(r.seq_dst), "copied", t, {{"src", s}, {"p0", r.p0}, {"p1", r.p1}}); break;
        case op_kind::clear: instant(TRACK_ALLOCATOR, "clear", t, json::object()); break;
        case op_kind::decode: break;
    }
}

void trace_event_recorder::write_json(std::ostream & out, const std::vector<bandwidth_row> * bandwidth) {
    close_call(now());
    out << "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"kvsim 0.1.0\",\"time\":"
        << (clock_.timed() ? "\"simulated microseconds\"" : "\"op number (1 us per op)\"") << "},\n\"traceEvents\":[\n";
    const char * sep = "";
    auto put = [&](const json & j) {
        out << sep << j.dump();
        sep = ",\n";
    };
    put({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "kvsim replay"}}}});
    for (auto [tid, name] : {std::pair<int, const char *>{TRACK_STEPS, "llama_decode calls"}, {TRACK_ALLOCATOR, "allocator"},
                             {TRACK_KERNELS, "kernels (measured, per layer)"}}) {
        put(track_name(tid, name));
        put(track_order(tid));
    }
    for (size_t s = 0; s < last_on_track_.size(); ++s) {
        if (last_on_track_[s] < 0) continue;
        put(track_name(TRACK_SEQ0 + (int) s, fmt::format("seq {}", s)));
        put(track_order(TRACK_SEQ0 + (int) s));
    }
    for (const trace_event & e : events_) put(event_json(e));
    if (bandwidth) {
        std::vector<size_t> order(bandwidth->size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*bandwidth)[a].sim_time < (*bandwidth)[b].sim_time; });
        double end = 0;
        for (size_t i : order) {
            const bandwidth_row & r = (*bandwidth)[i];
            double t = std::max(r.sim_time * 1e6, end);
            const json common = {{"cache", r.cache}, {"n_kv", r.n_kv}, {"tokens", r.tokens}, {"step", r.step}};
            for (auto [name, ns, bytes] : {std::tuple<const char *, double, uint64_t>{"K-shift", r.shift_ns, r.shift_bytes},
                                           {"mask build", r.mask_ns, r.mask_bytes}, {"attention", r.attn_ns, r.kv_bytes}}) {
                if (ns <= 0) continue;
                json args = common;
                args["bytes"] = bytes;
                if (std::string(name) == "attention") args["gbs"] = r.attn_gbs;
                put(event_json({'X', name, TRACK_KERNELS, t, ns / 1000.0, args}));
                t += ns / 1000.0;
            }
            end = t;
        }
    }
    out << "\n]}\n";
}

}  // namespace kvsim
