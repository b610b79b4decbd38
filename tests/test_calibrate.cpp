// kvsim calibrate: parameter recovery from hand-made llama-bench results of a known linear model,
// the llama-bench replay (ubatches, n_kv) against llama-bench's loop, and bad input (exit 2,
// one error naming file and field, no profile written).
#include "cli_test_util.h"
#include "time/calibrate.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>

using namespace kvsim;
using namespace kvsim_test;

namespace {
// The cpu profile charging every cell up to n_kv (its default is the visible cells): the hand-made results below
// are written out with n_kv, which keeps their arithmetic to the cache's own padding. No K-shift price: none of them
// shifts, and a kept price would add its note to the notes the tests count.
device_profile cpu_n_kv() {
    device_profile d = device_preset("cpu");
    d.attention_cells = "n_kv";
    d.k_shift_s_per_theta = 0;
    return d;
}
const char * k_data = "tests/data/llama-bench/synthetic-llama-3.2-1b-q4_0.json";

llama_bench_row point(uint32_t p, uint32_t n, uint32_t d, uint32_t ub, const std::string & ctk = "f16") {
    llama_bench_row b;
    b.file = "synthetic";
    b.model_type = "llama 1B Q4_0";
    b.model_size = 763097088;
    b.model_n_params = 1235814400;
    b.n_batch = 2048;
    b.n_ubatch = ub;
    b.n_threads = 2;
    b.type_k = ctk;
    b.type_v = ctk;
    b.flash_attn = 1;
    b.n_prompt = p;
    b.n_gen = n;
    b.n_depth = d;
    return b;
}

// Hand-made llama-bench results of Llama-3.2-1B Q4_0 from a known linear model, each term written
// out (none computed by kvsim). The model: 16 layers, n_embd 2048 = 32 heads x 64, 8 KV heads, n_ff
// 8192, vocabulary 128256, tied embeddings; the machine (the "cpu" preset: 67 GB/s, 0.4 TFLOP/s):
//   weights: W = 763,097,088 bytes read per ubatch (llama-bench's model_size for this file: with tied
//     embeddings the output matmul reads token_embd, so every byte is read), at 25 GB/s achieved
//     (weight_read_fraction 25/67): W / 25e9 = 0.03052388352 s per memory-bound ubatch
//   dense FLOPs of an n-token ubatch: 2 x 16 layers x 60,817,408 x n;
//     per layer q 2048 x 2048, k and v 2048 x 512, o 2048 x 2048, ffn 3 x 2048 x 8192 = 60,817,408
//     n = 512: 996,432,412,672 FLOPs at 0.15 TFLOP/s (gemm_fraction 0.375) = 6.642882751146667 s
//     n = 64:  124,554,051,584 FLOPs at 0.12 TFLOP/s (gemm_fraction 0.3)   = 1.037950429866667 s
//   the output matrix (tied token_embd, 2048 x 128256, Q6_K in a Q4_0 file: llama-quant.cpp llama_tensor_get_type
//     gives the output, or token_embd without one, Q6_K: 128256 x 2048 / 256 x 210 = 215,470,080 bytes) for the one
//     logits row of a prompt ubatch: ggml-cpu's one-row vec_dot pass, 215,470,080 / 25e9 = 0.0086188032 s beside the
//     GEMM (n = 512: 6.651501554346667 s, n = 64: 1.046569233066667 s)
//     (a 1-token ubatch, output included, 2,471,493,632 FLOPs, stays memory-bound: 0.0206 s < 0.0305 s)
//   K/V bytes: n_kv x per cell; per cell 16 layers x (K + V) x 8 heads x 64: f16 x 2 bytes = 32,768,
//     q8_0 2 blocks of 34 bytes per head = 17,408; at 3e-11 s per byte
//   attention FLOPs: 4 x n x n_kv x 2048 x 16, at 2e-12 s per FLOP
//   n_kv: the cells used after the ubatch, padded to 256 (the cache: the context padded to 256)
// The results (seconds), sums of those terms:
//   pp512 -ub 512: n_kv 512: 6.651501554346667 + 16,777,216 x 3e-11 + 34,359,738,368 x 2e-12
//     = 6.720724347562667
//   pp512 -ub 64: 8 ubatches, n_kv 256, 256, 256, 256, 512, 512, 512, 512 (3072 in all):
//     8 x 1.046569233066667 + 3072 x 32,768 x 3e-11 + 4 x 64 x 3072 x 2048 x 16 x 2e-12 = 8.427113370965333
//   tg16: 16 ubatches of 1 token, n_kv 256: 16 x 0.03052388352 + 16 x 256 x 32,768 x 3e-11
//     + 16 x 4 x 256 x 2048 x 16 x 2e-12 = 0.493482409984
//   tg16 -ctk q8_0 -ctv q8_0: 16 x 256 x 17,408 bytes instead = 0.491594973184
//   tg16 @ d4096: n_kv 4352 (cells 4097..4112 padded; context 4112 -> 4352): 16 x 0.03052388352
//     + 16 x 4352 x 32,768 x 3e-11 + 16 x 4 x 4352 x 2048 x 16 x 2e-12 = 0.575086788608
//   pp512 @ d4096: n_kv 4608: 6.651501554346667 + 4608 x 32,768 x 3e-11 + 4 x 512 x 4608 x 2048 x 16 x 2e-12
//     = 7.274506693290667
// ubatches: the number of ubatches of each result (for a per-ubatch cost added on top).
struct hand_result {
    llama_bench_row point;
    double seconds;
    int ubatches;
};
const hand_result k_hand[] = {
    {point(512, 0, 0, 512), 6.720724347562667, 1},
    {point(512, 0, 0, 64), 8.427113370965333, 8},
    {point(0, 16, 0, 512), 0.493482409984, 16},
    {point(0, 16, 0, 512, "q8_0"), 0.491594973184, 16},
    {point(0, 16, 4096, 512), 0.575086788608, 16},
    {point(512, 0, 4096, 512), 7.274506693290667, 1},
};

// The hand-made results, each with ubatch_overhead_s per ubatch added.
std::vector<llama_bench_row> hand_points(double ubatch_overhead_s = 0) {
    std::vector<llama_bench_row> v;
    for (const auto & h : k_hand) {
        v.push_back(h.point);
        v.back().avg_s = h.seconds + ubatch_overhead_s * h.ubatches;
    }
    return v;
}
}  // namespace

TEST_CASE("the llama-bench replay: ubatches and n_kv as llama-bench's test_prompt / test_gen drive the cache") {
    const step_time_model tm{cpu_n_kv(), model_preset("llama-3.2-1b"), &parse_weight_file_type("q4_0")};
    // pp512 at depth 1024 with -ub 128: 4 ubatches of 128; n_ctx 1536 -> n_kv = pad(used, 256), at most 1536
    const auto pp = bench_row_ubatches(point(512, 0, 1024, 128), tm);
    REQUIRE(pp.size() == 4);
    const double cell_bytes = 2.0 * 2 * 512 * 16;   // K + V f16 of 8 x 64 per layer, 16 layers
    // cells used after each ubatch 1152, 1280, 1408, 1536: padded to 256, n_kv 1280, 1280, 1536, 1536
    const double n_kv[4] = {1280, 1280, 1536, 1536};
    for (size_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        CHECK(pp[i].n_tokens == 128);
        CHECK(pp[i].kv_bytes == n_kv[i] * cell_bytes);
    }
    // tg16 at depth 0: 16 one-token ubatches, the last reading 256 cells (n_ctx 16 pads to 256)
    const auto tg = bench_row_ubatches(point(0, 16, 0, 512), tm);
    REQUIRE(tg.size() == 16);
    CHECK(tg.back().n_tokens == 1);
    CHECK(tg.back().kv_bytes == 256 * cell_bytes);
    // one logits row per ubatch (llama_batch_get_one: the last token only): on a CPU the output matrix's one-row pass
    // (ggml_vec_dot: llamafile_sgemm takes no single row) is its bytes, the tied token_embd in Q6_K (llama-quant.cpp
    // llama_tensor_get_type: the output, or token_embd without one): 128256 x 2048 / 256 x 210, out of the GEMM's
    // FLOPs and of the other weights' bytes (763,097,088, llama-bench's model_size, in all)
    CHECK(pp[0].dense_flops == 2.0 * 16 * 60817408 * 128);
    CHECK(pp[0].gemv_output_bytes == 128256.0 * 2048 / 256 * 210);
    CHECK(pp[0].weight_bytes == 763097088.0 - 128256.0 * 2048 / 256 * 210);
    CHECK(tg.back().dense_flops == 2.0 * 16 * 60817408 + 2.0 * 2048 * 128256);   // one token: the output in the step's GEMM
    CHECK(tg.back().gemv_output_bytes == 0);
}

