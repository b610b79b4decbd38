// llama-server's slot loop (lib/sched/server_sim) driven in-process on tiny shapes: admission,
// slot choice, batch composition, context shift/truncation, the decode-failure policy, prefix
// reuse, the --emit-ops round trip and the step-time model. The expected ops and outcomes are
// the real llama-server's: each case with a request trace the server oracle can replay is a
// recorded scenario in tests/server_golden (unit_*.scn, named in the case's comment) and was
// re-derived from its recording (ctx_params sets n_ubatch = n_batch; the scenarios use the
// server's -ub where it does not change the ops).
#include "replay/op_replay.h"
#include "drive/op_runner.h"
#include "report/dump_cells.h"
#include "sched/server_sim.h"
#include "time/step_time.h"
#include "time/step_timer.h"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace kvsim;

namespace {

// 1 GB/s and 10 GFLOP/s: a tiny-llama prompt step is compute-bound, a 1-token step memory-bound.
device_profile test_device() { return {"test", 1.0, 0.01}; }

request req(double arrival, int32_t n_prompt, int32_t n_gen, std::vector<uint64_t> hash_ids = {}) {
    static long line = 0;
    request r;
    r.line = ++line;
    r.arrival_s = arrival;
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    r.hash_ids = std::move(hash_ids);
    return r;
}

request_trace trace_of(std::vector<request> rs) {
    request_trace t;
    t.path = "test";
    t.format = request_format::mooncake;
    t.requests = std::move(rs);
    return t;
}

context_params ctx_params(uint32_t n_ctx, uint32_t n_seq_max, uint32_t n_batch, bool unified = false) {
    context_params p;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max;
    p.n_batch = n_batch;
    p.n_ubatch = n_batch;
    p.kv_unified = unified;
    return p;
}

// One scheduler run on tiny-llama recording every op it issues (and optionally dumping cells).
struct sim_run {
    context ctx;
    op_trace rec;
    std::ostringstream dump_text;
    cell_dumper dumper{dump_text};
    op_runner run;
    step_time_model tm;
    server_sim sim;

    sim_run(const context_params & cp, const server_params & sp, bool dump = false)
        : ctx(model_preset("tiny-llama"), cp),
          run(ctx, dump ? &dumper : nullptr, &rec, nullptr),
          tm{test_device(), model_preset("tiny-llama")},
          sim(run, sp, tm) {
        if (dump) dumper.config(ctx);
    }
    const request_result & r(size_t i) const { return sim.results().at(i); }
    std::vector<const op_group *> decodes() const {
        std::vector<const op_group *> d;
        for (const auto & g : rec.groups)
            if (g.op == op_kind::decode) d.push_back(&g);
        return d;
    }
    // (seq, n_tokens, p0) of each row of a decode group.
    static std::vector<std::tuple<int, int, int>> rows(const op_group & g) {
        std::vector<std::tuple<int, int, int>> v;
        for (const auto & row : g.rows) v.emplace_back(row.seqs.at(0), row.n_tokens, row.p0);
        return v;
    }
    static int32_t tokens(const op_group & g) {
        int32_t n = 0;
        for (const auto & row : g.rows) n += row.n_tokens;
        return n;
    }
    // Non-decode ops as "rm 0 32 -1" text, in issue order.
    std::vector<std::string> seq_ops() const {
        std::vector<std::string> v;
        for (const auto & g : rec.groups)
            if (g.op != op_kind::decode) v.push_back(op_text(g));
        return v;
    }
    uint32_t cells_of(llama_seq_id s) const {
        uint32_t n = 0;
        const kv_cache & c = *ctx.memory().caches().front();
        const kv_cells & cells = c.cells(c.seq_to_stream(s));
        for (uint32_t i = 0; i < cells.size(); ++i) n += !cells.is_empty(i) && cells.seq_has(i, s);
        return n;
    }
};

using rows_t = std::vector<std::tuple<int, int, int>>;

}  // namespace

