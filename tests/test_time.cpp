// The simulated time's one owner (lib/time): the clock, and one step-time computation per
// llama_decode call, published as one typed record (time/step_timer.h) that steps.csv consumes.
// Expected values are literals and hand computations on tiny-llama (0.5e6 f16 parameters in one
// group, 2 layers, 4 heads of 32: 256 K/V bytes per cell and layer), written out.
#include "core/errors.h"
#include "drive/op_runner.h"
#include "replay/replay_options.h"
#include "report/steps.h"
#include "sched/server_sim.h"
#include "time/sim_clock.h"
#include "time/step_timer.h"
#include "time/bench_coverage.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <sstream>
#include <string>
#include <vector>

using namespace kvsim;

namespace {

// 1 GB/s and 10 GFLOP/s.
device_profile test_device() { return {"test", 1.0, 0.01}; }
step_time_model tiny_model() { return step_time_model{test_device(), model_preset("tiny-llama")}; }

// The counting fake: every record the timer publishes.
struct record_log : step_observer {
    std::vector<step_record> seen;
    void on_step(const step_record & r) override { seen.push_back(r); }
};

// 10 tokens, n_kv 256, 1 stream, 2 layers, 256 bytes per cell and layer.
const ubatch_work prompt10{10, 256, 1, 2, 256};

request req(double arrival, int32_t n_prompt, int32_t n_gen, std::vector<uint64_t> hash_ids) {
    request r;
    r.arrival_s = arrival;
    r.n_prompt = n_prompt;
    r.n_gen = n_gen;
    r.hash_ids = std::move(hash_ids);
    return r;
}

}  // namespace

TEST_CASE("sim_clock: steps count up, time only moves forward, an op-trace clock has no time") {
    sim_clock c;
    CHECK(c.step() == 0);
    CHECK(c.now() == 0.0);
    CHECK(c.timed());
    c.begin_step();
    c.begin_step();
    CHECK(c.step() == 2);
    c.advance(0.25);
    CHECK(c.now() == 0.25);
    c.wait_until(0.125);   // an arrival in the past: the clock does not go back
    CHECK(c.now() == 0.25);
    c.wait_until(2.0);
    CHECK(c.now() == 2.0);
    c.set_step(9);
    CHECK(c.step() == 9);
    const sim_clock ops(false);
    CHECK_FALSE(ops.timed());
    CHECK(ops.now() == 0.0);
}

TEST_CASE("step_timer: one record per call; the clock advances by its predicted time; failed calls and restores take none") {
    sim_clock clock;
    clock.advance(1.0);
    step_timer timer(tiny_model(), clock);
    record_log log;
    timer.add_observer(&log);

    // by hand: weights 0.5e6 x 2 B = 1e6 B, K/V 256 cells x 256 B x 2 layers = 131072 B -> 1131072 B over 1 GB/s = 1.131072e-3 s;
    // FLOPs 2 x 0.5e6 x 10 = 1e7 dense + 4 x 10 x 256 x 4 x 32 x 2 = 2621440 attention -> over 10 GFLOP/s = 1.262144e-3 s
    const step_record & r = timer.decode_done(DECODE_OK, {{prompt10}}, 10, 0);
    CHECK(r.kind == step_kind::decode);
    CHECK(r.rc == 0);
    CHECK(r.t_start == 1.0);
    CHECK(r.n_prompt == 10);
    CHECK(r.n_gen == 0);
    CHECK(r.n_ubatch == 1);
    CHECK(r.n_kv == 256);
    CHECK(r.work.n_tokens == 10);
    CHECK(r.work.weight_bytes == 1e6);
    CHECK(r.work.kv_bytes == 131072);
    CHECK(r.work.dense_flops == 1e7);
    CHECK(r.work.attn_flops == 2621440);
    CHECK(r.predicted_s == doctest::Approx(1.262144e-3).epsilon(1e-12));
    CHECK(clock.now() == doctest::Approx(1.0 + 1.262144e-3).epsilon(1e-12));

    // two ubatches of one call: one record, twice the time
    const double t1 = clock.now();
    CHECK(timer.decode_done(DECODE_OK, {{prompt10}, {prompt10}}, 20, 0).predicted_s == doctest::Approx(2 * 1.262144e-3).epsilon(1e-12));
    CHECK(clock.now() == doctest::Approx(t1 + 2 * 1.262144e-3).epsilon(1e-12));

    // no slot: the ubatch placed before the failure is counted, no time passes
    const double t2 = clock.now();
    const step_record & f = timer.decode_done(DECODE_NO_SLOT, {{prompt10}}, 0, 0);
    CHECK(f.rc == DECODE_NO_SLOT);
    CHECK(f.n_ubatch == 1);
    CHECK(f.predicted_s == 0.0);
    CHECK(clock.now() == t2);

    // a restore: the scheduler says so; no time on a profile without a host link
    const step_record & s = timer.restore_done(true, 1e9);
    CHECK(s.kind == step_kind::restore);
    CHECK(s.t_start == t2);
    CHECK(s.predicted_s == 0.0);
    CHECK(clock.now() == t2);
    CHECK(std::string(step_kind_name(s.kind)) == "restore");
    timer.save_done(1e9);
    CHECK(clock.now() == t2);

    CHECK(log.seen.size() == 4);
}