// kshift_steps.py's rows: before each timed step the oldest cell out and the others one position down, so each
// llama_decode first ropes the K of every cell of the cache (llama-kv-cache.cpp: build_graph_shift, get_size() * n_stream)
TEST_CASE("a k_shift row: every timed step follows a K-shift of the whole cache") {
    const step_time_model tm{cpu_n_kv(), model_preset("llama-3.2-1b"), &parse_weight_file_type("q4_0")};
    llama_bench_row p = point(0, 3, 512, 512);
    p.n_ctx = 8192;
    const auto plain = bench_row_ubatches(p, tm);
    REQUIRE(plain.size() == 3);
    CHECK(plain[0].k_shift_thetas == 0);
    CHECK(plain[0].kv_bytes == 768.0 * 2048 * 16);
    p.k_shift = true;
    CHECK(p.test_name() == "tg3 @ d512 after K-shifts");
    const auto shifted = bench_row_ubatches(p, tm);
    REQUIRE(shifted.size() == 3);
    for (const auto & u : shifted) {
        CHECK(u.n_tokens == 1);
        CHECK(u.k_shift_thetas == 8192.0 * 16 * 32);   // the context's cells, used or not, x n_layer x head_dim / 2
        // the freed cell takes the new token (seq_rm moves the cache's head to it: llama-kv-cache.cpp seq_rm), so n_kv
        // stays 512 where the plain steps' 513th cell makes it 768 (2048 bytes per cell and layer, 16 layers)
        CHECK(u.kv_bytes == 512.0 * 2048 * 16);
    }
}

TEST_CASE("a batched row with n_seq_gen: the first sequences take the steps, the others keep their cells") {
    const step_time_model tm{cpu_n_kv(), model_preset("llama-3.2-1b"), &parse_weight_file_type("q4_0")};
    llama_bench_row p = point(0, 4, 128, 512);   // 4 steps after 128-token prompts of each sequence
    p.n_seq = 4;                                 // one unified stream (kv_unified's default)
    const double cell_bytes = 2.0 * 2 * 512 * 16;
    // every sequence decodes: 4 one-token ubatches of 4 tokens; n_ctx 4 x (128 + 4) = 528, padded to 768; the cells
    // used after the first step, 4 x 129 = 516, padded to 256: 768
    const auto all = bench_row_ubatches(p, tm);
    REQUIRE(all.size() == 4);
    CHECK(all[0].n_tokens == 4);
    CHECK(all[0].kv_bytes == 768 * cell_bytes);
    // sequence 0 alone: 4 ubatches of 1 token over the same stream, 513 to 516 cells used: n_kv still 768
    CHECK(p.test_name() == "tg4 @ d128 x4");
    p.n_seq_gen = 1;
    CHECK(p.test_name() == "tg4 @ d128 x4 (1 decoding)");
    const auto one = bench_row_ubatches(p, tm);
    REQUIRE(one.size() == 4);
    for (const auto & u : one) {
        CHECK(u.n_tokens == 1);
        CHECK(u.kv_bytes == 768 * cell_bytes);
    }
    // charged on the cells a token sees (ggml's CPU kernel skips masked cells): sequence 0's 129..132, not n_kv;
    // the scan term counts every cell up to n_kv for each of the 32 heads and 16 layers
    device_profile vis = device_preset("cpu");
    CHECK(vis.attention_cells == "visible");   // the cpu profile's default: ggml's CPU flash attention
    vis.attn_s_per_scanned_cell = 1e-12;
    const step_time_model tv{vis, model_preset("llama-3.2-1b"), &parse_weight_file_type("q4_0")};
    p.n_threads = 1;
    const auto seen = bench_row_ubatches(p, tv);
    REQUIRE(seen.size() == 4);
    CHECK(seen[0].kv_bytes == 129 * cell_bytes);
    CHECK(seen[3].kv_bytes == 132 * cell_bytes);
    CHECK(seen[0].scanned_cells == 768.0 * 32 * 16);
    // the row measured with -t 2: ggml splits the one token's 768 cells between the threads (ubatch_split_kv_visible),
    // chunks 0-383 and 384-767; sequence 0's prompt cells 0-127 sit in the first, its new cells (512 on) in the second:
    // the step takes as long as 128 cells on each thread, charged as 2 x 128
    p.n_threads = 2;
    const auto split = bench_row_ubatches(p, tv);
    REQUIRE(split.size() == 4);
    for (const auto & u : split) CHECK(u.kv_bytes == 256 * cell_bytes);
}

TEST_CASE("a prompt of 64 tokens or more walks every mask value up to n_kv too (ggml's tiled path)") {
    // ggml-cpu/ops.cpp ggml_compute_forward_flash_attn_ext_tiled fills mask32 with tile_rows x kv_tile values of every
    // Q tile and KV tile, head by head, before can_skip: each of the ubatch's rows reads n_kv mask values per head. The
    // four 128-token prompts of a batched row go as one 512-token ubatch over n_kv 512 (512 cells used, padded to 256)
    device_profile vis = device_preset("cpu");
    REQUIRE(vis.attention_cells == "visible");
    const step_time_model tv{vis, model_preset("llama-3.2-1b"), &parse_weight_file_type("q4_0")};
    llama_bench_row p = point(128, 0, 0, 512);
    p.n_seq = 4;
    p.n_threads = 1;
    const auto pp = bench_row_ubatches(p, tv);
    REQUIRE(pp.size() == 1);
    CHECK(pp[0].n_tokens == 512);
    CHECK(pp[0].scanned_cells == 512.0 * 512 * 32 * 16);
    CHECK(pp[0].tiled_kv_bytes > 0);   // the tiled path: its visible cells priced apart
}

TEST_CASE("calibrate recovers the linear model of hand-made results") {
    const auto pts = hand_points();
    const calibration_result r = calibrate(pts, model_preset("llama-3.2-1b"), nullptr, cpu_n_kv());
    CHECK(r.weights_text() == "q4_0");
    REQUIRE(r.notes.size() == 1);   // the per-ubatch cost: collinear with the per-size GEMM terms (next test)
    CHECK(r.notes[0].find("ubatch_overhead_s") != std::string::npos);
    CHECK(r.profile.weight_read_fraction == doctest::Approx(25.0 / 67.0).epsilon(1e-6));
    REQUIRE(r.profile.gemm_fraction.size() == 2);
    CHECK(r.profile.gemm_fraction[0].first == 64);
    CHECK(r.profile.gemm_fraction[0].second == doctest::Approx(0.3).epsilon(1e-6));
    CHECK(r.profile.gemm_fraction[1].first == 512);
    CHECK(r.profile.gemm_fraction[1].second == doctest::Approx(0.375).epsilon(1e-6));
    CHECK(r.profile.ubatch_overhead_s == 0);
    CHECK(r.profile.attn_s_per_kv_byte == doctest::Approx(3e-11).epsilon(1e-6));
    CHECK(r.profile.attn_s_per_flop == doctest::Approx(2e-12).epsilon(1e-6));
    CHECK(r.profile.attention_linear());
    CHECK(r.profile.source == "calibrated");
    CHECK(r.profile.threads == 2);
    // the fitted profile predicts each hand-made time
    REQUIRE(r.points.size() == std::size(k_hand));
    for (size_t i = 0; i < r.points.size(); ++i) CHECK(r.points[i].predicted_s == doctest::Approx(k_hand[i].seconds).epsilon(1e-6));
    // noise of +-2 % on every result: the fit still predicts each within a few percent
    auto noisy = pts;
    for (size_t i = 0; i < noisy.size(); ++i) noisy[i].avg_s *= i % 2 ? 1.02 : 0.98;
    const calibration_result rn = calibrate(noisy, model_preset("llama-3.2-1b"), nullptr, cpu_n_kv());
    for (size_t i = 0; i < rn.points.size(); ++i) CHECK(rn.points[i].predicted_s == doctest::Approx(k_hand[i].seconds).epsilon(0.05));
}