TEST_CASE("admission is FIFO by arrival; idle-slot ties go to the last slot; prompts join in slot order") {
    sim_run s(ctx_params(512, 2, 512), {});   // n_ctx_seq 256 per stream
    s.sim.run(trace_of({req(0, 10, 3), req(0, 20, 2), req(0, 5, 1)}));
    // all slots unused (t_last_used -1): r0 -> slot 1 (upstream <= keeps the last), r1 -> slot 0;
    // r2 waits for the first release (slot 0 after r1's 2nd token)
    CHECK(s.r(0).slot == 1);
    CHECK(s.r(1).slot == 0);
    CHECK(s.r(2).slot == 0);
    const auto d = s.decodes();
    REQUIRE(d.size() == 3);
    CHECK(sim_run::rows(*d[0]) == rows_t{{0, 20, 0}, {1, 10, 0}});
    CHECK(sim_run::rows(*d[1]) == rows_t{{0, 1, 20}, {1, 1, 10}});
    // generating slot 1 first, then r2's prompt on slot 0 from position 0 (no shared prefix)
    CHECK(sim_run::rows(*d[2]) == rows_t{{1, 1, 11}, {0, 5, 0}});
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 1 0 -1", "rm 0 0 -1"});
    for (size_t i = 0; i < 3; ++i) CHECK(s.r(i).outcome == request_outcome::done);
    CHECK(s.r(0).n_gen == 3);
    CHECK(s.r(1).n_gen == 2);
    CHECK(s.r(2).n_gen == 1);
    CHECK(s.sim.totals().steps == 3);
    CHECK(s.sim.totals().prompt_tokens_decoded == 35);
    CHECK(s.sim.totals().gen_tokens_decoded == 3);
    // r2 is admitted when step 2 ends
    CHECK(s.r(0).admission == 0.0);
    CHECK(s.r(1).admission == 0.0);
    CHECK(s.r(2).admission > 0.0);
    CHECK(s.r(2).admission == s.r(1).finish);
    CHECK(s.r(2).arrival == 0.0);
}

TEST_CASE("a released slot is chosen by LRU: the one released longest ago, never-used first") {
    sim_run s(ctx_params(768, 3, 768), {});
    // r0 -> slot 2, r1 -> slot 1, r2 -> slot 0 (ties to the last); r1 ends first, then r0;
    // r3 (arrives later, no hash ids, so no similarity) takes slot 1 (released first)
    s.sim.run(trace_of({req(0, 4, 5), req(0, 4, 2), req(0, 4, 9), req(100, 4, 1)}));
    CHECK(s.r(0).slot == 2);
    CHECK(s.r(1).slot == 1);
    CHECK(s.r(2).slot == 0);
    CHECK(s.r(3).slot == 1);
}

TEST_CASE("--arrivals trace waits for the timestamp; saturate admits as soon as a slot frees") {
    const auto t = trace_of({req(0, 10, 2), req(0, 10, 1), req(100, 10, 1)});
    SUBCASE("trace") {
        server_params sp;
        sp.arrivals = arrival_mode::trace;
        sim_run s(ctx_params(256, 1, 256), sp);
        s.sim.run(t);
        // r1 queues behind r0 on the only slot; r2 arrives at 100 s, after everything finished
        CHECK(s.r(1).arrival == 0.0);
        CHECK(s.r(1).admission == s.r(0).finish);
        CHECK(s.r(1).admission > 0.0);
        CHECK(s.r(2).arrival == 100.0);
        CHECK(s.r(2).admission == 100.0);
        CHECK(s.r(2).first_token > 100.0);
        CHECK(s.sim.totals().sim_seconds > 100.0);
    }
    SUBCASE("saturate") {
        server_params sp;
        sp.arrivals = arrival_mode::saturate;
        sim_run s(ctx_params(256, 1, 256), sp);
        s.sim.run(t);
        // timestamps ignored: a request "arrives" when a slot takes it, so queueing delay is 0
        CHECK(s.r(1).admission == s.r(0).finish);
        CHECK(s.r(2).admission == s.r(1).finish);
        CHECK(s.r(2).admission < 1.0);
        for (size_t i = 0; i < 3; ++i) CHECK(s.r(i).arrival == s.r(i).admission);
        CHECK(s.sim.totals().sim_seconds < 1.0);
    }
}

