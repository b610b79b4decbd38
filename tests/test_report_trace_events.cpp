// The Perfetto / Chrome trace-event timeline (--trace-json), checked against the format's rules.
#include "kv/context.h"
#include "drive/op_runner.h"
#include "report/trace_events.h"

#include <doctest/doctest.h>

#include <map>
#include <sstream>

using namespace kvsim;
using json = nlohmann::json;

namespace {
llama_batch_in run(llama_seq_id s, llama_pos p0, uint32_t n) {
    llama_batch_in b;
    for (uint32_t i = 0; i < n; ++i) b.add(p0 + (llama_pos) i, {s});
    return b;
}

// Drives a context the way op_runner does once it reports ops: decode with the observer, then on_op.
struct driver {
    context ctx;
    trace_event_recorder & rec;
    sim_clock & clock;
    int decode(const llama_batch_in & b, double dt) {
        const int rc = ctx.decode(b, &rec);
        rec.on_op(decode_group_of(b, "d", 0), rc);
        if (rc == DECODE_OK) clock.advance(dt);
        return rc;
    }
    void op(op_kind k, llama_seq_id s, llama_pos p0, llama_pos p1, int32_t delta, llama_seq_id dst = -1) {
        op_group g;
        g.op = k;
        op_row r;
        r.op = k;
        r.seqs = {s};
        r.p0 = p0;
        r.p1 = p1;
        r.delta = delta;
        r.seq_dst = dst;
        g.rows.push_back(r);
        if (k == op_kind::rm) ctx.memory().seq_rm(s, p0, p1);
        if (k == op_kind::add) ctx.memory().seq_add(s, p0, p1, delta);
        if (k == op_kind::cp) ctx.memory().seq_cp(s, dst, p0, p1);
        rec.on_op(g, 0);
    }
};

context_params params(uint32_t n_ctx, uint32_t n_seq_max) {
    context_params p;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max;
    p.kv_unified = true;
    p.n_ubatch = 8;
    p.n_batch = 64;
    return p;
}

// The trace-event format's rules for the phases used: required keys, non-negative dur on X,
// s on i, args on C and M; per track, X and i timestamps never go backwards.
std::string format_problem(const json & doc) {
    if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array()) return "no traceEvents array";
    std::map<int, double> last_ts;
    for (const auto & e : doc["traceEvents"]) {
        for (const char * k : {"name", "ph", "pid"}) {
            if (!e.contains(k)) return std::string("event without ") + k + ": " + e.dump();
        }
        const std::string ph = e["ph"];
        if (ph == "M") {
            if (!e.contains("args") || !e["args"].is_object()) return "M without args";
            continue;
        }
        if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("tid")) return "no ts/tid: " + e.dump();
        if (ph == "X" && (!e.contains("dur") || e["dur"].get<double>() < 0)) return "X without dur >= 0: " + e.dump();
        if (ph == "i" && e.value("s", "") != "t") return "instant without s=t: " + e.dump();
        if (ph == "C" && (!e.contains("args") || e["args"].empty())) return "counter without values";
        if (ph != "X" && ph != "i" && ph != "C") return "unexpected phase " + ph;
        if (ph == "C") continue;
        const int tid = e["tid"];
        const double ts = e["ts"];
        if (last_ts.count(tid) && ts < last_ts[tid]) return "ts goes backwards on track " + std::to_string(tid) + ": " + e.dump();
        last_ts[tid] = ts;
    }
    return "";
}

std::vector<json> named(const json & doc, const std::string & name, int tid = -1) {
    std::vector<json> v;
    for (const auto & e : doc["traceEvents"]) {
        if (e["name"] == name && e["ph"] != "M" && (tid < 0 || e["tid"] == tid)) v.push_back(e);
    }
    return v;
}
}  // namespace

TEST_CASE("format_problem rejects what the format forbids (the checker can fail)") {
    CHECK(format_problem(json::parse(R"({"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":1,"ts":0,"dur":1}]})")).empty());
    CHECK(!format_problem(json::parse(R"({"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":1,"ts":0}]})")).empty());
    CHECK(!format_problem(json::parse(R"({"traceEvents":[{"name":"a","ph":"X","pid":1,"tid":1,"ts":5,"dur":1},
                                                         {"name":"b","ph":"i","s":"t","pid":1,"tid":1,"ts":4}]})")).empty());
}