TEST_CASE("step_timer: saves and restores cross the host link (host_link_gbs)") {
    sim_clock clock;
    step_time_model tm = tiny_model();
    tm.device.host_link_gbs = 2;   // 2e9 bytes per second
    step_timer timer(tm, clock);
    const step_record & r = timer.restore_done(true, 1e9);   // 1 GB in: 0.5 s, in the record and on the clock
    CHECK(r.predicted_s == doctest::Approx(0.5));
    CHECK(clock.now() == doctest::Approx(0.5));
    timer.save_done(3e9);   // 3 GB out: 1.5 s on the clock, no record
    CHECK(clock.now() == doctest::Approx(2.0));
    CHECK(timer.restore_done(false, 1e9).predicted_s == 0.0);   // did not fit: nothing copied
    CHECK(clock.now() == doctest::Approx(2.0));
    CHECK(timer.host_copy_bytes() == 4e9);
    CHECK(timer.host_copy_seconds() == doctest::Approx(2.0));
}

TEST_CASE("step_timer: measured attention replaces the attention part of the calls after it") {
    sim_clock clock;
    step_timer timer(tiny_model(), clock);
    attention_feedback & fb = timer;
    fb.measured_attention(1e-9);   // 1 ns per K/V byte
    // dense part max(1e6 B / 1 GB/s, 1e7 FLOP / 10 GFLOP/s) = 1e-3 s, plus 131072 B x 1e-9 s = 1.31072e-4 s
    CHECK(timer.decode_done(DECODE_OK, {{prompt10}}, 10, 0).predicted_s == doctest::Approx(1.131072e-3).epsilon(1e-12));
    CHECK(timer.model().measured_s_per_kv_byte == 1e-9);
}