TEST_CASE("batch composition under n_batch: generating tokens first, then prompt chunks in slot order") {
    // recorded: tests/server_golden/unit_batch_composition.scn
    sim_run s(ctx_params(768, 3, 64), {});   // n_batch 64, n_ctx_seq 256
    s.sim.run(trace_of({req(0, 50, 3), req(0, 40, 2), req(0, 30, 2)}));
    CHECK(s.r(0).slot == 2);
    CHECK(s.r(1).slot == 1);
    CHECK(s.r(2).slot == 0);
    const auto d = s.decodes();
    REQUIRE(d.size() == 4);
    // step 1: slot 0's whole prompt (30), slot 1's first 34; the batch is full before slot 2
    CHECK(sim_run::rows(*d[0]) == rows_t{{0, 30, 0}, {1, 34, 0}});
    // step 2: slot 0 generates, slot 1 finishes its prompt (6), slot 2 starts and fits whole (50)
    CHECK(sim_run::rows(*d[1]) == rows_t{{0, 1, 30}, {1, 6, 34}, {2, 50, 0}});
    CHECK(sim_run::rows(*d[2]) == rows_t{{1, 1, 40}, {2, 1, 50}});
    CHECK(sim_run::rows(*d[3]) == rows_t{{2, 1, 51}});
    // every prompt chunk starts with seq_rm(slot, p0, -1); slot 2's comes in step 2
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 1 0 -1", "rm 1 34 -1", "rm 2 0 -1"});
    CHECK(s.r(2).first_token > 0.0);
    CHECK(s.r(1).first_token > s.r(2).first_token);
    CHECK(s.r(1).first_token == s.r(0).first_token);
    for (size_t i = 0; i < 3; ++i) CHECK(s.r(i).outcome == request_outcome::done);
}

TEST_CASE("context shift: n_keep = --keep + BOS, n_discard = n_left / 2, seq_rm + seq_add") {
    SUBCASE("--keep 0") {
        // recorded: tests/server_golden/unit_shift_keep0.scn
        server_params sp;
        sp.context_shift = true;
        sim_run s(ctx_params(256, 1, 256), sp);
        s.sim.run(trace_of({req(0, 250, 20)}));
        // tokens 250 + 5 generated = 255: 255 + 1 >= 256 -> n_keep 0 (no BOS in this vocabulary),
        // n_left 255, n_discard 127; a shifted request is reported truncated
        CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 0 0 127", "add 0 127 255 -127"});
        CHECK(s.r(0).outcome == request_outcome::truncated);
        CHECK(s.r(0).n_gen == 20);
        CHECK(s.r(0).n_shifts == 1);
        CHECK(s.sim.totals().context_shifts == 1);
        const auto d = s.decodes();
        REQUIRE(d.size() == 20);
        CHECK(sim_run::rows(*d[5]) == rows_t{{0, 1, 254}});
        CHECK(sim_run::rows(*d[6]) == rows_t{{0, 1, 128}});   // first token after the shift
        CHECK(sim_run::rows(*d[19]) == rows_t{{0, 1, 141}});
        // 255 - 127 + 14 tokens decoded after: positions 0..141, one cell each
        CHECK(s.ctx.memory().seq_pos_min(0) == 0);
        CHECK(s.ctx.memory().seq_pos_max(0) == 141);
        CHECK(s.cells_of(0) == 142);
    }
    SUBCASE("--keep 10") {
        // recorded: tests/server_golden/unit_shift_keep10.scn
        server_params sp;
        sp.context_shift = true;
        sp.n_keep = 10;
        sim_run s(ctx_params(256, 1, 256), sp);
        s.sim.run(trace_of({req(0, 250, 7)}));
        // n_keep 10, n_left 245, n_discard 122
        CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 0 10 132", "add 0 132 255 -122"});
        const auto d = s.decodes();
        REQUIRE(d.size() == 7);
        CHECK(sim_run::rows(*d[6]) == rows_t{{0, 1, 133}});
        CHECK(s.ctx.memory().seq_pos_max(0) == 133);
        CHECK(s.cells_of(0) == 134);
    }
    SUBCASE("--keep -1 keeps the whole prompt, capped at n_ctx_seq - 4") {
        // recorded: tests/server_golden/unit_shift_keep_all.scn
        server_params sp;
        sp.context_shift = true;
        sp.n_keep = -1;
        sim_run s(ctx_params(256, 1, 256), sp);
        s.sim.run(trace_of({req(0, 250, 7)}));
        // n_keep min(252, 250) = 250, n_left 5, n_discard 2
        CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 0 250 252", "add 0 252 255 -2"});
        CHECK(s.r(0).n_shifts == 1);
    }
}