TEST_CASE("calibrate: terms the results cannot separate are named and fixed") {
    // a per-ubatch cost is collinear with the per-size GEMM terms (and the weight reads): it is
    // fixed at 0, named, and absorbed by them; the results are still predicted exactly: 2 ms more
    // per ubatch is 2e-3 / 0.03052388352 s more per weight byte read, 2e-3 / 1.042328 s more per
    // 64-token GEMM, 2e-3 / 6.646385 s more per 512-token GEMM
    const auto pts = hand_points(2e-3);
    const model_shape m = model_preset("llama-3.2-1b");
    const calibration_result r = calibrate(pts, m, nullptr, cpu_n_kv());
    REQUIRE(r.notes.size() == 1);
    CHECK(r.notes[0].find("ubatch_overhead_s") != std::string::npos);
    CHECK(r.profile.ubatch_overhead_s == 0);
    CHECK(r.profile.weight_read_fraction == doctest::Approx(0.03052388352 / (0.03052388352 + 2e-3) * 25.0 / 67.0).epsilon(1e-6));
    CHECK(r.profile.attn_s_per_kv_byte == doctest::Approx(3e-11).epsilon(1e-6));
    REQUIRE(r.points.size() == std::size(k_hand));
    for (size_t i = 0; i < r.points.size(); ++i) {
        CHECK(r.points[i].predicted_s == doctest::Approx(k_hand[i].seconds + 2e-3 * k_hand[i].ubatches).epsilon(1e-6));
    }
    // two results (a 512-token prompt, 16 generated tokens) for five terms, as a published pp512 + tg128 pair:
    // the weight reads and the 512-token GEMM are fitted, the rest kept from the base profile and named
    const calibration_result two = calibrate({pts[0], pts[2]}, m, nullptr, cpu_n_kv());
    REQUIRE(two.notes.size() == 3);
    CHECK(two.notes[0] == "ubatch_overhead_s: kept from the base profile (0): 2 results cannot also fit it");
    CHECK(two.notes[1] == "attn_s_per_flop: kept from the base profile (0): 2 results cannot also fit it");
    CHECK(two.notes[2] == "attn_s_per_kv_byte: kept from the base profile (0): 2 results cannot also fit it");
    CHECK(two.profile.attention == "roofline");   // the base's attention model, with its terms
    CHECK(two.profile.ubatch_overhead_s == 0);
}