TEST_CASE("server_sim: one step record per llama_decode call and per restore, kinds set by the scheduler; steps.csv rows") {
    context_params cp;
    cp.n_ctx = 4096;
    cp.n_seq_max = 2;
    cp.n_batch = 2048;
    cp.n_ubatch = 512;
    cp.kv_unified = true;
    context ctx(model_preset("tiny-llama"), cp);
    op_runner run(ctx);
    server_sim sim(run, server_params{}, tiny_model());
    record_log log;
    steps_recorder steps;
    sim.timer().add_observer(&log);
    sim.timer().add_observer(&steps);
    run.add_op_observer(&steps);
    // A (blocks 1, 2) runs on slot 1 and is saved to the RAM cache and cleared when B launches on
    // slot 0; C (A's blocks again) gets slot 1, which restores A's 600 cells (two recorded calls of
    // at most n_ubatch positions, R1.0 and R1.1) and then evaluates its last prompt token only.
    request_trace t;
    t.path = "test";
    t.format = request_format::mooncake;
    t.requests = {req(0, 600, 1, {1, 2}), req(10, 100, 1, {7}), req(20, 600, 1, {1, 2})};
    sim.run(t);

    REQUIRE(sim.totals().decode_calls == 3);
    REQUIRE(sim.totals().ram_restores == 1);
    REQUIRE(log.seen.size() == 4);
    const std::vector<step_kind> kinds{step_kind::decode, step_kind::decode, step_kind::restore, step_kind::decode};
    const std::vector<uint64_t> prompt{600, 100, 0, 1};
    for (size_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        CHECK(log.seen[i].kind == kinds[i]);
        CHECK(log.seen[i].n_prompt == prompt[i]);
        CHECK(log.seen[i].n_gen == 0);
    }
    CHECK(log.seen[0].n_ubatch == 2);
    CHECK(log.seen[2].t_start == 20.0);
    // the clock: idle until C's arrival at 20 s, then C's one step
    CHECK(sim.totals().sim_seconds == 20.0 + log.seen[3].predicted_s);

    std::ostringstream csv;
    steps.write_csv(csv);
    std::vector<std::string> labels, kind_col;
    std::istringstream in(csv.str());
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string step, label, kind;
        std::getline(f, step, ',');
        std::getline(f, label, ',');
        std::getline(f, kind, ',');
        labels.push_back(label);
        kind_col.push_back(kind);
    }
    CHECK(labels == std::vector<std::string>{"d0", "d1", "R1.0", "R1.1", "d2"});
    CHECK(kind_col == std::vector<std::string>{"decode", "decode", "restore", "restore", "decode"});
}

TEST_CASE("profile_warnings: another model shape, other weight types, other K/V types, -fa off") {
    const device_profile d = device_preset("rtx-4090");   // calibrated on llama-3-8b, q4_K_M + f16, f16 K/V
    const std::vector<std::string> f16kv{"f16/f16"};
    CHECK(profile_warnings(d, model_preset("llama-3.1-8b"), "q4_K_M", f16kv, true).empty());   // same shape as llama-3-8b
    CHECK(profile_warnings(d, model_preset("llama-3-8b"), "f16", f16kv, true).empty());
    CHECK(profile_warnings(d, model_preset("qwen2.5-0.5b"), "q4_K_M", f16kv, true) ==
          std::vector<std::string>{"profile rtx-4090 was calibrated on llama-3-8b, not qwen2.5-0.5b: its fitted efficiencies are another model's"});
    CHECK(profile_warnings(d, model_preset("llama-3-8b"), "q4_0", f16kv, true) ==
          std::vector<std::string>{"profile rtx-4090 was calibrated on q4_K_M + f16 weights, not q4_0: the GEMMs on other weight types differ"});
    CHECK(profile_warnings(d, model_preset("llama-3-8b"), "f16", {"f16/f16", "q8_0/q8_0", "q8_0/q8_0", "q4_0/f16"}, true) ==
          std::vector<std::string>{"profile rtx-4090 was calibrated with f16/f16 K/V, not q8_0/q8_0, q4_0/f16: attention on other "
                                   "cache types reads other bytes through other kernels"});
    CHECK(profile_warnings(device_preset("h100-datasheet"), model_preset("llama-3-8b"), "q4_0", {"q8_0/q8_0"}, false) ==
          std::vector<std::string>{"-fa off is not modelled: the simulated times are those of flash attention"});   // no kv recorded
    CHECK(kv_types_name(ggml_type::q8_0, ggml_type::f16) == "q8_0/f16");
    // a profile fitted across models: any of them, or one of their shapes, is its own
    device_profile several = d;
    several.calibrated_models = {"llama-3-8b", "llama-3.2-1b"};
    CHECK(profile_warnings(several, model_preset("llama-3.2-1b"), "f16", f16kv, true).empty());
    CHECK(profile_warnings(several, model_preset("llama-3.1-8b"), "f16", f16kv, true).empty());
    CHECK(profile_warnings(several, model_preset("qwen2.5-0.5b"), "f16", f16kv, true) ==
          std::vector<std::string>{"profile rtx-4090 was calibrated on llama-3-8b + llama-3.2-1b, not qwen2.5-0.5b: its fitted "
                                   "efficiencies are other models'"});
}