TEST_CASE("without --context-shift a slot stops truncated at n_tokens + 1 >= n_ctx_seq") {
    // recorded: tests/server_golden/unit_truncate.scn
    sim_run s(ctx_params(256, 1, 256), {});
    s.sim.run(trace_of({req(0, 250, 20)}));
    // process_token after token k sees 249 + k cached tokens: stops at k = 6 (255 + 1 >= 256)
    CHECK(s.r(0).outcome == request_outcome::truncated);
    CHECK(s.r(0).n_gen == 6);
    CHECK(s.decodes().size() == 6);
    CHECK(s.sim.totals().context_shifts == 0);
    CHECK(s.r(0).error.empty());
}

TEST_CASE("a prompt of n_ctx_seq tokens or more fails at admission; one less runs") {
    // recorded: tests/server_golden/unit_prompt_too_long.scn
    sim_run s(ctx_params(512, 2, 512), {});   // n_ctx_seq 256
    s.sim.run(trace_of({req(0, 256, 4), req(0, 255, 1)}));
    CHECK(s.r(0).outcome == request_outcome::failed);
    CHECK(s.r(0).error.find("exceeds the available context size (256 tokens)") != std::string::npos);
    CHECK(s.r(0).n_gen == 0);
    // 255 cached + 1 >= 256: stopped for context as well as by n_predict; the server says truncated
    CHECK(s.r(1).outcome == request_outcome::truncated);
    const auto d = s.decodes();
    REQUIRE(d.size() == 1);
    CHECK(sim_run::tokens(*d[0]) == 255);
}

TEST_CASE("unified cache full: halve n_batch down to 1, then fail every processing request") {
    // recorded: tests/server_golden/unit_unified_full.scn
    // 4 slots x 100-token prompts in 256 unified cells: step 1 fills all 256 cells; step 2 cannot
    // place anything: 146 -> 128 -> 64 -> ... -> 1 tokens, then "Context size has been exceeded."
    sim_run s(ctx_params(256, 4, 256, true), {});
    s.sim.run(trace_of({req(0, 100, 4), req(0, 100, 4), req(0, 100, 4), req(0, 100, 4)}));
    const auto d = s.decodes();
    std::vector<int32_t> sizes;
    for (const auto * g : d) sizes.push_back(sim_run::tokens(*g));
    CHECK(sizes == std::vector<int32_t>{256, 146, 128, 64, 32, 16, 8, 4, 2, 1});
    CHECK(sim_run::rows(*d[0]) == rows_t{{0, 100, 0}, {1, 100, 0}, {2, 56, 0}});
    CHECK(sim_run::rows(*d[1]) == rows_t{{0, 1, 100}, {1, 1, 100}, {2, 44, 56}, {3, 100, 0}});
    const auto & t = s.sim.totals();
    CHECK(t.decode_calls == 10);
    CHECK(t.decode_no_slot == 9);
    CHECK(t.batch_halvings == 8);
    CHECK(t.idle_slot_purges == 0);
    CHECK(t.context_exceeded == 1);
    for (size_t i = 0; i < 4; ++i) {
        CHECK(s.r(i).outcome == request_outcome::failed);
        CHECK(s.r(i).error == "Context size has been exceeded.");
    }
    // slots 0 and 1 (r3, r2) had their first token
    CHECK(s.r(3).n_gen == 1);
    CHECK(s.r(2).n_gen == 1);
    CHECK(s.r(1).n_gen == 0);
    // every processing slot is cleared (prompt_clear)
    for (llama_seq_id q = 0; q < 4; ++q) CHECK(s.ctx.memory().seq_pos_max(q) == -1);
}

