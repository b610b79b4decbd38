// The op door (lib/drive/op_runner): its position guard on the named calls the scheduler and the
// benchmarks use, and the decode observer a caller swaps in for a while (scoped_decode_observer,
// server_sim::run). Expected positions and shifts are worked out by hand in the comments.
#include "drive/op_runner.h"
#include "core/errors.h"
#include "sched/server_sim.h"
#include "time/step_time.h"

#include <doctest/doctest.h>

#include <functional>
#include <stdexcept>
#include <string>

using namespace kvsim;

namespace {

context_params one_seq(uint32_t n_ctx) {
    context_params p;
    p.n_ctx = n_ctx;
    p.n_seq_max = 1;
    return p;
}

// n tokens of seq 0 from position p0.
llama_batch_in tokens_at(llama_pos p0, uint32_t n) {
    llama_batch_in b;
    for (uint32_t i = 0; i < n; ++i) b.add(p0 + (llama_pos) i, {0});
    return b;
}

// The lib_out_of_range f throws (what() and value()); fails the test when it throws nothing.
std::pair<std::string, std::string> refusal_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const lib_out_of_range & e) {
        return {e.what(), e.value()};
    }
    FAIL("no lib_out_of_range thrown");
    return {};
}

// Throws at the first ubatch placed: stands for any observer (a report writer out of disk, a
// kernel hook failing) that ends a replay with an exception.
class throwing_observer : public decode_observer {
public:
    void on_apply(const kv_cache &, const slot_info &, const ubatch &, uint32_t) override { throw std::runtime_error("observer failed"); }
};

}  // namespace

// server_sim's context shift calls seq_add through the door: it used to reach kv_cells::pos_add
// unguarded (only op_replay checked), so a delta past INT32_MAX overflowed llama_pos.
TEST_CASE("the door's position guard refuses a seq_add past INT32_MAX and changes nothing") {
    context ctx(model_preset("tiny-llama"), one_seq(256));
    op_trace rec;
    op_runner run(ctx, nullptr, &rec, nullptr);
    REQUIRE(run.decode(tokens_at(2147483000, 4), 1) == DECODE_OK);   // cells 0-3 at 2147483000..2147483003
    // 2147483000 + 1000 = 2147484000 > 2147483647 (INT32_MAX); cell 0 is the first in cell order
    const auto [what, value] = refusal_of([&] { run.seq_add(0, 0, -1, 1000, 2); });
    CHECK(what == "add by 1000 moves seq 0 position 2147483000 (pending shift 0) outside the int32 range");
    CHECK(value == "1000");
    CHECK(ctx.memory().seq_pos_min(0) == 2147483000);
    CHECK(ctx.memory().seq_pos_max(0) == 2147483003);
    CHECK_FALSE(ctx.memory().get_has_shift());
    CHECK(rec.groups.size() == 1);   // the decode; the refused op reached no op observer
    // the largest move that fits: 2147483003 + 644 = 2147483647
    run.seq_add(0, 0, -1, 644, 3);
    CHECK(ctx.memory().seq_pos_max(0) == 2147483647);
    CHECK(rec.groups.size() == 2);
}

TEST_CASE("the door's position guard: seq_div keeps positions small but grows the pending shift") {
    context ctx(model_preset("tiny-llama"), one_seq(256));
    op_runner run(ctx);
    REQUIRE(run.decode(tokens_at(2147483000, 4), 1) == DECODE_OK);
    // cell 0: 2147483000 / 2 = 1073741500, shift 1073741500; / 2 = 536870750, shift 1073741500 + 536870750 = 1610612250
    run.seq_div(0, -1, -1, 2, 2);
    run.seq_div(0, -1, -1, 2, 3);
    CHECK(ctx.memory().seq_pos_min(0) == 536870750);
    // + 600000000: position 1136870750 fits, shift 2210612250 does not (cells 1-3 overflow too; cell 0 is named)
    const auto [what, value] = refusal_of([&] { run.seq_add(0, -1, -1, 600000000, 4); });
    CHECK(what == "add by 600000000 moves seq 0 position 536870750 (pending shift 1610612250) outside the int32 range");
    CHECK(value == "600000000");
    CHECK(ctx.memory().seq_pos_min(0) == 536870750);
    // a negative delta keeps the shift in range: 1610612250 - 1000000000 = 610612250
    run.seq_add(0, -1, -1, -1000000000, 5);
    CHECK(ctx.memory().seq_pos_max(0) == -1);   // every cell went below 0 and was freed
}

// An open end has always taken a cell at INT32_MAX itself into the guard (the op trace replay's
// behaviour, kept): the cell the cache's range [0, INT32_MAX) leaves alone still refuses the op.
TEST_CASE("the door's position guard: an open-ended seq_add over a cell at INT32_MAX is refused") {
    context ctx(model_preset("tiny-llama"), one_seq(256));
    op_runner run(ctx);
    REQUIRE(run.decode(tokens_at(2147483643, 4), 1) == DECODE_OK);   // 2147483643..2147483646
    run.seq_add(0, 0, -1, 1, 2);                                     // 2147483644..2147483647
    // cell 3 at 2147483647 (pending shift 1) would move to 2147483648
    const auto [what, value] = refusal_of([&] { run.seq_add(0, 0, -1, 1, 3); });
    CHECK(what == "add by 1 moves seq 0 position 2147483647 (pending shift 1) outside the int32 range");
    CHECK(value == "1");
    // a closed range below it moves the others
    run.seq_add(0, 0, 2147483646, -10, 4);
    CHECK(ctx.memory().seq_pos_min(0) == 2147483634);
}

TEST_CASE("scoped_decode_observer puts the previous observer back, also when an exception leaves the scope") {
    context ctx(model_preset("tiny-llama"), one_seq(256));
    decode_observer outer, inner;
    op_runner run(ctx, &outer);
    {
        const scoped_decode_observer s(run, &inner);
        CHECK(run.observer() == &inner);
    }
    CHECK(run.observer() == &outer);
    throwing_observer thrower;
    try {
        const scoped_decode_observer s(run, &thrower);
        run.decode(tokens_at(0, 1), 1);
        FAIL("the observer did not throw");
    } catch (const std::runtime_error & e) {
        CHECK(std::string(e.what()) == "observer failed");
    }
    CHECK(run.observer() == &outer);
}

// server_sim::run chains its step-time work collector in front of the caller's observer; an
// exception used to leave the door pointing at the collector (a dead local then).
TEST_CASE("server_sim::run ended by an exception leaves the caller's decode observer on the door") {
    context_params cp = one_seq(256);
    context ctx(model_preset("tiny-llama"), cp);
    throwing_observer thrower;
    op_runner run(ctx, &thrower);
    const step_time_model tm{device_profile{"test", 1.0, 0.01}, model_preset("tiny-llama")};
    server_sim sim(run, server_params{}, tm);
    request r;
    r.line = 2;
    r.n_prompt = 8;
    r.n_gen = 2;
    request_trace t;
    t.path = "test";
    t.requests = {r};
    CHECK_THROWS_WITH_AS(sim.run(t), "observer failed", std::runtime_error);
    CHECK(run.observer() == &thrower);
}