TEST_CASE("weight_read_fraction_by_type: a listed type reads at its own fraction, any other at weight_read_fraction") {
    nlohmann::json j = nlohmann::json::parse(device_preset_json("h200-datasheet"));
    j["weight_read_fraction"] = 0.8;
    j["weight_read_fraction_by_type"] = {{"q4_K_M", 0.4}};
    const device_profile d = parse_device_profile(j, "p.json");
    CHECK(d.read_fraction("q4_K_M") == 0.4);
    CHECK(d.read_fraction("f16") == 0.8);
    CHECK(device_profile_json(d)["weight_read_fraction_by_type"] == j["weight_read_fraction_by_type"]);
    CHECK_FALSE(device_profile_json(device_preset("h200-datasheet")).contains("weight_read_fraction_by_type"));   // only when fitted
    // a decode step of q4_K_M weights on it takes what one on a profile reading everything at 0.4 takes; f16 at 0.8's
    nlohmann::json all = j;
    all.erase("weight_read_fraction_by_type");
    const model_shape m = model_preset("llama-3.1-8b");
    const std::vector<ubatch_work> one_token{{1, 256, 1, m.n_layer, kv_bytes_per_cell_layer(m, ggml_type::f16, ggml_type::f16)}};
    for (const auto & [type, fraction] : {std::pair<const char *, double>{"q4_K_M", 0.4}, {"f16", 0.8}}) {
        CAPTURE(type);
        all["weight_read_fraction"] = fraction;
        const weight_file_type & ft = parse_weight_file_type(type);
        CHECK(step_time_model{d, m, &ft}.ubatch_seconds(one_token) ==
              doctest::Approx(step_time_model{parse_device_profile(all, "q.json"), m, &ft}.ubatch_seconds(one_token)));
    }
    // bad maps: not an object, a type kvsim does not know, another spelling, a fraction out of range
    for (const char * text : {R"([0.5])", R"({"q3_K": 0.5})", R"({"Q4_K_M": 0.5})", R"({"f16": 0})", R"({"f16": 11})", R"({"f16": "fast"})"}) {
        CAPTURE(text);
        nlohmann::json b = j;
        b["weight_read_fraction_by_type"] = nlohmann::json::parse(text);
        CHECK_THROWS_AS(parse_device_profile(b, "p.json"), input_error);
    }
    const auto error_of = [](const nlohmann::json & p) -> std::string {
        try {
            parse_device_profile(p, "p.json");
        } catch (const input_error & e) {
            return e.what();
        }
        return "";
    };
    nlohmann::json b = j;
    b["weight_read_fraction_by_type"] = {{"Q4_K_M", 0.5}};
    CHECK(error_of(b).find("write Q4_K_M as q4_K_M") != std::string::npos);
    // hostile helper, 2026-12-04: an unknown name was echoed raw (a control byte split the error line)
    b["weight_read_fraction_by_type"] = {{"f1\x01\n6", 0.5}};
    const std::string e = error_of(b);
    CHECK(e.find("not a weight type") != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
    CHECK(e.find('\x01') == std::string::npos);
    // calibration.model: names joined by " + ", none empty (" + " and "a + + b" lost a name and misnamed the rest)
    for (const char * text : {" + ", "llama-3.2-1b + + qwen2.5-0.5b", "llama-3.2-1b + "}) {
        CAPTURE(text);
        nlohmann::json c = nlohmann::json::parse(device_preset_json("rtx-3090"));
        c["calibration"]["model"] = text;
        CHECK(error_of(c).find("field calibration.model must be model names joined by") != std::string::npos);
    }
}

TEST_CASE("shipped profiles: the default is calibrated, the rooflines named as such, every time's accuracy said") {
    // the default device (replay_options) is fitted to llama-bench results measured on an H200 (2026-12-04,
    // tests/data/llama-bench/h200-*: 143 results of Llama-3.1-8B, Llama-3.2-1B and Qwen2.5-0.5B shapes in 2-4 weight
    // types each), not derived from another card
    const device_profile h200 = replay_options{}.device;
    CHECK(h200.name == "h200");
    CHECK(h200.derived_from.empty());
    CHECK(h200.bandwidth_gbs == 4800);
    CHECK(h200.source == "calibrated from llama-bench results measured on an H200 (llama.cpp de3ff815, 2026-12-04)");
    CHECK(h200.held_out.results == 143);
    CHECK(h200.several_sequences.median_abs >= 0);   // the llama-batched-bench runs, predicted by the fit
    const std::string h200_note = time_accuracy_note(h200);
    CHECK(h200_note.rfind("held-out error ", 0) == 0);
    CHECK(h200_note.find("(leave-one-out, 143 llama-bench results of one sequence; several sequences in one cache "
                         "(llama-batched-bench): ") != std::string::npos);
    CHECK(time_accuracy_json(h200).contains("several_sequences"));
    // the H100 SXM still has no table of its own: derived from the H100 PCIe's fit
    const device_profile sxm = device_preset("h100-sxm");
    CHECK(sxm.derived_from == "h100-pcie");
    CHECK(sxm.weight_read_fraction == device_preset("h100-pcie").weight_read_fraction);
    CHECK(time_accuracy_note(sxm).rfind("derived from h100-pcie, not validated on this card; h100-pcie's held-out error ", 0) == 0);
    // every fitted profile records the leave-one-out error of its fit, which the note quotes
    for (const auto & n : device_preset_names(true)) {
        CAPTURE(n);
        const device_profile d = device_preset(n);
        CHECK(d.source != "datasheet");
        CHECK(d.held_out.method == "leave-one-out");
        CHECK(d.held_out.median_abs > 0);
        CHECK(d.held_out.max_abs >= d.held_out.median_abs);
        CHECK(nlohmann::json::parse(device_preset_json(n)).contains("description"));
    }
    const device_profile r = device_preset("rtx-3090");
    CHECK(time_accuracy_note(r) == fmt::format("held-out error {:.1f} % median, {:.1f} % max (leave-one-out, 16 llama-bench results of one "
                                               "sequence; server steps of several sequences not validated)",
                                               100 * r.held_out.median_abs, 100 * r.held_out.max_abs));
    CHECK(time_accuracy_note(device_preset("h100-datasheet")).rfind("datasheet roofline: an upper bound", 0) == 0);
    CHECK(time_accuracy_note(device_preset("cpu")).rfind("an estimate, not validated", 0) == 0);
    device_profile o = r;
    o.overridden = true;
    CHECK(time_accuracy_note(o).find("; numbers overridden on the command line, which the error does not cover") != std::string::npos);
    device_profile ds = device_preset("h100-datasheet");   // replay's --bandwidth-gbs appends to the source
    ds.source += ", overridden: --bandwidth-gbs 100";
    ds.overridden = true;
    CHECK(time_accuracy_note(ds) ==
          "datasheet roofline: an upper bound, 2-12x faster than published llama-bench results; numbers overridden on the command line");
    const auto j = time_accuracy_json(r);
    CHECK(j["held_out"]["results"] == 16);
    CHECK(j["profile"] == "rtx-3090");
    CHECK_THROWS_AS(device_preset("h100"), std::invalid_argument);   // which H100? the names say
    // a profile file's held_out is checked like any other field
    nlohmann::json bad = nlohmann::json::parse(device_preset_json("rtx-3090"));
    bad["calibration"]["held_out"]["median_abs_error"] = "low";
    CHECK_THROWS_AS(parse_device_profile(bad, "p.json"), input_error);
    // and so is several_sequences: an object with a median and a max not below it
    for (const char * text : {R"("x")", R"({"max_abs_error": 0.1})", R"({"median_abs_error": 0.2, "max_abs_error": 0.1})",
                              R"({"median_abs_error": -0.1, "max_abs_error": 0.1})", R"({"median_abs_error": "low", "max_abs_error": 0.1})",
                              R"({"median_abs_error": 0.1})",                               // the max is not invented
                              R"({"median_abs_error": 0.1, "max_abs_eror": 0.2})"}) {       // nor a typo dropped

        CAPTURE(text);
        nlohmann::json b = nlohmann::json::parse(device_preset_json("rtx-3090"));
        b["calibration"]["several_sequences"] = nlohmann::json::parse(text);
        CHECK_THROWS_AS(parse_device_profile(b, "p.json"), input_error);
    }
    // the calibration's model, weights and K/V types are printed in WARNING rows: no terminal escapes
    for (const char * k : {"model", "weights", "kv"}) {
        CAPTURE(k);
        nlohmann::json b = nlohmann::json::parse(device_preset_json("rtx-3090"));
        b["calibration"][k] = "llama\x1b[31m";
        CHECK_THROWS_AS(parse_device_profile(b, "p.json"), input_error);
        b["calibration"][k] = 7;
        CHECK_THROWS_AS(parse_device_profile(b, "p.json"), input_error);
    }
    nlohmann::json ok = nlohmann::json::parse(device_preset_json("rtx-3090"));
    ok["calibration"]["several_sequences"] = {{"median_abs_error", 0.103}, {"max_abs_error", 0.364}, {"files", {"a.jsonl"}}};
    CHECK(time_accuracy_note(parse_device_profile(ok, "p.json")).ends_with(
        "; several sequences in one cache (llama-batched-bench): 10.3 % median, 36.4 % max)"));
}

TEST_CASE("bench_coverage: the llama-bench command for the calls a replay made, by hand") {
    bench_coverage c;
    const auto call = [&](uint64_t n_prompt, uint64_t n_gen, uint32_t n_kv, int rc = 0) {
        step_record r;
        r.rc = rc;
        r.n_prompt = n_prompt;
        r.n_gen = n_gen;
        r.n_kv = n_kv;
        c.on_step(r);
    };
    context_params p;
    p.n_seq_max = 4;
    p.n_batch = 2048;
    p.n_ubatch = 512;
    p.type_k = p.type_v = ggml_type::q8_0;
    p.flash_attn = true;
    CHECK(c.command(p).empty());
    // 60 calls of 4 generated tokens, 37 of 2, 1 of 3, prompts of 100, 300, 2048 and a failed 5000: 101 successful
    // calls, so the single 3-token call is 0.99 % (not listed)
    for (int i = 0; i < 60; ++i) call(0, 4, 1000);
    for (int i = 0; i < 37; ++i) call(0, 2, 3000);
    call(0, 3, 3000);
    call(100, 0, 256);
    call(297, 3, 600);   // a prompt chunk with three slots' tokens: 300 tokens
    call(5000, 0, 8000, 1);   // failed: not counted
    call(2048, 0, 9000);
    // tokens <= 4 at >= 1 % of 101: 2 and 4; prompt calls 100, 300, 2048: median 300, max 2048 (= n_batch);
    // n_kv of the 101 successful calls sorted: 256, 600, 60 x 1000, 38 x 3000, 9000: median (index 50) 1000 -> 1024,
    // p90 (index 90) 3000 -> 3072
    CHECK(c.command(p) == "llama-bench -m MODEL.gguf -p 2,4,300,2048 -n 32 -d 0,1024,3072 -ub 512 -b 2048 -ctk q8_0 -ctv q8_0 "
                          "-fa 1 -r 5 -o json > bench.json");
    CHECK(c.coverage(p) == "101 decode calls: 97 % with 1-4 tokens (slots generating together), prompt calls median 300 / max 2048 "
                           "tokens, n_kv median 1000 / p90 3000");
}