TEST_CASE("unified cache, default --cache-idle-slots: the idle slot is saved and cleared at the next launch") {
    // recorded: tests/server_golden/unit_idle_clear.scn
    sim_run s(ctx_params(256, 2, 256, true), {});
    s.sim.run(trace_of({req(0, 200, 1), req(10, 100, 1)}));
    CHECK(s.r(0).slot == 1);
    CHECK(s.r(1).slot == 0);
    std::vector<int32_t> sizes;
    for (const auto * g : s.decodes()) sizes.push_back(sim_run::tokens(*g));
    CHECK(sizes == std::vector<int32_t>{200, 100});
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 -1 -1", "rm 1 0 -1", "rm 1 -1 -1", "rm 0 0 -1"});
    const auto & t = s.sim.totals();
    CHECK(t.idle_slot_purges == 0);
    CHECK(t.idle_slot_clears == 1);
    CHECK(t.ram_saves == 1);
    CHECK(t.decode_no_slot == 0);
    CHECK(s.r(1).outcome == request_outcome::done);
}

TEST_CASE("unified cache full with an idle slot holding cells (--no-cache-idle-slots): purge it and retry at full n_batch") {
    // recorded: tests/server_golden/unit_idle_purge.scn
    server_params sp;
    sp.cache_idle_slots = false;
    sim_run s(ctx_params(256, 2, 256, true), sp);
    // r0 (slot 1) leaves 200 cells cached; r1 (slot 0, LRU) needs 100, only 56 are free
    s.sim.run(trace_of({req(0, 200, 1), req(10, 100, 1)}));
    CHECK(s.r(0).slot == 1);
    CHECK(s.r(1).slot == 0);
    std::vector<int32_t> sizes;
    for (const auto * g : s.decodes()) sizes.push_back(sim_run::tokens(*g));
    CHECK(sizes == std::vector<int32_t>{200, 100, 100});
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 1 0 -1", "rm 0 0 -1", "rm 1 -1 -1"});
    // the purge sits between the failed and the retried decode
    REQUIRE(s.rec.groups.size() == 6);
    CHECK(s.rec.groups[3].op == op_kind::decode);
    CHECK(s.rec.groups[4].op == op_kind::rm);
    CHECK(s.rec.groups[5].op == op_kind::decode);
    const auto & t = s.sim.totals();
    CHECK(t.idle_slot_purges == 1);
    CHECK(t.batch_halvings == 0);
    CHECK(t.decode_no_slot == 1);
    CHECK(s.r(1).outcome == request_outcome::done);
}

// Prefix reuse: the slot's cached tokens include the whole decoded prompt, as upstream's
// server_slot::prompt.tokens (get_common_prefix in get_available_slot and update_slots).
TEST_CASE("prefix reuse: a later request keeps the common hash_id blocks of its own slot") {
    // recorded: tests/server_golden/unit_prefix_blocks.scn
    sim_run s(ctx_params(4096, 1, 2048), {});
    // r0: blocks 1,2,3 (512,512,176 tokens); r1: blocks 1,2,4 (512,512,476) -> 1024 common tokens
    s.sim.run(trace_of({req(0, 1200, 3, {1, 2, 3}), req(10, 1500, 1, {1, 2, 4})}));
    CHECK(s.r(1).n_prefix_reused == 1024);
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 0 1024 -1"});
    const auto d = s.decodes();
    REQUIRE(d.size() == 4);
    CHECK(sim_run::rows(*d[3]) == rows_t{{0, 476, 1024}});
    CHECK(s.sim.totals().prefix_hits == 1);
    CHECK(s.sim.totals().prefix_tokens_reused == 1024);
    CHECK(s.sim.totals().prompt_tokens_decoded == 1200 + 476);
}

TEST_CASE("prefix reuse of a whole prompt still evaluates its last token") {
    // recorded: tests/server_golden/unit_prefix_whole.scn
    sim_run s(ctx_params(4096, 1, 2048), {});
    s.sim.run(trace_of({req(0, 1024, 1, {1, 2}), req(10, 1024, 1, {1, 2})}));
    CHECK(s.r(1).n_prefix_reused == 1023);
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 0 1023 -1"});
    CHECK(sim_run::rows(*s.decodes().back()) == rows_t{{0, 1, 1023}});
}