TEST_CASE("read_llama_bench: llama-bench's json layout, jsonl, and bad files") {
    const auto pts = read_llama_bench(k_data);
    REQUIRE(pts.size() == 9);
    CHECK(pts[0].model_type == "llama 1B Q4_0");
    CHECK(pts[0].n_ubatch == 128);
    CHECK(pts[0].avg_s == doctest::Approx(4.24));
    CHECK(pts[2].test_name() == "tg32");
    CHECK(pts[3].test_name() == "pp512 @ d1024");
    scratch_dir dir("bench");
    {
        // -o jsonl: one object per line
        std::ofstream f(dir / "b.jsonl");
        const auto j = nlohmann::json::parse(read_text(k_data));
        for (const auto & e : j) f << e.dump() << '\n';
    }
    CHECK(read_llama_bench(dir / "b.jsonl").size() == 9);
    {
        // a bad field of -o jsonl names its line (1-based, blank lines counted), not its entry (hostile check, session 30)
        std::ofstream f(dir / "c.jsonl");
        auto j = nlohmann::json::parse(read_text(k_data));
        j[2]["n_gen"] = -1;
        f << j[0].dump() << "\n\n" << j[1].dump() << '\n' << j[2].dump() << '\n';
    }
    try {
        read_llama_bench(dir / "c.jsonl");
        FAIL("c.jsonl was accepted");
    } catch (const input_error & e) {
        CHECK(std::string(e.what()).find("c.jsonl:4: field n_gen must be in") != std::string::npos);
    }
    const auto jsonl_error = [&](const std::string & text) {
        std::ofstream(dir / "d.jsonl") << text;
        try {
            read_llama_bench(dir / "d.jsonl");
        } catch (const input_error & e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    {
        // a line that is no object, and a file of one result after blank lines, name their line (hostile check, session 31)
        auto j = nlohmann::json::parse(read_text(k_data));
        CHECK(jsonl_error(j[0].dump() + "\n" + j[1].dump() + "\n42\n").find("d.jsonl:3: ") != std::string::npos);
        CHECK(jsonl_error(j[0].dump() + "\n[" + j[1].dump() + "]\n").find("d.jsonl:2: ") != std::string::npos);
        j[0]["n_gen"] = -5;
        CHECK(jsonl_error("\n\r\n" + j[0].dump() + "\n").find("d.jsonl:3: field n_gen") != std::string::npos);
        CHECK(jsonl_error(j[0].dump(2)).find("entry 0: field n_gen") != std::string::npos);   // pretty-printed: no line
    }
    auto error_of = [&](const std::string & text) {
        std::ofstream(dir / "x.json") << text;
        try {
            read_llama_bench(dir / "x.json");
        } catch (const input_error & e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(error_of("hello").find("not JSON") != std::string::npos);
    CHECK(error_of("[]").find("no llama-bench results") != std::string::npos);
    // one object is the one line of a -o jsonl file with one test: read as a result, refused by its missing fields
    CHECK(error_of("{\"a\": 1}").find("x.json:1: field") != std::string::npos);   // one line: named by it
    CHECK(error_of("3").find("array") != std::string::npos);
    auto j = nlohmann::json::parse(read_text(k_data));
    j[4].erase("n_depth");
    CHECK(error_of(j.dump()).find("entry 4: field n_depth is missing") != std::string::npos);
    j[4]["_line"] = 7;   // not the readers' own: a -o json file's errors still name the entry
    CHECK(error_of(j.dump()).find("entry 4: field n_depth is missing") != std::string::npos);
    j = nlohmann::json::parse(read_text(k_data));
    j[1]["avg_ns"] = "fast";
    CHECK(error_of(j.dump()).find("entry 1: field avg_ns") != std::string::npos);
    // a whole number written as a float is taken; a fraction is not (hostile pass, session 27: 1e15 as a float was
    // refused as "not a whole number")
    j = nlohmann::json::parse(read_text(k_data));
    j[1]["avg_ns"] = 4240000000.0;
    CHECK(error_of(j.dump()).empty());
    j[1]["avg_ns"] = 4240000000.5;
    CHECK(error_of(j.dump()).find("entry 1: field avg_ns") != std::string::npos);
    CHECK(error_of(j.dump()).find("whole number") != std::string::npos);
}

TEST_CASE("kvsim calibrate: the CLI fits, prints residuals and writes the profile; bad input exits 2 and writes nothing") {
    scratch_dir dir("calcli");
    auto r = run_kvsim(std::string("calibrate ") + k_data + " --model llama-3.2-1b -o " + (dir / "p.json"));
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("pp512 @ d4096") != std::string::npos);
    CHECK(r.out.find("|error| median") != std::string::npos);
    // the fit's residuals are labelled as such; its accuracy is the leave-one-out line, also in the profile
    CHECK(r.out.find("(in-sample residuals of the fit: not its accuracy)") != std::string::npos);
    CHECK(r.out.find("held out (leave-one-out, each result predicted by a fit on the others)") != std::string::npos);
    const auto pj = nlohmann::json::parse(read_text(dir / "p.json"));
    CHECK(pj["calibration"]["held_out"]["method"] == "leave-one-out");
    const auto p = load_device_profile(dir / "p.json");
    CHECK(p.source == "calibrated");
    // the written profile drives a replay
    r = run_kvsim("replay traces/requests/azure_sample.csv --model llama-3.2-1b --weights q4_0 --backend none -q --limit 5 --device " +
                  (dir / "p.json"));
    CHECK(r.rc == 0);

    auto refused = [&](const std::string & file, const std::string & extra, const std::string & needle) {
        const std::string out = dir / "never.json";
        const auto res = run_kvsim("calibrate " + file + " --model llama-3.2-1b -o " + out + " " + extra);
        CHECK(res.rc == 2);
        CHECK(res.err.find(needle) != std::string::npos);
        CHECK(lines_of(res.err).size() == 1);
        CHECK_FALSE(fs::exists(out));
    };
    std::ofstream(dir / "notjson.json") << "llama-bench: error";
    refused(dir / "notjson.json", "", "notjson.json: not JSON");
    auto j = nlohmann::json::parse(read_text(k_data));
    j[0].erase("model_n_params");
    std::ofstream(dir / "missing.json") << j.dump();
    refused(dir / "missing.json", "", "field model_n_params is missing");
    j = nlohmann::json::parse(read_text(k_data));
    for (auto & e : j) {   // a Llama-3.1-8B result
        e["model_type"] = "llama 8B Q4_0";
        e["model_n_params"] = 8030261248ull;
        e["model_size"] = 4653375488ull;
    }
    std::ofstream(dir / "other.json") << j.dump();
    refused(dir / "other.json", "", "field model_n_params is not model llama-3.2-1b's");
    refused(k_data, "--weights q8_0", "field model_type says the weights are q4_0, not --weights q8_0");
    j = nlohmann::json::parse(read_text(k_data));
    // one pp512+tg32 result: a GEMM and the weight reads, two terms the base profile does not give
    nlohmann::json mixed = j[0];
    mixed["n_gen"] = 32;
    std::ofstream(dir / "few.json") << nlohmann::json::array({mixed}).dump();
    refused(dir / "few.json", "", "1 llama-bench result(s) for 2 free terms");
    refused(dir / "nosuch.json", "", "nosuch.json: cannot open");
    // one fit is one machine: a result of another device (gpu_info) or another llama.cpp build is refused, naming both
    j = nlohmann::json::parse(read_text(k_data));
    for (auto & e : j) e["gpu_info"] = "NVIDIA GeForce RTX 4090";
    j[5]["gpu_info"] = "NVIDIA GeForce RTX 3090";
    std::ofstream(dir / "two-gpus.json") << j.dump();
    refused(dir / "two-gpus.json", "",
            "two-gpus.json: entry 5: field device (gpu_info / cpu_info) differs from 'NVIDIA GeForce RTX 4090' in " +
                (dir / "two-gpus.json") + " entry 0");
}

TEST_CASE("calibrate: results of two llama.cpp builds (published tables' build lines) are not fitted together") {
    // the A100 PCIe notebook ran build 8c570c94 (2836), the H100 PCIe one e8496488 (2843): their "build:" lines
    const auto a100 = read_llama_bench("tests/data/llama-bench/a100pcie-llama3-8b-q4km.md");
    const auto h100 = read_llama_bench("tests/data/llama-bench/h100pcie-llama3-8b-f16.md");
    CHECK(a100.front().build == "8c570c94");
    CHECK(h100.back().build == "e8496488");
    CHECK(a100.front().device.empty());   // the copied tables keep no "Device 0:" line
    auto both = a100;
    both.insert(both.end(), h100.begin(), h100.end());
    try {
        calibrate(both, model_preset("llama-3-8b"), nullptr, device_preset("h100-datasheet"));
        FAIL("a fit across two builds");
    } catch (const input_error & e) {
        CHECK(std::string(e.what()).find("field build_commit differs from '8c570c94' in tests/data/llama-bench/a100pcie-llama3-8b-q4km.md "
                                         "line 5") != std::string::npos);
    }
    // each card alone still fits; a table's "Device 0:" line names its device
    CHECK_NOTHROW(calibrate(a100, model_preset("llama-3-8b"), nullptr, device_preset("h100-datasheet")));
    scratch_dir dir("devline");
    std::ofstream(dir / "t.md") << "ggml_cuda_init: found 1 CUDA devices:\n  Device 0: NVIDIA A100 80GB PCIe, compute capability 8.0, VMM: yes\n"
                                << read_text("tests/data/llama-bench/a100pcie-llama3-8b-q4km.md");
    CHECK(read_llama_bench(dir / "t.md").front().device == "NVIDIA A100 80GB PCIe");
}

TEST_CASE("a real llama-bench -o json file (noisy times) reads and fits without error") {
    const std::string f = "tests/data/llama-bench/measured-noisy-llama-3.2-1b-q4_0-cpu.json";
    const auto pts = read_llama_bench(f);
    REQUIRE(pts.size() == 9);
    CHECK(pts[0].model_type == "llama 1B Q4_0");
    CHECK(pts[0].flash_attn == -1);   // -fa auto
    const model_shape m = model_preset("llama-3.2-1b");
    for (const auto & p : pts) CHECK_NOTHROW(check_bench_model(p, m, bench_weight_type(p, nullptr)));
    CHECK(pts[0].model_size == model_weight_bytes(m, parse_weight_file_type("q4_0")).file_bytes());
    const calibration_result r = calibrate(pts, m, nullptr, cpu_n_kv());
    CHECK(r.points.size() == 9);
}

TEST_CASE("read_llama_bench: llama-bench's markdown table, as published") {
    const auto pts = read_llama_bench("tests/data/llama-bench/rtx4090-llama3-8b-q4km.md");
    REQUIRE(pts.size() == 8);
    // row 1: "| llama 8B Q4_K - Medium | 4.58 GiB | 8.03 B | CUDA | 99 | pp 512 | 7138.99 ± 14.96 |"
    CHECK(pts[0].model_type == "llama 8B Q4_K - Medium");
    CHECK(pts[0].model_size == 4917737554);        // 4.58 x 2^30 = 4,917,737,553.92, rounded
    CHECK(pts[0].model_n_params == 8030000000);
    CHECK(pts[0].n_prompt == 512);
    CHECK(pts[0].n_gen == 0);
    CHECK(pts[0].n_depth == 0);
    CHECK(pts[0].n_batch == 2048);                 // llama-bench's defaults: the columns are not printed
    CHECK(pts[0].n_ubatch == 512);
    CHECK(pts[0].type_k == "f16");
    CHECK(pts[0].flash_attn == -1);
    CHECK(pts[0].avg_s == doctest::Approx(512.0 / 7138.99).epsilon(1e-9));   // 0.0717188...
    CHECK(pts[0].stddev_s == doctest::Approx(512.0 / 7138.99 * 14.96 / 7138.99).epsilon(1e-6));
    // "tg 8192 | 110.66 ± 0.06": 8192 tokens / 110.66 t/s = 74.0286 s
    CHECK(pts[7].n_gen == 8192);
    CHECK(pts[7].avg_s == doctest::Approx(8192.0 / 110.66).epsilon(1e-9));

    scratch_dir dir("md");
    const auto write = [&](const char * name, const std::string & text) {
        std::ofstream(dir / name) << text;
        return dir / name;
    };
    const std::string head = "| model | size | params | backend | threads | n_ubatch | fa | test | t/s |\n|---|--:|--:|---|--:|--:|--:|--:|--:|\n";
    // the current layout: optional columns, ppN+tgM and @ dD
    const auto v = read_llama_bench(write("new.md", "Some prose first.\n\n" + head +
                                                       "| qwen2 0.5B Q4_0 | 403.20 MiB | 494.03 M | CPU | 2 | 256 | 1 | pp512+tg128 @ d1024 | 100.00 ± 1.00 |\n"
                                                       "\nbuild: de3ff815 (7000)\n"));
    REQUIRE(v.size() == 1);
    CHECK(v[0].model_size == 422785843);           // 403.20 x 2^20 = 422,785,843.2
    CHECK(v[0].model_n_params == 494030000);
    CHECK(v[0].n_threads == 2);
    CHECK(v[0].n_ubatch == 256);
    CHECK(v[0].flash_attn == 1);
    CHECK(v[0].n_prompt == 512);
    CHECK(v[0].n_gen == 128);
    CHECK(v[0].n_depth == 1024);
    CHECK(v[0].avg_s == doctest::Approx(6.4));      // 640 tokens at 100 t/s
    // bad tables: one error naming file, line and value
    const auto error_of = [](const std::string & path) {
        try {
            read_llama_bench(path);
        } catch (const input_error & e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    CHECK(error_of(write("cells.md", head + "| a | b |\n")) == (dir / "cells.md") + ":3: 2 cells where the header has 9 (value '| a | b |')");
    CHECK(error_of(write("test.md", head + "| m | 1 GiB | 1 B | CPU | 2 | 256 | 1 | pq512 | 1 ± 0 |\n")) ==
          (dir / "test.md") + ":3: test is not ppN, tgN or ppN+tgM (with ' @ dD') (value 'pq512')");
    CHECK(error_of(write("rate.md", head + "| m | 1 GiB | 1 B | CPU | 2 | 256 | 1 | pp512 | fast |\n")) ==
          (dir / "rate.md") + ":3: t/s is not 'A ± S' (value 'fast')");
    // a rate whose run time leaves [1, 1e15] ns is named by its cell, not by a wrapped int64 (hostile-input pass, session 26)
    CHECK(error_of(write("slow.md", head + "| m | 1 GiB | 1 B | CPU | 2 | 256 | 1 | pp512 | 0.000000001 ± 0.00 |\n")) ==
          (dir / "slow.md") + ":3: t/s gives 5.12e+20 ns for the run's 512 tokens, outside [1, 1e15] (value '0.000000001 ± 0.00')");
    CHECK(error_of(write("spread.md", head + "| m | 1 GiB | 1 B | CPU | 2 | 256 | 1 | pp512 | 100 ± 1000000000000000 |\n")) ==
          (dir / "spread.md") + ":3: the spread after the t/s gives 5.12e+22 ns, above 1e15 (value '100 ± 1000000000000000')");
    CHECK(error_of(write("nohead.md", "| model | size | t/s |\n|--|--|--|\n| m | 1 GiB | 1 ± 0 |\n")) ==
          (dir / "nohead.md") + ":1: a llama-bench table header needs a 'test' column (value '| model | size | t/s |')");
    // a result's field errors name the table's line, not an entry number (hostile-input pass M5)
    const std::string other = write("other.md", head + "| llama 1B Q4_0 | 1 GiB | 1.24 B | CPU | 2 | 512 | 1 | pp512 | 100 ± 1 |\n");
    REQUIRE(read_llama_bench(other).size() == 1);
    try {
        calibrate(read_llama_bench(other), model_preset("llama-3-8b"), nullptr, cpu_n_kv());
        CHECK(false);
    } catch (const input_error & e) {
        CHECK(std::string(e.what()) == other + ":3: field model_n_params is not model llama-3-8b's (8030261248 parameters): a result "
                                               "of another model (value '1240000000')");
    }
    // a table without t/s is a table (not "not JSON"); a column named twice is refused, not collapsed
    CHECK(error_of(write("nots.md", "| model | test |\n|--|--|\n| m | pp512 |\n")) ==
          (dir / "nots.md") + ":1: a llama-bench table header needs a 't/s' column (value '| model | test |')");
    CHECK(error_of(write("twice.md", "| model | test | test | t/s |\n")) ==
          (dir / "twice.md") + ":1: column 'test' appears twice in the header (value '| model | test | test | t/s |')");
}

TEST_CASE("calibrate: two weight types of one card separate the fixed cost per ubatch (published RTX 4090 results)") {
    auto pts = read_llama_bench("tests/data/llama-bench/rtx4090-llama3-8b-q4km.md");
    const auto f16 = read_llama_bench("tests/data/llama-bench/rtx4090-llama3-8b-f16.md");
    pts.insert(pts.end(), f16.begin(), f16.end());
    const calibration_result r = calibrate(pts, model_preset("llama-3-8b"), nullptr, device_preset("h100-datasheet"));
    CHECK(r.weights_text() == "q4_K_M + f16");
    CHECK(r.profile.ubatch_overhead_s > 0);   // a single weight type cannot separate it (fixed at 0, named in notes)
    // every generation run of both types within 1 % of the published time; the prompt runs within 17 %
    // (ggml's GEMM on Q4_K_M and on F16 differ, which one GEMM term per size cannot express)
    for (const auto & p : r.points) {
        const double limit = p.bench.n_gen > 0 ? 0.01 : 0.17;
        CHECK_MESSAGE(std::abs(p.error()) < limit, p.bench.test_name());
    }
    const calibration_result one = calibrate(read_llama_bench("tests/data/llama-bench/rtx4090-llama3-8b-q4km.md"),
                                             model_preset("llama-3-8b"), nullptr, device_preset("h100-datasheet"));
    CHECK(one.profile.ubatch_overhead_s == 0);
    REQUIRE(!one.notes.empty());
    CHECK(one.notes[0].rfind("ubatch_overhead_s", 0) == 0);
}

TEST_CASE("held_out_fit: results of an exactly linear model are predicted by the fit on the others") {
    // the hand-made results follow the model exactly, so leaving one out still fits it exactly wherever the
    // others determine the same terms; the 512-token prompt in -ub 64 ubatches (k_hand[1]) is the only result
    // with 64-token GEMMs: without it that size's fraction comes from the others (gemm_fraction_at), and it misses
    const auto loo = held_out_fit(hand_points(), model_preset("llama-3.2-1b"), nullptr, cpu_n_kv());
    CHECK(loo.method == "leave-one-out");
    REQUIRE(loo.errs.size() == std::size(k_hand));
    for (size_t i = 0; i < loo.errs.size(); ++i) {
        if (i == 1) CHECK(std::abs(loo.errs[i]) > 0.1);
        else CHECK(std::abs(loo.errs[i]) < 1e-9);
    }
}

// Past k_max_leave_one_out results, 10 folds (leave-one-out costs results^2 fits' work: 23,696 results ran over
// 4 minutes). Every hand result is repeated often enough that each fold's others hold all its shapes: exact again.
TEST_CASE("held_out_fit: more than k_max_leave_one_out results are held out in 10 folds") {
    std::vector<llama_bench_row> many;
    while (many.size() <= k_max_leave_one_out) {
        for (const auto & p : hand_points()) many.push_back(p);
    }
    const auto h = held_out_fit(many, model_preset("llama-3.2-1b"), nullptr, cpu_n_kv());
    CHECK(h.method == "10-fold");
    REQUIRE(h.errs.size() == many.size());
    for (double e : h.errs) CHECK(std::abs(e) < 1e-9);
    CHECK(held_out_line(h, many.size()).rfind("held out (10-fold, each result predicted by a fit on the other folds)", 0) == 0);
}

TEST_CASE("the shipped calibrated GPU profiles predict their cards' published llama-bench results") {
    // the expected times are the published measurements (tests/data/llama-bench, copied from the notebooks); the
    // profiles were fitted on these same results per card, so this holds the shipped numbers to their fit: every run
    // within 3 % (before float weights had their own GEMM speed-up, F16 and Q4_K_M prompts missed by up to 17 %).
    // The A100 SXM4 and L40S F16 prompt rows are outliers their fits leave out (docs/data/published-llama-bench-gpu.md).
    const struct {
        const char * data, * name;
        bool f16_prompts;
    } cards[] = {{"rtx4090", "rtx-4090", true},      {"rtx3090", "rtx-3090", true},      {"h100pcie", "h100-pcie", true},
                 {"a100pcie", "a100-pcie-80gb", true}, {"a100sxm", "a100-sxm-80gb", false}, {"l40s", "l40s", false}};
    for (const auto & c : cards) {
        auto pts = read_llama_bench(std::string("tests/data/llama-bench/") + c.data + "-llama3-8b-q4km.md");
        for (const auto & p : read_llama_bench(std::string("tests/data/llama-bench/") + c.data + "-llama3-8b-f16.md")) {
            if (c.f16_prompts || p.n_gen > 0) pts.push_back(p);
        }
        REQUIRE(pts.size() == (c.f16_prompts ? 16 : 12));
        const calibration_result r = predict_bench(pts, model_preset("llama-3-8b"), nullptr, device_preset(c.name));
        for (const auto & p : r.points) {
            CAPTURE(c.name);
            CHECK_MESSAGE(std::abs(p.error()) < 0.03, p.bench.test_name());
        }
        // the published F16 prompts run faster per FLOP than the Q4_K_M ones on every card (cuBLAS against mmq)
        if (c.f16_prompts) CHECK(device_preset(c.name).float_gemm_speedup > 1.05);
    }
}

TEST_CASE("the repacked CPU matmul: a fit with its one-row passes follows llama.cpp's measured 1-, 2- and 4-token prompts") {
    // llama.cpp de3ff815 on one Zen 5 core, Q4_0 (tests/data/llama-bench/README.md): pp1 16.3 ms, pp2 25.7 ms, pp4 23.9 ms.
    // ggml-cpu/repack.cpp multiplies tokens 4 at a time (gemm) and each of the rest alone (gemv), so 2 tokens read the
    // weights twice and cost more than 4
    const auto pts = read_llama_bench("tests/data/llama-bench/measured-min5-qwen2.5-0.5b-q4_0-zen5.json");
    REQUIRE(pts.size() == 29);
    const auto small_prompts = [&](const calibration_result & r) {
        std::vector<double> errs;
        for (const auto & p : r.points) {
            if (p.bench.n_depth == 0 && p.bench.n_gen == 0 && p.bench.n_prompt <= 4) errs.push_back(p.error());
        }
        return errs;
    };
    CHECK(repack_extra_passes(1, 4) == 0);
    CHECK(repack_extra_passes(2, 4) == 1);
    CHECK(repack_extra_passes(4, 4) == 0);
    CHECK(repack_extra_passes(7, 4) == 3);
    CHECK(repack_extra_passes(7, 0) == 0);
    const calibration_result with = calibrate(pts, model_preset("qwen2.5-0.5b"), nullptr, cpu_n_kv());
    CHECK(with.profile.repack_rows == 4);
    CHECK(with.profile.extra_pass_s_per_byte > 0);
    const auto e = small_prompts(with);
    REQUIRE(e.size() == 8);   // pp1, pp2, pp4 at -ub 128 and 512; pp2 and pp4 of the depth run at depth 0
    for (double x : e) CHECK(std::abs(x) < 0.10);
    // the passes price the 1- and 2-token prompts: no GEMM price below 4 tokens (the gemm's rows)
    REQUIRE(!with.profile.gemm_fraction.empty());
    CHECK(with.profile.gemm_fraction.front().first == 4);
    // without them (one pass whatever the tokens) the fit needs a GEMM price at 2 tokens below the 4-token one: 2 tokens
    // slower per FLOP than 4, what the passes explain. (Before the output's one-row pass left the GEMM, such a fit put
    // pp2 on its memory-bound side, at pp1's cost: 23 % short.)
    device_profile flat = cpu_n_kv();
    flat.repack_rows = 0;
    const calibration_result without = calibrate(pts, model_preset("qwen2.5-0.5b"), nullptr, flat);
    REQUIRE(without.profile.gemm_fraction.size() >= 3);
    CHECK(without.profile.gemm_fraction[1].first == 2);
    CHECK(without.profile.gemm_fraction[2].first == 4);
    CHECK(without.profile.gemm_fraction[1].second < 0.5 * without.profile.gemm_fraction[2].second);
}

// Real results (tests/data/llama-bench/README.md: llama-3.2-1b Q8_0, llama.cpp -t 2, Zen 4): ggml-cpu does not repack
// Q8_0 on x86 and multiplies 2+ rows with tinyBLAS, so pp2 (58.9-59.5 ms) costs 1.65x pp1 (35.0-35.9 ms). A fit that
// started from the base's prices kept 2-token ubatches on the read side with the 1-token ones: pp2 25-31 % short, pp1
// 13-16 % long, and the held-out replay's 2-3 token decode steps 14-18 % short. The second start (2-token ubatches on
// the GEMM side) fits them.
TEST_CASE("calibrate: Q8_0 on x86 prices 2-token ubatches as GEMMs, from a second start of the split") {
    const auto pts = read_llama_bench("tests/data/llama-bench/measured-min5-llama-3.2-1b-q8_0-zen4-t2.json");
    REQUIRE(pts.size() == 48);
    const calibration_result r = calibrate(pts, model_preset("llama-3.2-1b"), nullptr, device_preset("cpu"));
    bool noted = false;
    for (const auto & n : r.notes) noted |= n.find("starts 2-token ubatches on the GEMM side fits better") != std::string::npos;
    CHECK(noted);
    REQUIRE(!r.profile.gemm_fraction.empty());
    CHECK(r.profile.gemm_fraction.front().first == 2);
    size_t small = 0;
    for (const auto & p : r.points) {
        if (p.bench.n_depth != 0 || p.bench.n_gen != 0 || p.bench.n_prompt > 2 || p.bench.n_seq != 1) continue;
        ++small;
        CHECK_MESSAGE(std::abs(p.error()) < 0.05, p.bench.test_name(), " ", p.error());
    }
    CHECK(small == 5);   // pp1 and pp2 at -ub 128 and 512, pp2 of the depth run at depth 0
}

// Real results with decode steps after K-shifts (tests/data/llama-bench/README.md): the fit's price per rotation angle
// against the same K-shift measured apart, as the difference between decodes with and without a preceding shift
// (6.35 ns for this model at -t 2 on that host, docs/benchmarks.md session 33), not computed by calibrate
TEST_CASE("calibrate: the K-shift price from steps after K-shifts, near the shift measured apart") {
    auto pts = read_llama_bench("tests/data/llama-bench/measured-min5-qwen2.5-0.5b-q4_0-zen4-t2-kshift.json");
    REQUIRE(pts.size() == 50);
    const calibration_result r = calibrate(pts, model_preset("qwen2.5-0.5b"), nullptr, device_preset("cpu"));
    CHECK(r.profile.k_shift_s_per_theta == doctest::Approx(6.35e-9).epsilon(0.1));
    size_t shifted = 0;
    for (const auto & p : r.points) {
        if (!p.bench.k_shift) continue;
        ++shifted;
        CHECK_MESSAGE(std::abs(p.error()) < 0.05, p.bench.test_name(), " ", p.error());
    }
    CHECK(shifted == 2);
    // without those rows nothing prices the shift: the base's price stays
    pts.erase(std::remove_if(pts.begin(), pts.end(), [](const llama_bench_row & p) { return p.k_shift; }), pts.end());
    const calibration_result kept = calibrate(pts, model_preset("qwen2.5-0.5b"), nullptr, device_preset("cpu"));
    CHECK(kept.profile.k_shift_s_per_theta == device_preset("cpu").k_shift_s_per_theta);
    bool noted = false;   // said, not printed as if fitted (hostile check, session 33)
    for (const auto & n : kept.notes) noted |= n.find("k_shift_s_per_theta: kept from the base profile") != std::string::npos;
    CHECK(noted);
}

// Real llama-bench results of llama.cpp -t 2 (tests/data/llama-bench/README.md): the per-ubatch cost and the weight
// reads, both a constant per memory-bound ubatch, traded until the weight reads came out below 0 (35.8 ms per ubatch),
// and calibrate refused the results as "not one model on one machine". The per-ubatch cost is given up instead.
TEST_CASE("calibrate: a per-ubatch cost fitted against the weight reads is given up, not a refusal of the results") {
    const auto pts = read_llama_bench("tests/data/llama-bench/measured-min3-qwen2.5-0.5b-q4_0-xeon-t2.json");
    REQUIRE(pts.size() == 46);
    const device_profile base = device_preset("cpu");
    const calibration_result r = calibrate(pts, model_preset("qwen2.5-0.5b"), nullptr, base);
    CHECK(r.profile.weight_read_fraction > 0);
    CHECK(r.profile.ubatch_overhead_s == 0);
    bool noted = false;
    for (const auto & n : r.notes) noted |= n.rfind("ubatch_overhead_s: fitted against the weight reads, which came out below 0", 0) == 0;
    CHECK(noted);
    for (const auto & p : r.points) CHECK(std::abs(p.error()) < 0.25);
}

// llama-bench of llama.cpp de3ff815 on an H200 (tests/data/llama-bench/h200-*, measured 2026-12-04): one model's fit
// reads weights faster than the card's datasheet, which it must say; a published card's fit (0.97 of its datasheet,
// RTX 4090) must not.
TEST_CASE("calibrate: weight reads above the base's bandwidth are noted") {
    const auto noted = [](const calibration_result & r) {
        for (const auto & n : r.notes) {
            if (n.rfind("weight_read_fraction ", 0) == 0 && n.find("which no device does") != std::string::npos) return true;
        }
        return false;
    };
    auto h200 = read_llama_bench("tests/data/llama-bench/h200-llama3.1-8b-q4km.json");
    const auto f16 = read_llama_bench("tests/data/llama-bench/h200-llama3.1-8b-f16.json");
    h200.insert(h200.end(), f16.begin(), f16.end());
    REQUIRE(h200.size() == 40);
    const calibration_result r = calibrate(h200, model_preset("llama-3.1-8b"), nullptr, device_preset("h200-datasheet"));
    CHECK(r.profile.weight_read_fraction > 1.0);
    CHECK(noted(r));
    auto rtx = read_llama_bench("tests/data/llama-bench/rtx4090-llama3-8b-q4km.md");
    const auto rtx16 = read_llama_bench("tests/data/llama-bench/rtx4090-llama3-8b-f16.md");
    rtx.insert(rtx.end(), rtx16.begin(), rtx16.end());
    device_profile rtx_sheet = device_preset("h100-datasheet");
    rtx_sheet.bandwidth_gbs = 1008;   // the RTX 4090's datasheet: the fit reads 0.97 of it
    const calibration_result q = calibrate(rtx, model_preset("llama-3-8b"), nullptr, rtx_sheet);
    CHECK(q.profile.weight_read_fraction < 1.0);
    CHECK_FALSE(noted(q));
}

// Leave-one-out of a single result fits on none: no held-out figure (it crashed in Eigen's solver once the results'
// ubatches were reused), and the fit of the one result itself still runs.
TEST_CASE("calibrate: one result gets its fit and no leave-one-out figure") {
    const auto pts = hand_points();
    REQUIRE(!pts.empty());
    const std::vector<llama_bench_row> one{pts[0]};
    CHECK(held_out_fit(one, model_preset("llama-3.2-1b"), nullptr, cpu_n_kv()).errs.empty());
}

TEST_CASE("calibrate: results that cannot fit a profile are refused naming them, not a crash") {
    // one pp512 at depth 65536 taking 64 ms on the h200 profile: the attention of 65,536 cells leaves the GEMM at 512
    // tokens below 0, the only free term; the fit had a QR of no column left (SIGSEGV) before the refusal
    llama_bench_row p = point(512, 0, 65536, 512);
    p.model_type = "llama 8B Q4_K - Medium";
    p.model_size = 4920734976;
    p.model_n_params = 8030261248;
    p.n_threads = 4;
    p.avg_s = 0.064;
    try {
        (void) calibrate({p}, model_preset("llama-3-8b"), nullptr, device_preset("h200"));
        FAIL("a fit with no free term");
    } catch (const usage_error & e) {
        CHECK(std::string(e.what()).find("no term of the fit is left") != std::string::npos);
    }
    // one decode step over 1,048,000 cells in 10 ms: the weight reads come out below 0 with no pair of results to blame;
    // the refusal names the result
    llama_bench_row d = p;
    d.n_prompt = 0, d.n_gen = 1, d.n_depth = 1048000, d.avg_s = 0.010;
    d.file = "deep.md", d.line = 3;
    try {
        (void) calibrate({d}, model_preset("llama-3-8b"), nullptr, device_preset("h200"));
        FAIL("weight reads below 0");
    } catch (const usage_error & e) {
        CHECK(std::string(e.what()).find("1 result(s), the first deep.md line 3 (tg1 @ d1048000)") != std::string::npos);
    }
}

TEST_CASE("calibrate: a result 1000x off what the fit of all of them gives is refused, naming it") {
    auto pts = read_llama_bench("tests/data/llama-bench/h200-llama3.1-8b-f16.json");
    REQUIRE(pts.size() > 10);
    pts[10].avg_s = 1e6;   // 1e15 ns: accepted by the reader, no llama-bench run of a few tokens
    try {
        (void) calibrate(pts, model_preset("llama-3.1-8b"), nullptr, device_preset("h200"));
        FAIL("an absurd result fitted");
    } catch (const usage_error & e) {
        CHECK(std::string(e.what()).find("h200-llama3.1-8b-f16.json entry 10 (" + pts[10].test_name() + ")") != std::string::npos);
        CHECK(std::string(e.what()).find("not one model on one machine") != std::string::npos);
    }
}

// Prompts alone on a CUDA card (n_sm): every K/V byte is read by the MMA kernel, none by the vector kernel, so the two
// cannot be told apart: one price for both, fitted (a roofline base has none to keep: decode K/V came out free)
TEST_CASE("calibrate: prompts alone on a CUDA card price the K/V of both flash-attention kernels as one") {
    std::vector<llama_bench_row> pts;
    for (const auto & p : read_llama_bench("tests/data/llama-bench/h200-llama3.1-8b-f16.json"))
        if (p.n_gen == 0 && p.n_prompt >= 2) pts.push_back(p);   // prompts of 2-8192 tokens, at depth 0 and deeper
    REQUIRE(pts.size() >= 12);
    device_profile base = device_preset("h200-datasheet");
    base.n_sm = 132;
    const calibration_result r = calibrate(pts, model_preset("llama-3.1-8b"), nullptr, base);
    CHECK(r.profile.attn_tiled_s_per_kv_byte == 0);
    CHECK(r.profile.attn_s_per_kv_byte > 0);
    CHECK(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string & n) {
        return n.rfind("attn_tiled_s_per_kv_byte: no result reads K/V on the one-row kernel", 0) == 0;
    }));
    // a decode step over 16384 cells costs more than one over 512
    const step_time_model tm{r.profile, model_preset("llama-3.1-8b"), &parse_weight_file_type("f16")};
    CHECK(tm.ubatch_seconds({{1, 16384, 1, 32, 4096, 1}}) > tm.ubatch_seconds({{1, 512, 1, 32, 4096, 1}}));
}

// Results at depth 0 see too few cells to price attention (the H200's depth-0 fits put both attention terms below 0):
// left at 0, a decode step over 16384 cells would cost what one over 512 does. llama.cpp's own tg128 on the H200 (F16
// weights and K/V, tests/data/llama-bench/README.md), e.g. the 8B: 4.86 ms per token at depth 0, 5.73 at depth 16384.
TEST_CASE("calibrate: attention no result can price is read at the fit's own rates, not free") {
    std::vector<llama_bench_row> fit, deep;
    for (const char * f : {"llama3.1-8b", "llama3.2-1b", "qwen2.5-0.5b"}) {
        for (const auto & p : read_llama_bench(fmt::format("tests/data/llama-bench/h200-{}-f16.json", f))) {
            if (p.n_depth == 0) fit.push_back(p);
            else if (p.n_gen > 0 && p.n_depth == 16384) deep.push_back(p);
        }
    }
    REQUIRE(deep.size() == 3);
    device_profile base = device_preset("h200-datasheet");
    base.n_sm = 132;
    const std::vector<model_shape> models = {model_preset("llama-3.1-8b"), model_preset("llama-3.2-1b"), model_preset("qwen2.5-0.5b")};
    const calibration_result r = calibrate(fit, models, nullptr, base);
    CHECK(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string & n) {
        return n.rfind("attn_s_per_kv_byte: instead of 0, K/V read at the profile's f16 weight-read rate", 0) == 0;
    }));
    // held out: the fit on depth 0 predicts llama.cpp's decode at depth 16384 of each model within 10 % (with attention
    // free the 8B's came out 11.5 % short)
    const calibration_result held = predict_bench(deep, models, nullptr, r.profile);
    REQUIRE(held.points.size() == 3);
    for (const auto & p : held.points) CHECK(std::abs(p.error()) < 0.10);
    // with results at depth in the fit, attention is fitted: no such note
    std::vector<llama_bench_row> all = fit;
    all.insert(all.end(), deep.begin(), deep.end());
    const calibration_result whole = calibrate(all, models, nullptr, base);
    CHECK(std::none_of(whole.notes.begin(), whole.notes.end(), [](const std::string & n) {
        return n.find("instead of 0") != std::string::npos;
    }));
}

// Several models of one card: llama.cpp's own decode steps on the H200 (tests/data/llama-bench/README.md, 2026-12-04)
// read the 8B's Q4_K_M weights (4.9 GB) in 3.81 ms and its F16 weights (16.1 GB) in 4.83 ms, and the 1B (16 layers,
// 2.5 GB of F16) in 1.35 ms, more than its bytes at the 8B's F16 rate (0.8 ms): a read rate per weight type and a cost
// per layer, which only results of models of several layer counts can tell apart from the cost per ubatch.
TEST_CASE("calibrate: results of several models fit one profile, with a read rate per weight type and a cost per layer") {
    std::vector<llama_bench_row> pts;
    for (const char * f : {"h200-llama3.1-8b-f16", "h200-llama3.1-8b-q4km", "h200-llama3.2-1b-f16", "h200-llama3.2-1b-q4km"}) {
        const auto v = read_llama_bench(std::string("tests/data/llama-bench/") + f + ".json");
        pts.insert(pts.end(), v.begin(), v.end());
    }
    const std::vector<model_shape> models{model_preset("qwen2.5-0.5b"), model_preset("llama-3.1-8b"), model_preset("llama-3.2-1b")};
    const calibration_result r = calibrate(pts, models, nullptr, device_preset("h200-datasheet"));
    CHECK(r.models_text() == "llama-3.1-8b + llama-3.2-1b");   // each result's model found by its parameters and size
    const auto & by = r.profile.weight_read_fraction_by_type;
    REQUIRE(by.count("f16"));
    REQUIRE(by.count("q4_K_M"));
    CHECK(by.at("q4_K_M") < by.at("f16"));   // the K-quant matrix-vector kernel reads slower per byte
    CHECK(by.at("f16") <= 1.0);              // no faster than the datasheet (the one-model fit reached 1.08)
    CHECK(r.profile.layer_overhead_s > 0);
    // and more per layer for a GEMM: the 1B's F16 pp512 took 7.6 ms, 2.6x its FLOPs at the rate of the 8B's (20.8 ms)
    CHECK(r.profile.gemm_layer_overhead_s > 0);
    CHECK(r.profile.read_fraction("q4_K_M") == by.at("q4_K_M"));
    CHECK(r.profile.read_fraction("q8_0") == r.profile.weight_read_fraction);   // not fitted: the median of the fitted
    // the same results of one model: one rate, no per-layer cost (it cannot be told from the per-ubatch one)
    std::vector<llama_bench_row> one(pts.begin(), pts.begin() + 40);
    const calibration_result o = calibrate(one, models, nullptr, device_preset("h200-datasheet"));
    CHECK(o.models_text() == "llama-3.1-8b");
    CHECK(o.profile.weight_read_fraction_by_type.empty());
    CHECK(o.profile.layer_overhead_s == 0);
    CHECK(o.profile.gemm_layer_overhead_s == 0);
    // a one-model fit on a base that has rates per type keeps their ratios, scaled to the one rate it fits
    const calibration_result s = calibrate(one, models, nullptr, r.profile);
    REQUIRE(s.profile.weight_read_fraction_by_type.size() == by.size());
    CHECK(s.profile.read_fraction("q4_K_M") / s.profile.read_fraction("f16") == doctest::Approx(by.at("q4_K_M") / by.at("f16")));
    CHECK(s.profile.layer_overhead_s == r.profile.layer_overhead_s);   // kept from the base
    CHECK(s.profile.gemm_layer_overhead_s == r.profile.gemm_layer_overhead_s);
}

TEST_CASE("kvsim calibrate --model: a list of candidates, each result matched to its own; none matching exits 2") {
    scratch_dir dir("calmodels");
    const std::string f8 = "tests/data/llama-bench/h200-llama3.1-8b-q4km.json", f1 = "tests/data/llama-bench/h200-llama3.2-1b-q4_0.json";
    auto r = run_kvsim("calibrate " + f8 + " " + f1 + " --model llama-3.2-1b,llama-3.1-8b --device h200-datasheet -o " + (dir / "p.json"));
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("results of llama-3.1-8b + llama-3.2-1b (q4_K_M + q4_0 weights)") != std::string::npos);
    CHECK(nlohmann::json::parse(read_text(dir / "p.json"))["calibration"]["model"] == "llama-3.1-8b + llama-3.2-1b");
    CHECK(load_device_profile(dir / "p.json").calibrated_models == std::vector<std::string>{"llama-3.1-8b", "llama-3.2-1b"});
    // --model given twice adds to the list, a space after a comma is no part of a name; without --model every preset is
    // a candidate (llama-3-8b is the 8B's shape)
    r = run_kvsim("calibrate " + f8 + " " + f1 + " --model llama-3.2-1b --model llama-3.1-8b --device h200 --predict");
    CHECK(r.rc == 0);
    r = run_kvsim("calibrate " + f8 + " " + f1 + " '--model=llama-3.2-1b, llama-3.1-8b' --device h200 --predict");
    CHECK(r.rc == 0);
    r = run_kvsim("calibrate " + f8 + " --device h200 --predict");
    CHECK(r.rc == 0);
    CHECK(r.out.find("results of llama-3-8b (q4_K_M weights)") != std::string::npos);
    r = run_kvsim("calibrate " + f8 + " --model llama-3.2-1b,qwen2.5-0.5b --device h200-datasheet -o " + (dir / "q.json"));
    CHECK(r.rc == 2);
    CHECK(r.err.find(f8 + ": entry 0: field model_n_params") != std::string::npos);
    CHECK(r.err.find("matches none of the models llama-3.2-1b, qwen2.5-0.5b in q4_K_M") != std::string::npos);
    CHECK(lines_of(r.err).size() == 1);
    CHECK_FALSE(fs::exists(dir / "q.json"));
    r = run_kvsim("calibrate " + f8 + " --model llama-3.2-1b,nosuch --device h200 --predict");
    CHECK(r.rc == 2);
    CHECK(r.err.find("nosuch") != std::string::npos);
}