TEST_CASE("trace events: per-sequence prefill/decode slices merge while back to back; ops and failures as instants") {
    sim_clock now;
    trace_event_recorder rec(now);
    driver d{context(model_preset("tiny-llama"), params(256, 2)), rec, now};
    REQUIRE(d.decode(run(0, 0, 12), 0.010) == DECODE_OK);   // 2 ubatches of 8 + 4 tokens, t = [0, 10 ms)
    REQUIRE(d.decode(run(0, 12, 1), 0.002) == DECODE_OK);   // decode, t = [10, 12) ms
    REQUIRE(d.decode(run(0, 13, 1), 0.002) == DECODE_OK);   // decode, t = [12, 14) ms: merged
    rec.step_done();
    now.advance(0.1);                                            // idle gap
    d.op(op_kind::add, 0, 4, -1, -2);                       // shifted at 114 ms
    REQUIRE(d.decode(run(0, 12, 1), 0.002) == DECODE_OK);   // new decode slice after the instant
    d.op(op_kind::cp, 0, 0, 4, 0, 1);
    d.op(op_kind::rm, 0, -1, -1, 0);
    REQUIRE(d.decode(run(300, 0, 1), 0.002) == DECODE_INVALID);   // seq id >= LLAMA_MAX_SEQ
    std::ostringstream os;
    std::vector<bandwidth_row> bw(2);
    bw[0].sim_time = 0.0;
    bw[0].mask_ns = 1000;
    bw[0].attn_ns = 4000;
    bw[0].kv_bytes = 1 << 20;
    bw[1].sim_time = 0.000002;   // would overlap row 0's kernels: pushed after them
    bw[1].shift_ns = 500;
    bw[1].attn_ns = 2000;
    rec.write_json(os, &bw);
    const json doc = json::parse(os.str());
    CHECK(format_problem(doc) == "");

    const auto pre = named(doc, "prefill", TRACK_SEQ0);
    REQUIRE(pre.size() == 1);
    CHECK(pre[0]["ts"] == 0.0);
    CHECK(pre[0]["dur"].get<double>() == doctest::Approx(10000));
    CHECK(pre[0]["args"]["tokens"] == 12);
    const auto dec = named(doc, "decode", TRACK_SEQ0);
    REQUIRE(dec.size() == 2);
    CHECK(dec[0]["ts"].get<double>() == doctest::Approx(10000));
    CHECK(dec[0]["dur"].get<double>() == doctest::Approx(4000));   // closed by step_done, not by the op after the gap
    CHECK(dec[0]["args"]["calls"] == 2);
    CHECK(dec[1]["ts"].get<double>() == doctest::Approx(114000));
    CHECK(named(doc, "shifted", TRACK_SEQ0).size() == 1);
    CHECK(named(doc, "shifted", TRACK_SEQ0)[0]["args"]["delta"] == -2);
    CHECK(named(doc, "copied", TRACK_SEQ0 + 1).size() == 1);
    CHECK(named(doc, "evicted", TRACK_SEQ0).size() == 1);

    const auto steps = named(doc, "replay step", TRACK_STEPS);
    CHECK(steps.size() == 4);
    const auto ub = named(doc, "apply_ubatch", TRACK_ALLOCATOR);
    REQUIRE(ub.size() == 5);
    CHECK(ub[0]["args"]["n_tokens"] == 8);
    CHECK(ub[1]["args"]["n_tokens"] == 4);
    CHECK(ub[1]["ts"].get<double>() == doctest::Approx(5000));
    CHECK(ub[1]["args"]["used_cells"] == 12);
    CHECK(ub[1]["args"]["n_kv"] == 256);
    CHECK(named(doc, "used cells").size() == 4);
    CHECK(named(doc, "n_kv").size() == 4);

    const auto k = named(doc, "attention", TRACK_KERNELS);
    REQUIRE(k.size() == 2);
    CHECK(k[0]["ts"].get<double>() == doctest::Approx(1.0));
    CHECK(k[0]["dur"].get<double>() == doctest::Approx(4.0));
    CHECK(named(doc, "K-shift", TRACK_KERNELS)[0]["ts"].get<double>() == doctest::Approx(5.0));
    CHECK(k[1]["ts"].get<double>() == doctest::Approx(5.5));
}

TEST_CASE("trace events: a no-slot llama_decode is a find_slot instant; op traces use 1 us per op; every = N samples calls") {
    sim_clock no_time(false);
    trace_event_recorder rec(no_time, 2);
    context_params p = params(256, 1);
    driver d{context(model_preset("tiny-llama"), p), rec, no_time};
    for (int i = 0; i < 4; ++i) REQUIRE(d.decode(run(0, i * 60, 60), 0) == DECODE_OK);
    REQUIRE(d.decode(run(0, 240, 60), 0) == DECODE_NO_SLOT);
    std::ostringstream os;
    rec.write_json(os, nullptr);
    const json doc = json::parse(os.str());
    CHECK(format_problem(doc) == "");
    const auto fail = named(doc, "find_slot", TRACK_ALLOCATOR);
    REQUIRE(fail.size() == 1);
    CHECK(fail[0]["ph"] == "i");
    CHECK(fail[0]["ts"] == 4.0);
    CHECK(fail[0]["args"]["result"] == "no slot");
    const auto steps = named(doc, "replay step", TRACK_STEPS);
    REQUIRE(steps.size() == 2);   // calls 0 and 2
    CHECK(steps[1]["ts"] == 2.0);
    CHECK(steps[1]["dur"] == 1.0);
    const auto pre = named(doc, "prefill", TRACK_SEQ0);
    REQUIRE(pre.size() == 1);   // all four calls, back to back
    CHECK(pre[0]["dur"] == 4.0);
    CHECK(pre[0]["args"]["tokens"] == 240);
}