TEST_CASE("slot choice: prompt similarity above 0.1 beats LRU") {
    // recorded: tests/server_golden/unit_similarity.scn
    sim_run s(ctx_params(8192, 2, 2048), {});
    // r0 -> slot 1, r1 -> slot 0; both end in step 1 (slot 0 released first, so LRU = slot 0);
    // r2 shares 1024 of 1300 tokens with slot 1 (0.79 > 0.1) and goes there
    s.sim.run(trace_of({req(0, 1200, 1, {1, 2, 3}), req(0, 600, 1, {8, 9}), req(10, 1300, 1, {1, 2, 7})}));
    CHECK(s.r(0).slot == 1);
    CHECK(s.r(1).slot == 0);
    CHECK(s.r(2).slot == 1);
    CHECK(s.r(2).n_prefix_reused == 1024);
    CHECK(s.seq_ops() == std::vector<std::string>{"rm 0 0 -1", "rm 1 0 -1", "rm 1 1024 -1"});
}

namespace {
// Dump events without their "line" (running op numbers in the scheduler, CSV lines in the
// replay: different by construction); everything else must match.
std::vector<nlohmann::json> dump_events(const std::string & text) {
    std::vector<nlohmann::json> v;
    std::istringstream is(text);
    std::string l;
    while (std::getline(is, l)) {
        auto j = nlohmann::json::parse(l);
        j.erase("line");
        v.push_back(std::move(j));
    }
    return v;
}

// Scheduler run with dump + record; write_op_trace, parse_op_trace, replay_ops with the same
// context and a dump; the two dumps must agree event by event.
void check_round_trip(const context_params & cp, const server_params & sp, const request_trace & t, server_totals & totals) {
    sim_run s(cp, sp, true);
    s.sim.run(t);
    totals = s.sim.totals();
    std::ostringstream csv;
    write_op_trace(csv, s.rec);
    std::istringstream in(csv.str());
    const op_trace back = parse_op_trace(in, "emitted.csv");
    REQUIRE(back.groups.size() == s.rec.groups.size());

    context ctx2(model_preset("tiny-llama"), cp);
    std::ostringstream dump2;
    cell_dumper d2(dump2);
    d2.config(ctx2);
    const op_replay_result r = replay_ops(back, ctx2, &d2, nullptr);
    CHECK(r.n_decode == totals.decode_calls);
    CHECK(r.n_no_slot == totals.decode_no_slot);

    const auto a = dump_events(s.dump_text.str()), b = dump_events(dump2.str());
    REQUIRE(a.size() == b.size());
    size_t n_state = 0, n_apply = 0, n_diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] != b[i] && ++n_diff <= 3) FAIL_CHECK("event ", i, ": ", a[i].dump(), " vs ", b[i].dump());
        const std::string ev = a[i].value("ev", "");
        n_state += ev == "state";
        n_apply += ev == "apply";
    }
    CHECK(n_diff == 0);
    CHECK(n_state == s.rec.groups.size());
    CHECK(n_apply > 0);
}
}  // namespace

TEST_CASE("--emit-ops round trip: the recorded op trace replays to identical cell states") {
    server_totals t;
    SUBCASE("non-unified, context shifts") {
        server_params sp;
        sp.context_shift = true;
        check_round_trip(ctx_params(512, 2, 64), sp,
                         trace_of({req(0, 200, 80), req(0, 30, 10), req(0.001, 60, 250), req(0.002, 35, 5)}), t);
        CHECK(t.context_shifts >= 2);
    }
    SUBCASE("unified, decode failures, halvings, purges") {
        check_round_trip(ctx_params(256, 3, 64, true), {},
                         trace_of({req(0, 40, 30), req(0, 90, 40), req(0.001, 60, 50), req(0.002, 35, 5), req(0.5, 120, 60),
                                   req(0.6, 100, 10)}),
                         t);
        CHECK(t.decode_no_slot > 0);
        CHECK(t.batch_halvings > 0);
    }
}

TEST_CASE("step time: roofline by hand; sim time increases every step; TTFT <= finish") {
    SUBCASE("one request on one slot") {
        sim_run s(ctx_params(256, 1, 256), {});
        s.sim.run(trace_of({req(0, 10, 2)}));
        // tiny-llama (f16): 2 layers, 4 heads of 32, 2 KV heads, a custom shape whose 0.5e6 parameters are all
        // dense weights (no output matrix);
        // test_device: 1 GB/s, 0.01 TFLOP/s = 1e10 FLOP/s, fractions 1, no overheads.
        //   weights:      0.5e6 params x 2 bytes                          = 1,000,000 bytes per ubatch
        //   K/V per cell: 2 layers x (K + V) x 2 KV heads x 32 x 2 bytes  = 512 bytes
        // step 1, the prompt: 10 tokens, n_kv 256 (10 cells padded to 256)
        //   bytes: 1,000,000 + 256 x 512                                  = 1,131,072 -> 1.131072e-3 s at 1 GB/s
        //   FLOPs: dense 2 x 0.5e6 x 10                                   = 10,000,000
        //          attention 4 x 10 tokens x 256 cells x 4 heads x 32 x 2 layers = 2,621,440
        //          12,621,440 at 1e10 FLOP/s                              = 1.262144e-3 s: compute-bound
        // step 2, one generated token, n_kv 256: bytes 1,131,072 -> 1.131072e-3 s; FLOPs 1,000,000 +
        //   262,144 = 1,262,144 -> 1.262144e-4 s: memory-bound, 1.131072e-3 s
        CHECK(s.r(0).first_token == doctest::Approx(1.262144e-3).epsilon(1e-12));
        CHECK(s.r(0).finish == doctest::Approx(1.262144e-3 + 1.131072e-3).epsilon(1e-12));
        CHECK(s.sim.totals().sim_seconds == s.r(0).finish);
    }
    SUBCASE("step time of a call: weights once per ubatch, K/V of every cache entry") {
        sim_clock clock;
        step_timer timer(step_time_model{test_device(), model_preset("tiny-llama")}, clock);
        const ubatch_work w{10, 256, 1, 2, 256};
        CHECK(timer.decode_done(DECODE_OK, {{w}}, 10, 0).predicted_s == doctest::Approx(1.262144e-3).epsilon(1e-12));
        CHECK(timer.decode_done(DECODE_OK, {{w}, {w}}, 20, 0).predicted_s == doctest::Approx(2 * 1.262144e-3).epsilon(1e-12));
        // one ubatch in two caches: weights 1,000,000 bytes once + K/V 2 x 131,072 = 1,262,144 bytes -> 1.262144e-3 s;
        // FLOPs 10,000,000 + 2 x 2,621,440 = 15,242,880 -> 1.524288e-3 s: compute-bound
        CHECK(timer.decode_done(DECODE_OK, {{w, w}}, 10, 0).predicted_s == doctest::Approx(1.524288e-3).epsilon(1e-12));
        CHECK(timer.decode_done(DECODE_OK, {}, 0, 0).predicted_s == 0.0);
        // h200: 1131072 bytes over 4.8e12 B/s (2.36e-7 s) vs 12621440 flops over 9.89e14 (1.28e-8 s)
        const step_time_model h200{device_preset("h200-datasheet"), model_preset("tiny-llama")};
        CHECK(h200.ubatch_seconds({w}) == doctest::Approx(1131072.0 / 4.8e12).epsilon(1e-12));
    }
    SUBCASE("many requests") {
        sim_run s(ctx_params(1024, 4, 64), {});
        std::vector<request> rs;
        for (int i = 0; i < 12; ++i) rs.push_back(req(0.0005 * i, 20 + 7 * i, 3 + i % 5));
        std::vector<double> after_step;
        s.sim.run(trace_of(rs), [&](size_t, size_t) { after_step.push_back(s.sim.clock().now()); });
        REQUIRE(after_step.size() == s.sim.totals().steps);
        for (size_t i = 1; i < after_step.size(); ++i) CHECK(after_step[i] > after_step[i - 1]);
        for (const auto & r : s.sim.results()) {
            CHECK(r.outcome == request_outcome::done);
            CHECK(r.arrival <= r.admission);
            CHECK(r.admission < r.first_token);
            CHECK(r.first_token <= r.finish);
        }
        CHECK(s.sim.totals().sim_seconds == after_step.back());
    }
}
