// The time model's pieces: bytes per weight (ggml block sizes, llama-quant's mixtures), the
// presets' parameter counts, the step-time formula by hand, device profiles (shipped, files, bad
// files), steps.csv joined with the emitted op trace, and one scenario's steps.csv by hand.
#include "cli_test_util.h"
#include "kv/context.h"
#include "model/model.h"
#include "time/device_profile.h"
#include "time/step_time.h"
#include "time/weight_types.h"
#include "trace/op_trace.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include <fstream>
#include <set>

using namespace kvsim;
using namespace kvsim_test;

TEST_CASE("bytes per block of the weight types: ggml.c type_traits / ggml-common.h block structs") {
    // {blck_size, type_size}: block_q4_0 = half + 16 B; q8_0 = half + 32 B; q4_K = 2 halfs + 12 + 128;
    // q5_K = 2 halfs + 12 + 128 + 32; q6_K = half + 16 + 192; q2_K = 2 halfs + 16 + 64; q3_K = half + 64 + 32 + 12
    const std::tuple<const char *, int64_t, size_t> want[] = {
        {"f32", 1, 4},      {"f16", 1, 2},      {"bf16", 1, 2},     {"q8_0", 32, 34},   {"q4_0", 32, 18},  {"q4_1", 32, 20},
        {"q5_0", 32, 22},   {"q5_1", 32, 24},   {"q2_K", 256, 84},  {"q3_K", 256, 110}, {"q4_K", 256, 144}, {"q5_K", 256, 176},
        {"q6_K", 256, 210},
    };
    for (const auto & w : want) {
        const auto & [name, blck, size] = w;
        CAPTURE(std::get<0>(w));  // not `name`: clang 14 cannot capture a structured binding in CAPTURE's lambda
        CHECK(weight_tensor_type_by_name(name).blck_size == blck);
        CHECK(weight_tensor_type_by_name(name).type_size == size);
    }
    CHECK_THROWS_AS(weight_tensor_type_by_name("q7_0"), std::invalid_argument);
}

TEST_CASE("file types: names, llama_ftype_name, default tensor type") {
    CHECK(std::string(parse_weight_file_type("Q4_K_M").name) == "q4_K_M");
    CHECK(std::string(parse_weight_file_type("q4_k_m").ftype_name) == "Q4_K - Medium");
    CHECK(std::string(parse_weight_file_type("q5_K_M").default_type) == "q5_K");
    CHECK(std::string(parse_weight_file_type("f32").ftype_name) == "all F32");
    CHECK(weight_file_type_by_ftype_name("Q8_0") == &parse_weight_file_type("q8_0"));
    CHECK(weight_file_type_by_ftype_name("Q9") == nullptr);
    CHECK_THROWS_AS(parse_weight_file_type("q3_K_M"), std::invalid_argument);
}

TEST_CASE("per-tensor types of the mixtures: llama-quant.cpp llama_tensor_get_type_impl + tensor_type_fallback") {
    const auto & q4km = parse_weight_file_type("q4_K_M");
    // use_more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2 -> layers 0 1 4 7 10 13 14 15 at q6_K
    const std::set<int> more = {0, 1, 4, 7, 10, 13, 14, 15};
    for (int il = 0; il < 16; ++il) {
        CAPTURE(il);
        const std::string want = more.count(il) ? "q6_K" : "q4_K";
        CHECK(quantized_tensor_type(q4km, "attn_v", il, 16, 2048, true).name == want);
        CHECK(quantized_tensor_type(q4km, "ffn_down", il, 16, 8192, true).name == want);
        CHECK(std::string(quantized_tensor_type(q4km, "attn_q", il, 16, 2048, true).name) == "q4_K");
        CHECK(std::string(quantized_tensor_type(q4km, "ffn_up", il, 16, 2048, true).name) == "q4_K");
    }
    // output / tied token_embd: q6_K unless the file is q8_0
    CHECK(std::string(quantized_tensor_type(q4km, "output", 0, 16, 2048, false).name) == "q6_K");
    CHECK(std::string(quantized_tensor_type(q4km, "token_embd", 0, 16, 2048, true).name) == "q6_K");
    CHECK(std::string(quantized_tensor_type(q4km, "token_embd", 0, 16, 2048, false).name) == "q4_K");
    CHECK(std::string(quantized_tensor_type(parse_weight_file_type("q4_0"), "output", 0, 16, 2048, false).name) == "q6_K");
    CHECK(std::string(quantized_tensor_type(parse_weight_file_type("q8_0"), "output", 0, 16, 2048, false).name) == "q8_0");
    // Q4_K_S: the first 4 attn_v and the first n/8 ffn_down at q5_K
    const auto & q4ks = parse_weight_file_type("q4_K_S");
    CHECK(std::string(quantized_tensor_type(q4ks, "attn_v", 3, 16, 2048, true).name) == "q5_K");
    CHECK(std::string(quantized_tensor_type(q4ks, "attn_v", 4, 16, 2048, true).name) == "q4_K");
    CHECK(std::string(quantized_tensor_type(q4ks, "ffn_down", 1, 16, 8192, true).name) == "q5_K");
    CHECK(std::string(quantized_tensor_type(q4ks, "ffn_down", 2, 16, 8192, true).name) == "q4_K");
    // Qwen2.5-0.5B's 896-wide rows (3.5 blocks of 256): q4_K -> q5_0, q6_K -> q8_0; output: nx % qk_k -> q8_0
    CHECK(std::string(quantized_tensor_type(q4km, "attn_q", 5, 24, 896, true).name) == "q5_0");
    CHECK(std::string(quantized_tensor_type(q4km, "attn_v", 0, 24, 896, true).name) == "q8_0");
    CHECK(std::string(quantized_tensor_type(q4km, "ffn_down", 6, 24, 4864, true).name) == "q4_K");   // 4864 = 19 x 256
    CHECK(std::string(quantized_tensor_type(q4km, "ffn_down", 5, 24, 4864, true).name) == "q6_K");   // (5 - 3) % 3 == 2
    CHECK(std::string(quantized_tensor_type(q4km, "output", 0, 24, 896, false).name) == "q8_0");
    CHECK(std::string(quantized_tensor_type(parse_weight_file_type("q5_K_M"), "attn_k", 0, 24, 896, true).name) == "q5_1");
    // float file types are not adjusted
    CHECK(std::string(quantized_tensor_type(parse_weight_file_type("f16"), "output", 0, 16, 2048, false).name) == "f16");
}

TEST_CASE("preset parameter counts and weight bytes") {
    // Hugging Face's parameter counts of the checkpoints (config.json shapes)
    CHECK(model_param_count(model_preset("llama-3.2-1b")) == 1235814400.0);
    CHECK(model_param_count(model_preset("qwen2.5-0.5b")) == 494032768.0);
    CHECK(model_param_count(model_preset("llama-3.1-8b")) == 8030261248.0);
    const model_shape m = model_preset("llama-3.2-1b");
    CHECK(m.n_params == 1235814400.0);
    const param_groups g = model_param_groups(m);
    CHECK(g.attn == 16.0 * (2048.0 * 2048 * 2 + 2048.0 * 512 * 2));
    CHECK(g.ffn == 16.0 * 3 * 2048 * 8192);
    CHECK(g.token_embd == 2048.0 * 128256);
    CHECK(g.output == 0);   // tied
    CHECK(model_param_groups(model_preset("llama-3.1-8b")).output == 4096.0 * 128256);
    CHECK(model_param_groups(model_preset("tiny-llama")).total() == 0);   // a custom shape: n_params only
    CHECK(m.tied_embd);
    CHECK(m.n_ctx_train == 131072);
    CHECK(m.add_bos);
    const model_shape q = model_preset("qwen2.5-0.5b");
    CHECK_FALSE(q.add_bos);
    CHECK(q.n_ctx_train == 32768);
    CHECK(q.n_layer == 24);
    CHECK(q.n_head_kv == 2);

    // Llama-3.2-1B: 16 layers x 60817408 matrix parameters, token_embd 2048 x 128256 (tied), norms 16 x 2 x 2048 + 2048 f32
    const double layers = 16.0 * 60817408, embd = 2048.0 * 128256, norms = 16.0 * 2 * 2048 + 2048;
    const weight_bytes f16 = model_weight_bytes(m, parse_weight_file_type("f16"));
    CHECK(f16.n_params == 1235814400.0);
    CHECK(f16.dense_params == layers);
    CHECK(f16.output_params == embd);
    CHECK(f16.file_bytes() == 2 * (layers + embd) + 4 * norms);
    CHECK(f16.read_per_ubatch() == f16.file_bytes());   // tied: the output matmul reads token_embd whole
    const weight_bytes q8 = model_weight_bytes(m, parse_weight_file_type("q8_0"));
    CHECK(q8.file_bytes() == (layers + embd) / 32 * 34 + 4 * norms);
    // q4_0: layers 18 B / 32, output (tied token_embd) q6_K 210 B / 256
    const weight_bytes q4 = model_weight_bytes(m, parse_weight_file_type("q4_0"));
    CHECK(q4.file_bytes() == layers / 32 * 18 + embd / 256 * 210 + 4 * norms);
    CHECK(q4.file_bytes() == 763097088.0);
    // llama-quantize (llama.cpp de3ff815) on a random-weight F16 GGUF of this shape printed
    // "model size = 2357.26 MiB", "quant size = 727.75 MiB" (Q4_0) and "762.81 MiB" (Q4_K_M, with
    // attn_v / ffn_down at q6_K in layers 0 1 4 7 10 13 14 15 and token_embd at q6_K)
    CHECK(f16.file_bytes() / 1048576 == doctest::Approx(2357.26).epsilon(0.000005));
    CHECK(q4.file_bytes() / 1048576 == doctest::Approx(727.75).epsilon(0.000007));
    const weight_bytes q4km = model_weight_bytes(m, parse_weight_file_type("q4_K_M"));
    CHECK(q4km.file_bytes() == 799862784.0);
    CHECK(q4km.file_bytes() / 1048576 == doctest::Approx(762.81).epsilon(0.000007));
    // untied (Llama-3.1-8B): token_embd is a row lookup, not read per ubatch
    const weight_bytes l8 = model_weight_bytes(model_preset("llama-3.1-8b"), parse_weight_file_type("f16"));
    CHECK(l8.token_embd == 2.0 * 4096 * 128256);
    CHECK(l8.read_per_ubatch() == l8.file_bytes() - l8.token_embd);
    // a custom shape (no dimensions): n_params of the default type
    const weight_bytes tiny = model_weight_bytes(model_preset("tiny-llama"), parse_weight_file_type("q8_0"));
    CHECK(tiny.read_per_ubatch() == 0.5e6 / 32 * 34);
}

TEST_CASE("step time by hand: fractions, overheads, linear attention") {
    device_profile d;
    d.name = "t";
    d.bandwidth_gbs = 10;
    d.peak_tflops = 0.1;
    d.weight_read_fraction = 0.5;
    d.gemm_fraction = {{1, 0.25}, {16, 0.5}};
    d.ubatch_overhead_s = 1e-3;
    d.layer_overhead_s = 1e-5;
    const model_shape m = model_preset("tiny-llama");   // 0.5e6 params, 2 layers, 4 heads of 32
    step_time_model tm{d, m, &parse_weight_file_type("f16")};
    const ubatch_work w{4, 256, 1, 2, 256, 1};
    // gemm fraction at 4 tokens: log2 4 = 2 of 0..4 -> 0.25 + 0.25 * 2 / 4 = 0.375
    CHECK(d.gemm_fraction_at(4) == doctest::Approx(0.375));
    CHECK(d.gemm_fraction_at(0.5) == 0.25);
    CHECK(d.gemm_fraction_at(64) == 0.5);
    // roofline attention: bytes 1e6 + 256 x 256 x 2 = 1131072 over 5 GB/s; flops 4e6 + 4 x 4 x 256 x 128 x 2 = 5048576 over 37.5 GFLOP/s
    const double mem = 1131072.0 / 5e9, comp = 5048576.0 / 37.5e9;
    CHECK(tm.ubatch_seconds({w}) == doctest::Approx(std::max(mem, comp) + 1e-3 + 2e-5).epsilon(1e-12));
    // linear attention: 1e-12 s per K/V byte, 1e-13 s per FLOP, added
    d.attention = "linear";
    d.attn_s_per_kv_byte = 1e-12;
    d.attn_s_per_flop = 1e-13;
    step_time_model lin{d, m, &parse_weight_file_type("f16")};
    const double dense = std::max(1e6 / 5e9, 4e6 / 37.5e9);
    CHECK(lin.ubatch_seconds({w}) == doctest::Approx(dense + 131072 * 1e-12 + 1048576 * 1e-13 + 1e-3 + 2e-5).epsilon(1e-12));
    // output rows: Llama-3.2-1B's output matrix costs 2 FLOPs per parameter per logits row, not per token; on a CPU one
    // row is ggml_vec_dot's pass over its bytes (llamafile_sgemm takes no single row: ggml-cpu.c
    // ggml_compute_forward_mul_mat), out of the GEMM: f16, 2048 x 128256 x 2 bytes
    const step_time_model big{device_preset("cpu"), model_preset("llama-3.2-1b"), nullptr};
    const ubatch_terms t = big.terms({{512, 512, 1, 16, 32768, 1}});
    CHECK(t.dense_flops == 2.0 * 16 * 60817408 * 512);
    CHECK(t.gemv_output_bytes == 2.0 * 2048 * 128256);
    // two logits rows go through tinyBLAS with the layers': their FLOPs in the GEMM
    ubatch_work two{512, 512, 1, 16, 32768, 1};
    two.n_outputs = 2;
    const ubatch_terms t2 = big.terms({two});
    CHECK(t2.dense_flops == 2.0 * 16 * 60817408 * 512 + 2.0 * 2 * 2048 * 128256);
    CHECK(t2.gemv_output_bytes == 0);
    // priced: the one-row pass at the read rate beside the GEMM, outside the max
    device_profile c = device_preset("cpu");
    c.weight_read_fraction = 0.5;
    c.gemm_fraction = {{512, 0.25}};
    c.attention_cells = "n_kv";
    c.attn_s_per_kv_byte = 1e-12;
    c.attn_s_per_flop = 1e-15;
    c.attention = "linear";
    const step_time_model priced{c, model_preset("llama-3.2-1b"), nullptr};
    const ubatch_terms p = priced.terms({{512, 512, 1, 16, 32768, 1}});
    CHECK(priced.seconds_of(p) == doctest::Approx(2.0 * 16 * 60817408 * 512 / (0.4e12 * 0.25) + 2.0 * 2048 * 128256 / (67e9 * 0.5) +
                                                  p.kv_bytes * 1e-12 + p.attn_flops * 1e-15).epsilon(1e-12));
    // ... or at the GEMM rate of one token when a one-token step is compute-bound there (one core on Q8_0): the larger
    c.gemm_fraction = {{1, 0.01}, {512, 0.25}};
    const step_time_model slow_row{c, model_preset("llama-3.2-1b"), nullptr};
    CHECK(slow_row.seconds_of(p) == doctest::Approx(2.0 * 16 * 60817408 * 512 / (0.4e12 * 0.25) + 2.0 * 2048 * 128256 / (0.4e12 * 0.01) +
                                                    p.kv_bytes * 1e-12 + p.attn_flops * 1e-15).epsilon(1e-12));
    // a profile with a read rate per weight type prices a one-token step by its reads alone: the one row too
    c.weight_read_fraction_by_type = {{"f16", 0.5}};
    const step_time_model by_type{c, model_preset("llama-3.2-1b"), nullptr};
    CHECK(by_type.seconds_of(p) == doctest::Approx(2.0 * 16 * 60817408 * 512 / (0.4e12 * 0.25) + 2.0 * 2048 * 128256 / (67e9 * 0.5) +
                                                   p.kv_bytes * 1e-12 + p.attn_flops * 1e-15).epsilon(1e-12));
}

TEST_CASE("GEMM waves (n_sm): a layer's matrices in whole waves of 128-row output tiles, as mmq tiles them") {
    // Qwen2.5-0.5B (n_embd 896, 14 heads of 64, 2 KV heads, n_ff 4864), a 512-token ubatch on 132 SMs. mmq's tiles are
    // 128 rows by J columns (mmq-config-ampere.cuh), J the narrowest width that gives the fewest column tiles (mmq.cuh:
    // J_best): 512 tokens = 4 columns of 128. Tiles and waves of 132, by matrix (rows x reduction length):
    //   Q 896 x 896:   7 x 4 =  28 tiles, 1 wave          K, V 128 x 896:  1 x 4 = 4 tiles, 1 wave each
    //   O 896 x 896:   28 tiles, 1 wave                   up, gate 4864 x 896: 38 x 4 = 152 tiles, 2 waves each
    //   down 896 x 4864: 28 tiles, 1 wave
    // A wave costs 132 tiles of 128 x 128 x (reduction length): FLOPs / 2 per layer padded =
    // 132 * 128 * 128 * (896 + 2 * 896 + 896 + 2 * 2 * 896 + 4864), exact = 512 * (896 * 896 + 2 * 128 * 896 + 896 * 896 +
    // 2 * 4864 * 896 + 896 * 4864)
    const model_shape q = model_preset("qwen2.5-0.5b");
    const double padded = 132.0 * 128 * 128 * (896 + 2 * 896 + 896 + 2 * 2 * 896 + 4864);
    const double exact = 512.0 * (896.0 * 896 + 2 * 128.0 * 896 + 896.0 * 896 + 2 * 4864.0 * 896 + 896.0 * 4864);
    CHECK(gemm_wave_factor(q, 512, 132) == doctest::Approx(padded / exact).epsilon(1e-12));
    // 130 tokens: 2 columns; the narrowest width with 2 is 72, which mmq has no kernel for: 80 (2 x 80 = 160 columns)
    // Llama-3.1-8B (4096, 32 x 128, 8 KV heads, n_ff 14336): Q, O 32 x 2 = 64 tiles, K, V 8 x 2 = 16, up, gate 112 x 2 =
    // 224 tiles = 2 waves of 132, down 64: one wave each but up and gate
    const model_shape l = model_preset("llama-3.1-8b");
    const double l_padded = 132.0 * 128 * 80 * (4096 + 2 * 4096 + 4096 + 2 * 2 * 4096 + 14336);
    const double l_exact = 130.0 * (4096.0 * 4096 + 2 * 1024.0 * 4096 + 4096.0 * 4096 + 2 * 14336.0 * 4096 + 4096.0 * 14336);
    CHECK(gemm_wave_factor(l, 130, 132) == doctest::Approx(l_padded / l_exact).epsilon(1e-12));
    // none: no SMs given (CPU, rooflines), up to 8 tokens (the matrix-vector kernels: MMVQ_MAX_BATCH_SIZE), a shape
    // without dimensions
    CHECK(gemm_wave_factor(q, 512, 0) == 1.0);
    CHECK(gemm_wave_factor(q, 1, 132) == 1.0);
    CHECK(gemm_wave_factor(q, 8, 132) == 1.0);
    // 9 tokens: one column tile of J = 16; Q and O 7 tiles, K and V 1, up and gate 38, down 7: one wave each
    const double p9 = 132.0 * 128 * 16 * (896 + 2 * 896 + 896 + 2 * 896 + 4864);
    const double e9 = 9.0 * (896.0 * 896 + 2 * 128.0 * 896 + 896.0 * 896 + 2 * 4864.0 * 896 + 896.0 * 4864);
    CHECK(gemm_wave_factor(q, 9, 132) == doctest::Approx(p9 / e9).epsilon(1e-12));
    CHECK(gemm_wave_factor(model_preset("tiny-llama"), 512, 132) == 1.0);   // no n_embd
    model_shape custom;
    CHECK(gemm_wave_factor(custom, 512, 132) == 1.0);
    // the step time's GEMM FLOPs carry it: dense FLOPs of the layers times the factor, the output's as they were
    device_profile d = device_preset("h200");
    REQUIRE(d.n_sm == 132);
    const step_time_model tm{d, q, &parse_weight_file_type("q4_0")};
    const ubatch_terms t = tm.terms({{512, 512, 1, 24, 12288, 1}});
    d.n_sm = 0;
    const step_time_model flat{d, q, &parse_weight_file_type("q4_0")};
    const ubatch_terms f = flat.terms({{512, 512, 1, 24, 12288, 1}});
    // (n_sm 0: a CPU, whose one logits row leaves the GEMM: f holds the layers' FLOPs alone)
    const double output = 2.0 * 896 * 151936;
    CHECK(f.gemv_output_bytes > 0);
    CHECK(t.gemv_output_bytes == 0);
    CHECK(t.dense_flops - output == doctest::Approx(f.dense_flops * padded / exact).epsilon(1e-12));
}

// llama.cpp's CUDA build multiplies F16 weights by its vector kernel for one token only on Ampere and later (mmvf.cu:
// ggml_cuda_should_use_mmvf, "ne11 == 1"), by mmf up to 16 tokens and cuBLAS beyond (ggml-cuda.cu: ggml_cuda_mul_mat);
// quantized weights go through mmvq / mmq, and a CPU has none of these kernels.
TEST_CASE("float weights of 2+ tokens on a CUDA card: the GEMM kernels' read price (float_gemm_extra_s_per_byte)") {
    const model_shape m = model_preset("llama-3.1-8b");
    device_profile d = device_preset("h200-datasheet");
    d.n_sm = 132;
    auto work = [](uint32_t n_tokens) { return std::vector<ubatch_work>{{n_tokens, 512, 1, 32, 4096, 1, 0, -1}}; };
    const step_time_model f16{d, m, &parse_weight_file_type("f16")}, q4{d, m, &parse_weight_file_type("q4_0")};
    CHECK_FALSE(f16.terms(work(1)).float_multi_row);
    CHECK(f16.terms(work(2)).float_multi_row);
    CHECK(f16.terms(work(512)).float_multi_row);
    CHECK_FALSE(q4.terms(work(2)).float_multi_row);
    device_profile no_sm = d;
    no_sm.n_sm = 0;
    CHECK_FALSE((step_time_model{no_sm, m, &parse_weight_file_type("f16")}.terms(work(2)).float_multi_row));
    // priced on a memory-bound ubatch only, by its weight bytes; a one-token ubatch keeps the vector kernel's price
    device_profile priced = d;
    priced.float_gemm_extra_s_per_byte = 1e-13;
    const step_time_model p{priced, m, &parse_weight_file_type("f16")};
    const ubatch_terms two = f16.terms(work(2));
    CHECK(p.seconds_of(two) - f16.seconds_of(two) == doctest::Approx(two.weight_bytes * 1e-13));
    CHECK(p.seconds_of(f16.terms(work(1))) == f16.seconds_of(f16.terms(work(1))));
}

TEST_CASE("cuda_fa_takes_mma: llama.cpp's CUDA flash-attention kernel choice (fattn.cu: ggml_cuda_get_best_fattn_kernel, cc >= 8.9)") {
    const model_shape l8 = model_preset("llama-3.1-8b");   // head_dim 128, GQA 4
    const model_shape l2 = model_preset("llama-2-7b");     // no GQA
    const model_shape q = model_preset("qwen2.5-0.5b");    // head_dim 64, GQA 7
    const model_shape g = model_preset("gemma-2-9b");      // head_dim 256, GQA 2
    // f16 K/V: "Q->ne[1] == 1 && Q->ne[3] == 1 && !(gqa_ratio > 4 && (Q->ne[0] >= 256 || K->ne[1] >= 8192))" -> VEC
    CHECK_FALSE(cuda_fa_takes_mma(l8, false, 1, 1, 512));
    CHECK_FALSE(cuda_fa_takes_mma(g, false, 1, 1, 8192));     // GQA 2: the head size clause needs GQA > 4
    CHECK_FALSE(cuda_fa_takes_mma(q, false, 1, 1, 7936));
    CHECK(cuda_fa_takes_mma(q, false, 1, 1, 8192));           // GQA 7 over 8192 cells
    // two rows, or one row in each of several streams (-np without -kvu): the MMA kernel when the GQA optimisation applies
    CHECK(cuda_fa_takes_mma(l8, false, 2, 1, 512));
    CHECK(cuda_fa_takes_mma(l8, false, 512, 1, 512));
    CHECK(cuda_fa_takes_mma(l8, false, 1, 4, 512));
    CHECK_FALSE(cuda_fa_takes_mma(l2, false, 1, 4, 512));     // "!gqa_opt_applies && Q->ne[1] == 1" -> VEC
    CHECK(cuda_fa_takes_mma(l2, false, 2, 1, 512));
    // quantized K/V on Ada and later: "Q->ne[1] <= 2" -> VEC
    CHECK_FALSE(cuda_fa_takes_mma(l8, true, 2, 1, 512));
    CHECK_FALSE(cuda_fa_takes_mma(q, true, 1, 1, 16384));
    CHECK(cuda_fa_takes_mma(l8, true, 3, 1, 512));
    // K->ne[1] not a multiple of FATTN_KQ_STRIDE (256): no vector kernel
    CHECK(cuda_fa_takes_mma(l8, false, 1, 1, 300));
    // the step time puts those ubatches' K/V bytes in the tiled term (a GPU profile, attention on n_kv)
    const step_time_model tm{device_preset("h200"), l8, &parse_weight_file_type("f16")};
    const size_t cell = 131072 / 32;   // bytes per cell and layer, f16 K and V of 8 heads of 128
    const ubatch_terms decode = tm.terms({{1, 16384, 1, 32, cell, 1}});
    CHECK(decode.kv_bytes == 16384.0 * cell * 32);
    CHECK(decode.tiled_kv_bytes == 0);
    const ubatch_terms pp4 = tm.terms({{4, 16384, 1, 32, cell, 1}});
    CHECK(pp4.kv_bytes == 0);
    CHECK(pp4.tiled_kv_bytes == 16384.0 * cell * 32);
    CHECK(pp4.attn_flops == 4.0 * 4 * 16384 * 32 * 128 * 32);
    // the MMA kernel over one row (GQA 7 over 16384 cells) keeps the one-row price; a profile without n_sm (a roofline,
    // the CPU) prices no kernel apart
    const step_time_model qm{device_preset("h200"), q, &parse_weight_file_type("f16")};
    REQUIRE(cuda_fa_takes_mma(q, false, 1, 1, 16384));
    CHECK(qm.terms({{1, 16384, 1, 24, 1024, 1}}).tiled_kv_bytes == 0);
    const step_time_model roof{device_preset("h200-datasheet"), l8, &parse_weight_file_type("f16")};
    CHECK(roof.terms({{4, 16384, 1, 32, cell, 1}}).tiled_kv_bytes == 0);
}

TEST_CASE("device profiles: shipped, round trip, bad files") {
    const device_profile h = device_preset("h200-datasheet");
    CHECK(h.bandwidth_gbs == 4800);
    CHECK(h.peak_tflops == 989);
    CHECK(device_preset("a100-datasheet").peak_tflops == 312);
    CHECK(device_preset("cpu").bandwidth_gbs == 67);
    CHECK_FALSE(h.attention_linear());
    CHECK_THROWS_AS(device_preset("tpu"), std::invalid_argument);
    device_profile d = device_preset("cpu");
    d.gemm_fraction = {{1, 0.2}, {512, 0.7}};
    d.attention = "linear";
    d.attn_s_per_kv_byte = 2e-11;
    const device_profile back = parse_device_profile(device_profile_json(d), "x");
    CHECK(back.gemm_fraction == d.gemm_fraction);
    CHECK(back.attn_s_per_kv_byte == d.attn_s_per_kv_byte);
    CHECK(back.attention_linear());
    CHECK_FALSE(device_profile_json(d).contains("n_sm"));   // written only when set: older profiles stay byte for byte
    d.n_sm = 132;
    CHECK(parse_device_profile(device_profile_json(d), "x").n_sm == 132);
    CHECK_FALSE(device_profile_json(d).contains("float_gemm_extra_s_per_byte"));
    d.float_gemm_extra_s_per_byte = 1e-13;
    CHECK(parse_device_profile(device_profile_json(d), "x").float_gemm_extra_s_per_byte == 1e-13);
    using json = nlohmann::json;
    auto refused = [](const json & j) {
        try {
            parse_device_profile(j, "p.json");
        } catch (const input_error & e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(refused({{"peak_tflops", 1}}).find("bandwidth_gbs") != std::string::npos);
    CHECK(refused({{"bandwidth_gbs", -1}, {"peak_tflops", 1}}).find("bandwidth_gbs") != std::string::npos);
    CHECK(refused({{"bandwidth_gbs", 1}, {"peak_tflops", 1}, {"bandwith", 2}}).find("unknown field") != std::string::npos);
    CHECK(refused({{"bandwidth_gbs", 1}, {"peak_tflops", 1}, {"gemm_fraction", {{16, 0.5}, {8, 0.5}}}}).find("gemm_fraction") != std::string::npos);
    CHECK(refused({{"bandwidth_gbs", 1}, {"peak_tflops", 1}, {"attention", "cubic"}}).find("attention") != std::string::npos);
    CHECK(refused(json::array()).find("JSON object") != std::string::npos);
    for (const json & bad : {json(-1), json(13.5), json("132"), json(1025), json(1e6)}) {
        CAPTURE(bad.dump());
        CHECK(refused({{"bandwidth_gbs", 1}, {"peak_tflops", 1}, {"n_sm", bad}}).find("n_sm") != std::string::npos);
    }
    for (const json & bad : {json(-1e-13), json(1e-3), json("1e-13")}) {
        CAPTURE(bad.dump());
        CHECK(refused({{"bandwidth_gbs", 1}, {"peak_tflops", 1}, {"n_sm", 132}, {"float_gemm_extra_s_per_byte", bad}})
                  .find("float_gemm_extra_s_per_byte") != std::string::npos);
    }
    // CUDA's GEMM kernels' price on a profile without SMs would price nothing: refused, not ignored
    CHECK(refused({{"bandwidth_gbs", 1}, {"peak_tflops", 1}, {"float_gemm_extra_s_per_byte", 1e-13}}).find("needs n_sm > 0") !=
          std::string::npos);
    scratch_dir dir("devprof");
    std::ofstream(dir / "bad.json") << "{ not json";
    CHECK_THROWS_AS(load_device_profile(dir / "bad.json"), input_error);
}

namespace {
// Decode groups (llama_decode calls) of an op trace, by batch label, in file order.
std::vector<std::string> decode_labels(const std::string & path) {
    std::vector<std::string> v;
    for (const auto & g : read_op_trace(path).groups) {
        if (g.op == op_kind::decode) v.push_back(g.rows.front().batch);
    }
    return v;
}
}  // namespace

TEST_CASE("steps.csv: one row per decode call of the emitted op trace, same order and labels") {
    scratch_dir dir("steps");
    for (const std::string extra : {"--arrivals saturate", "-np 2 --cache-ram 64 --arrivals saturate", ""}) {
        CAPTURE(extra);
        const auto r = run_kvsim("replay traces/requests/azure_sample.csv --model llama-3.2-1b --weights q4_K_M --device cpu "
                                 "--backend none --limit 60 -c 16384 -q --steps-csv --out " + (dir / "o") + " --emit-ops " + (dir / "ops.csv") + " " + extra);
        REQUIRE(r.rc == 0);
        const auto labels = decode_labels(dir / "ops.csv");
        const auto rows = lines_of(read_text(dir / "o/steps.csv"));
        REQUIRE(rows.size() == labels.size() + 1);
        CHECK(rows[0] == "step,label,kind,rc,n_tokens,n_seqs,n_prompt_tokens,n_gen_tokens,n_ubatch,n_kv,t_start_s,predicted_ms,kv_visible");
        for (size_t i = 0; i < labels.size(); ++i) {
            std::vector<std::string> f;
            std::stringstream ss(rows[i + 1]);
            for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
            REQUIRE(f.size() == 13);
            CHECK(f[0] == std::to_string(i));
            CHECK(f[1] == labels[i]);
        }
    }
}

TEST_CASE("steps.csv of the ram_restore scenario, every row by hand") {
    // tests/server_golden/ram_restore.scn, whose llama_decode calls llama-server made are recorded in
    // expected/ram_restore.ops.csv: request 0 (100 prompt tokens, 4 generated) on seq 1, request 1 (50, 4)
    // on seq 0 at 1000 s, request 2 (120, 4, the same first block as request 0) at 2000 s, restored from the
    // RAM cache: 103 cells (R1.0), of which the first 100 are reused, so 20 prompt tokens are decoded.
    // 4 generated tokens are 3 one-token calls (the first comes from the prompt's logits).
    // Time on a device of 1 GB/s and 0.01 TFLOP/s, tiny-llama f16 (2 layers, 4 heads of 32, 2 KV heads,
    // 0.5e6 dense parameters, 512 K/V bytes per cell): every call reads 1,000,000 weight bytes + n_kv 256 x 512
    // = 1,131,072 bytes = 1.131072 ms; FLOPs 2 x 0.5e6 x n + 4 x n x 256 x 4 x 32 x 2 = 1e6 n + 262,144 n:
    //   n = 100: 126,214,400 FLOPs = 12.62144 ms; n = 50: 63,107,200 = 6.31072 ms; n = 20: 25,242,880 = 2.524288 ms;
    //   n = 1: 0.1262144 ms < 1.131072 ms (memory-bound)
    // t_start: the arrival, then the sum of the calls before it (12.62144 ms + k x 1.131072 ms, ...).
    // kv_visible: a token at position p sees p + 1 cells of its sequence: 1 + ... + 100 = 5050 for the first
    // prompt, 101 for the token at 100; 1 + ... + 50 = 1275; the 20 tokens at 100..119 see 101..120: 2210.
    // A restore places saved cells without computing: no time, no ubatch.
    const std::string want =
        "step,label,kind,rc,n_tokens,n_seqs,n_prompt_tokens,n_gen_tokens,n_ubatch,n_kv,t_start_s,predicted_ms,kv_visible\n"
        "0,d0,decode,0,100,1,100,0,1,256,0.000000000,12.621440,5050\n"
        "1,d1,decode,0,1,1,0,1,1,256,0.012621440,1.131072,101\n"
        "2,d2,decode,0,1,1,0,1,1,256,0.013752512,1.131072,102\n"
        "3,d3,decode,0,1,1,0,1,1,256,0.014883584,1.131072,103\n"
        "4,d4,decode,0,50,1,50,0,1,256,1000.000000000,6.310720,1275\n"
        "5,d5,decode,0,1,1,0,1,1,256,1000.006310720,1.131072,51\n"
        "6,d6,decode,0,1,1,0,1,1,256,1000.007441792,1.131072,52\n"
        "7,d7,decode,0,1,1,0,1,1,256,1000.008572864,1.131072,53\n"
        "8,R1.0,restore,0,103,1,0,0,0,0,2000.000000000,0.000000,0\n"
        "9,d8,decode,0,20,1,20,0,1,256,2000.000000000,2.524288,2210\n"
        "10,d9,decode,0,1,1,0,1,1,256,2000.002524288,1.131072,121\n"
        "11,d10,decode,0,1,1,0,1,1,256,2000.003655360,1.131072,122\n"
        "12,d11,decode,0,1,1,0,1,1,256,2000.004786432,1.131072,123\n";
    scratch_dir dir("steps_hand");
    std::ofstream(dir / "dev.json") << R"({"name": "hand", "bandwidth_gbs": 1, "peak_tflops": 0.01})";
    const auto r = run_kvsim("replay tests/server_golden/traces/ram_restore.jsonl --model tiny-llama -c 1024 -np 2 -kvu "
                             "--arrivals trace --backend none -q --device " + (dir / "dev.json") + " --steps-csv --out " + (dir / "o"));
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(read_text(dir / "o/steps.csv") == want);
}

// steps.csv is one row per llama_decode call: 61 MB for the bundled Azure trace, so a replay writes it only when asked.
// Three requests on two slots (-np 2, one stream each): d0 decodes both prompts (3 + 5 tokens, one ubatch per stream),
// d1 one generated token of each, d2 the third token of request 1, d3 request 2's prompt when it arrives at 0.1 s.
// kv_visible by hand: d0 1+2+3 + 1+..+5 = 21, d1 4 + 6 = 10, d2 5, d3 1+..+4 = 10. predicted_ms and t_start_s are the
// step-time model's (llama-3.2-1b f16 on the h200 profile) as kvsim wrote them at f203b56, before the writer changed.
TEST_CASE("steps.csv only with --steps-csv: none by default, the flag's file for a tiny trace byte for byte") {
    scratch_dir dir("steps_flag");
    std::ofstream(dir / "tiny.csv") << "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                       "2023-11-30 23:59:58.9000000,5,2\n"
                                       "2023-11-30 23:59:58.9000000,3,3\n"
                                       "2023-11-30 23:59:59.0000000,4,1\n";
    const std::string run = "replay " + (dir / "tiny.csv") + " --model llama-3.2-1b -c 256 -np 2 --backend none -q --device h200-datasheet --out " + (dir / "o");
    auto r = run_kvsim(run);
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    CHECK(std::filesystem::exists(dir / "o/requests.csv"));
    CHECK_FALSE(std::filesystem::exists(dir / "o/steps.csv"));
    r = run_kvsim(run + " --steps-csv");
    REQUIRE_MESSAGE(r.rc == 0, r.err);
    // the third request arrives at 0.1 s; before its prompt the two finished slots are saved to the RAM cache: 6 + 5
    // cells of Llama-3.2-1B f16 K/V (16 layers x 8 KV heads x 64 x 2 B x 2 = 32 KiB per cell) plus the state
    // headers, over h200-datasheet's 63 GB/s host link: 5.7 us
    CHECK(read_text(dir / "o/steps.csv") ==
          "step,label,kind,rc,n_tokens,n_seqs,n_prompt_tokens,n_gen_tokens,n_ubatch,n_kv,t_start_s,predicted_ms,kv_visible\n"
          "0,d0,decode,0,8,2,8,0,2,256,0.000000000,1.035145,21\n"
          "1,d1,decode,0,2,2,0,2,1,256,0.001035145,0.518446,10\n"
          "2,d2,decode,0,1,1,0,1,1,256,0.001553591,0.516698,5\n"
          "3,d3,decode,0,4,1,4,0,1,256,0.100005737,0.516698,10\n");

    r = run_kvsim("replay " + (dir / "tiny.csv") + " --model llama-3.2-1b -c 256 -np 2 --backend none -q --steps-csv");
    CHECK(r.rc == 2);
    CHECK(r.err.find("--steps-csv writes steps.csv into the --out directory") != std::string::npos);
    r = run_kvsim("replay traces/ops/context_shift.csv --model tiny-llama -c 256 -np 2 -kvu --backend none -q --steps-csv --out " +
                  (dir / "ops"));
    CHECK(r.rc == 2);
    CHECK(r.err.find("--steps-csv applies to request traces only") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(dir / "ops"));
}

TEST_CASE("kvsim replay --device FILE / --weights: bad values exit 2 naming the value") {
    scratch_dir dir("devcli");
    std::ofstream(dir / "p.json") << R"({"bandwidth_gbs": 30, "peak_tflops": 0.3, "speed": 1})";
    auto r = run_kvsim("replay traces/requests/azure_sample.csv --backend none -q --device " + (dir / "p.json"));
    CHECK(r.rc == 2);
    CHECK(r.err.find("speed") != std::string::npos);
    r = run_kvsim("replay traces/requests/azure_sample.csv --backend none -q --device nosuch");
    CHECK(r.rc == 2);
    r = run_kvsim("replay traces/requests/azure_sample.csv --backend none -q --weights q3_K_XL");
    CHECK(r.rc == 2);
    CHECK(r.err.find("q3_K_XL") != std::string::npos);
    std::ofstream(dir / "ok.json") << R"({"name": "mine", "bandwidth_gbs": 30, "peak_tflops": 0.3})";
    r = run_kvsim("replay traces/requests/azure_sample.csv --backend none -q --limit 5 --out " + (dir / "o") + " --device " + (dir / "ok.json"));
    CHECK(r.rc == 0);
    const auto summary = nlohmann::json::parse(read_text(dir / "o/summary.json"));
    CHECK(summary["device"]["name"] == "mine");
    CHECK(summary["device"]["source"] == "file");
    CHECK(summary["weights"]["type"] == "f16");
}

namespace {
// tiny-llama with 512 cells shared by 2 sequences (one unified stream)
context_params two_seq_unified() {
    context_params cp;
    cp.n_ctx = 512;
    cp.n_seq_max = 2;
    cp.kv_unified = true;
    return cp;
}
}  // namespace

TEST_CASE("visible cells: each token of a sequence sees its sequence's cells up to its position") {
    context ctx(model_preset("tiny-llama"), two_seq_unified());
    const step_time_model n_kv_model{device_preset("cpu"), model_preset("tiny-llama"), nullptr};
    ubatch_work_collector col(ctx, n_kv_model);
    llama_batch_in b;
    for (int i = 0; i < 10; ++i) b.add(i, {0});
    for (int i = 0; i < 5; ++i) b.add(i, {1});
    REQUIRE(ctx.decode(b, &col) == DECODE_OK);
    REQUIRE(col.work.size() == 1);
    // seq 0: 10 + 9 + ... + 1 = 55; seq 1: 15; n_kv charges every token 256 cells
    CHECK(col.work[0][0].visible == 70);
    CHECK(col.work[0][0].n_kv == 256);
    col.work.clear();
    llama_batch_in g;
    g.add(10, {0});
    g.add(5, {1});
    REQUIRE(ctx.decode(g, &col) == DECODE_OK);
    CHECK(col.work[0][0].visible == 11 + 6);
    // the model charges the visible cells when the profile says so
    device_profile d = device_preset("cpu");
    d.attention = "linear";
    d.attn_s_per_kv_byte = 1e-9;
    d.attention_cells = "visible";
    const step_time_model vis{d, model_preset("tiny-llama"), nullptr};
    CHECK(vis.terms(col.work[0]).kv_bytes == 17.0 * 256 * 2);   // 256 bytes per cell and layer (f16), 2 layers
    d.attention_cells = "n_kv";
    const step_time_model all{d, model_preset("tiny-llama"), nullptr};
    CHECK(all.terms(col.work[0]).kv_bytes == 256.0 * 256 * 2);
    CHECK(parse_device_profile(device_profile_json(vis.device), "x").attention_cells == "visible");
}

// llama.cpp ropes the K of every cell of every stream, used or not, inside the llama_decode that follows a seq_add
// (llama-kv-cache.cpp: update applies it before the batch; build_graph_shift: k_shift is I32 [get_size() * n_stream], and
// each layer's view spans all of them), once.
TEST_CASE("K-shift: the decode after a seq_add pays a rope over every cell of the cache, once") {
    context_params cp;
    cp.n_ctx = 1024;
    cp.n_seq_max = 2;
    cp.kv_unified = false;   // two streams of 512 cells
    context ctx(model_preset("tiny-llama"), cp);
    device_profile d = device_preset("cpu");
    d.k_shift_s_per_theta = 1e-8;
    const step_time_model tm{d, model_preset("tiny-llama"), nullptr};
    ubatch_work_collector col(ctx, tm);
    llama_batch_in prompt;
    for (int i = 0; i < 8; ++i) prompt.add(i, {0});
    REQUIRE(ctx.decode(prompt, &col) == DECODE_OK);
    CHECK(col.work[0][0].k_shift_cells == 0);
    const auto step = [&](llama_pos pos) {
        col.work.clear();
        llama_batch_in g;
        g.add(pos, {0});
        REQUIRE(ctx.decode(g, &col) == DECODE_OK);
        REQUIRE(col.work.size() == 1);
        return col.work[0];
    };
    const auto plain = step(8);
    // llama-server's context shift: n_discard cells after n_keep out, the later ones moved down
    REQUIRE(ctx.memory().seq_rm(0, 1, 3));
    ctx.memory().seq_add(0, 3, -1, -2);
    const auto shifted = step(7);
    CHECK(shifted[0].k_shift_cells == 1024);   // 2 streams x 512 cells, not the 7 used
    const ubatch_terms t = tm.terms(shifted);
    CHECK(t.k_shift_thetas == 1024.0 * 2 * 16);   // x n_layer 2 x head_dim 32 / 2: a cos/sin pair per rotated pair
    CHECK(tm.seconds_of(t) - tm.seconds_of(tm.terms(plain)) == doctest::Approx(32768 * 1e-8));
    CHECK(step(8)[0].k_shift_cells == 0);   // applied once
    // the price round-trips through a profile file; a profile without it (0) writes no field
    CHECK(parse_device_profile(device_profile_json(d), "x").k_shift_s_per_theta == 1e-8);
    CHECK_FALSE(device_profile_json(device_preset("h200")).contains("k_shift_s_per_theta"));
    nlohmann::json bad = device_profile_json(d);
    bad["k_shift_s_per_theta"] = -1;
    CHECK_THROWS_AS(parse_device_profile(bad, "p.json"), input_error);
}

TEST_CASE("CPU terms of ggml's paths: an unpacked tied output for several output rows, the tiled attention path") {
    // qwen2.5-0.5b ties its output to token_embd, which llama.cpp keeps out of ggml-cpu's repack buffer (GET_ROWS):
    // several output rows go through tinyBLAS, one row is a gemv priced with the weight reads
    const model_shape qwen = model_preset("qwen2.5-0.5b");
    REQUIRE(qwen.tied_embd);
    device_profile d = device_preset("cpu");
    REQUIRE(d.repack_rows == 4);
    d.attention = "linear";
    d.attention_cells = "visible";
    const step_time_model tm{d, qwen, &parse_weight_file_type("q4_0")};
    const weight_bytes wb = model_weight_bytes(qwen, parse_weight_file_type("q4_0"));
    auto work = [](uint32_t n_tokens, uint32_t n_outputs, double visible) {
        return std::vector<ubatch_work>{{n_tokens, 1024, 1, 24, 512, n_outputs, visible, n_tokens >= 64 ? 2 * visible : -1}};
    };
    const ubatch_terms one = tm.terms(work(1, 1, 100)), two = tm.terms(work(2, 2, 200)), four = tm.terms(work(4, 4, 400));
    // Q4_0's layers are all repacked (q4_0, rows divisible by 8); its tied output (q8_0) is not
    CHECK(wb.unpacked_dense_params == 0);
    CHECK(!wb.output_packed);
    CHECK(wb.packed_bytes == wb.attn + wb.ffn);
    CHECK(one.unpacked_row_params == 0);
    CHECK(two.unpacked_row_params == 2 * wb.output_params);
    CHECK(four.unpacked_row_params == 4 * wb.output_params);
    // the output's FLOPs move out of the GEMM term, its bytes out of the repacked matmul's extra passes
    CHECK(two.dense_flops == 2 * 2 * wb.dense_params);
    CHECK(two.extra_pass_bytes == wb.attn + wb.ffn);
    // Q8_0 is not repacked on x86 (ggml_repack_get_optimal_repack_type: no x86 case): every layer matrix goes through
    // one kernel at every ubatch size (no gemv passes, no extra passes: the GEMM term), but the output multiplies its
    // own rows, one per sequence, not the ubatch's tokens: from two rows its tinyBLAS rows are the unpacked term, as an
    // unpacked output's of a repacked type (llamafile_sgemm from 2 rows: ggml-cpu.c ggml_compute_forward_mul_mat)
    const step_time_model q8{d, qwen, &parse_weight_file_type("q8_0")};
    const weight_bytes wb8 = model_weight_bytes(qwen, parse_weight_file_type("q8_0"));
    CHECK(wb8.packed_bytes == 0);
    CHECK(wb8.unpacked_dense_params == wb8.dense_params);
    for (uint32_t n : {2u, 3u, 4u}) {
        const ubatch_terms t = q8.terms(work(n, n, 100.0 * n));
        CHECK(t.unpacked_row_params == n * wb8.output_params);
        CHECK(t.extra_pass_bytes == 0);
        CHECK(!t.gemv_only);
        CHECK(t.dense_flops == 2.0 * n * wb8.dense_params);
        CHECK(t.gemv_output_bytes == 0);
    }
    // a prompt of 4 sequences' tokens in one ubatch of 64: 4 output rows
    CHECK(q8.terms(work(64, 4, 6400)).unpacked_row_params == 4 * wb8.output_params);
    // one output row: the one-row pass, as a one-token step's (ubatch_terms::gemv_output_bytes)
    const ubatch_terms q8_prompt = q8.terms(work(4, 1, 400));
    CHECK(q8_prompt.unpacked_row_params == 0);
    CHECK(q8_prompt.gemv_output_bytes == wb8.output);
    CHECK(q8_prompt.gemv_output_flops == 2 * wb8.output_params);
    CHECK(q8_prompt.dense_flops == 2.0 * 4 * wb8.dense_params);
    // one sequence's prompt: one output row whatever its tokens
    CHECK(tm.terms(work(4, 1, 400)).unpacked_row_params == 0);
    // llama-3.1-8b's untied output is q6_K in a Q4_0 file: not repacked on x86 either; float weights not at all
    const model_shape l8 = model_preset("llama-3.1-8b");
    const step_time_model untied{d, l8, &parse_weight_file_type("q4_0")};
    CHECK(untied.terms(work(2, 2, 200)).unpacked_row_params == 2 * model_weight_bytes(l8, parse_weight_file_type("q4_0")).output_params);
    const step_time_model f16{d, qwen, &parse_weight_file_type("f16")};
    CHECK(f16.terms(work(2, 2, 200)).unpacked_row_params == 0);
    // a GPU profile (no repacking) has no such term
    const step_time_model gpu{device_preset("h100-datasheet"), qwen, &parse_weight_file_type("q4_0")};
    CHECK(gpu.terms(work(2, 2, 200)).unpacked_row_params == 0);
    // the tiled path's cells (ubatch_tiled_cells >= 0) instead of the visible ones; the one-row path's (-1): the visible
    const ubatch_terms tiled = tm.terms(work(64, 1, 6400)), rows = tm.terms(work(63, 1, 6300));
    CHECK(tiled.kv_bytes == 0);
    CHECK(tiled.tiled_kv_bytes == 12800.0 * 512 * 24);   // the tiles' cells, not the visible ones
    CHECK(rows.tiled_kv_bytes == 0);
    CHECK(rows.kv_bytes == 6300.0 * 512 * 24);
    // each term is priced by its own profile number, and read back from a profile file
    device_profile priced = d;
    priced.unpacked_s_per_param_row = 1e-10;
    priced.attn_tiled_s_per_kv_byte = 1e-9;
    const step_time_model p{priced, qwen, &parse_weight_file_type("q4_0")};
    // (the cpu datasheet prices those rows at its peak, 2 FLOPs per parameter and row, until a fit replaces it)
    CHECK(d.unpacked_s_per_param_row == doctest::Approx(2.0 / 0.4e12).epsilon(1e-12));
    CHECK(p.seconds_of(two) - tm.seconds_of(two) == doctest::Approx(two.unpacked_row_params * (1e-10 - 2.0 / 0.4e12)));
    CHECK(p.seconds_of(tiled) - tm.seconds_of(tiled) == doctest::Approx(tiled.tiled_kv_bytes * 1e-9));
    // no tiled price (0: a profile from before it): the tiled cells cost what the one-row path's do, never nothing
    device_profile one_row = d;
    one_row.attn_s_per_kv_byte = 1e-9;
    const step_time_model o{one_row, qwen, &parse_weight_file_type("q4_0")};
    CHECK(o.seconds_of(tiled) - tm.seconds_of(tiled) == doctest::Approx(tiled.tiled_kv_bytes * 1e-9));
    const device_profile back = parse_device_profile(device_profile_json(priced), "x");
    CHECK(back.unpacked_s_per_param_row == 1e-10);
    CHECK(back.attn_tiled_s_per_kv_byte == 1e-9);
}

TEST_CASE("ubatch_tiled_cells: the 64 x 64 tiles ggml's tiled CPU flash attention computes") {
    // ggml-cpu/ops.cpp ggml_compute_forward_flash_attn_ext_tiled: Q tiles of up to 64 consecutive tokens of one head, K/V
    // tiles of 64 cells up to n_kv (256 here: the padding of an empty 512-cell cache), a K/V tile skipped when every
    // cell of it is masked for every row of the Q tile; tiny-llama has 4 heads. The cpu preset's threads (0): one chunk.
    context ctx(model_preset("tiny-llama"), two_seq_unified());
    device_profile vis = device_preset("cpu");
    vis.attention_cells = "visible";
    const step_time_model visible_model{vis, model_preset("tiny-llama"), nullptr};
    auto decode_in = [](context & c, const step_time_model & tm, std::initializer_list<std::tuple<llama_seq_id, llama_pos, int>> runs) {
        ubatch_work_collector col(c, tm);
        llama_batch_in b;
        for (const auto & [s, p0, n] : runs)
            for (int i = 0; i < n; ++i) b.add(p0 + i, {s});
        REQUIRE(c.decode(b, &col) == DECODE_OK);
        REQUIRE(col.work.size() == 1);
        return col.work[0][0];
    };
    auto decode = [&](std::initializer_list<std::tuple<llama_seq_id, llama_pos, int>> runs) { return decode_in(ctx, visible_model, runs); };
    // one sequence, 128 tokens from 0: Q tile 0 (pos 0-63) computes K/V tile 0, Q tile 1 tiles 0 and 1; visible is the
    // causal triangle, 128 * 129 / 2
    ubatch_work w = decode({{0, 0, 128}});
    CHECK(w.tiled_cells == 64 * 64 + 64 * 128);
    CHECK(w.visible == 8256);
    // 63 tokens: the one-row path, no tiles
    ctx.memory().clear();
    CHECK(decode({{0, 0, 63}}).tiled_cells == -1);
    // two sequences of 32 tokens in one Q tile, their cells in K/V tile 0: one tile
    ctx.memory().clear();
    CHECK(decode({{0, 0, 32}, {1, 0, 32}}).tiled_cells == 64 * 64);
    // then 64 more of each (seq 0's at cells 64-127, seq 1's at 128-191): seq 0's Q tile computes K/V tiles 0 and 1,
    // not 2 (seq 1's cells only); seq 1's tiles 0 and 2, not 1
    w = decode({{0, 32, 64}, {1, 32, 64}});
    CHECK(w.n_kv == 256);
    CHECK(w.tiled_cells == 64 * 128 + 64 * 128);
    // 100 tokens: the second Q tile holds 36 rows (64-99) and costs a full one (Q zero-padded to 64 rows, the padded
    // rows' scores unmasked): K/V tiles 0 and 1, 64 x 128, not 36 x 128
    ctx.memory().clear();
    CHECK(decode({{0, 0, 100}}).tiled_cells == 64 * 64 + 64 * 128);

    // three threads: ggml_compute_forward_flash_attn_ext_f16 cuts the 4 heads x 128 tokens = 512 rows into 4 chunks a
    // thread, chunk_size ceil(512 / 12) = 43, nchunk ceil(512 / 43) = 12, dr ceil(512 / 12) = 43 rows: [0, 43), [43, 86),
    // ... [473, 512). Its Q tiles end at a chunk's end and at a head's (128 rows): head 0 tokens 0-42 (K/V tile 0),
    // 43-85 (tiles 0 and 1), 86-127 (0, 1); head 1 token 0 (0), 1-43 (0), 44-86 (0, 1), 87-127 (0, 1); head 2 tokens 0-1
    // (0), 2-44 (0), 45-87 (0, 1), 88-127 (0, 1); head 3 tokens 0-2 (0), 3-45 (0), 46-88 (0, 1), 89-127 (0, 1): 23
    // tiles of 64 x 64 over 4 heads, where one thread computes 12
    device_profile three = vis;
    three.threads = 3;
    const step_time_model three_model{three, model_preset("tiny-llama"), nullptr};
    ctx.memory().clear();
    CHECK(decode_in(ctx, three_model, {{0, 0, 128}}).tiled_cells == 23.0 * 64 * 64 / 4);

    // ggml takes the tiled path for f16 or f32 K and V of one type only (use_tiled: kv_is_f32_or_f16, k->type ==
    // v->type), with flash attention on; else the one-row path
    for (const auto & [tk, tv, fa] : {std::tuple{ggml_type::q8_0, ggml_type::q8_0, true}, {ggml_type::f16, ggml_type::q8_0, true},
                                      {ggml_type::f16, ggml_type::f16, false}}) {
        context_params cp = two_seq_unified();
        cp.type_k = tk;
        cp.type_v = tv;
        cp.flash_attn = fa;
        context other(model_preset("tiny-llama"), cp);
        CHECK(decode_in(other, visible_model, {{0, 0, 128}}).tiled_cells == -1);
    }
    // one stream per sequence (no -kvu): Q holds each stream's tokens apart (ne[1] = 40 per stream here), fewer than 64
    context_params split = two_seq_unified();
    split.kv_unified = false;
    context streams(model_preset("tiny-llama"), split);
    CHECK(decode_in(streams, visible_model, {{0, 0, 40}, {1, 0, 40}}).tiled_cells == -1);
    streams.memory().clear();
    CHECK(decode_in(streams, visible_model, {{0, 0, 64}, {1, 0, 64}}).tiled_cells == 2 * 64 * 64);
}

TEST_CASE("ubatch_split_kv_visible: one token's cells as ggml's split-KV path shares them among the threads") {
    // ggml-cpu/ops.cpp ggml_compute_forward_flash_attn_ext_f16: one token, n_kv >= 512, f16 K and V: chunks of
    // ceil(n_kv / threads) cells, one per thread. Sequence 0's 300 prompt cells are 0-299, sequence 1's 300-599, sequence
    // 0's next token takes cell 600; n_kv 768 (601 used, padded to 256); 2 threads: chunks 0-383 and 384-767, sequence 0
    // has 300 cells in the first and 1 in the second: charged 2 x 300 (the balanced split would take 301 / 2 each)
    context_params cp;
    cp.n_ctx = 1024;
    cp.n_seq_max = 2;
    cp.kv_unified = true;
    context ctx(model_preset("tiny-llama"), cp);
    device_profile vis = device_preset("cpu");
    vis.attention_cells = "visible";
    vis.threads = 2;
    const step_time_model two{vis, model_preset("tiny-llama"), nullptr};
    ubatch_work_collector col(ctx, two);
    for (llama_seq_id s : {0, 1}) {
        llama_batch_in b;
        for (int i = 0; i < 300; ++i) b.add(i, {s});
        REQUIRE(ctx.decode(b, &col) == DECODE_OK);
    }
    for (const auto & ub : col.work) CHECK(ub[0].split_kv_visible == -1);   // 300 tokens: the rows are shared
    col.work.clear();
    llama_batch_in g;
    g.add(300, {0});
    REQUIRE(ctx.decode(g, &col) == DECODE_OK);
    REQUIRE(col.work.size() == 1);
    const ubatch_work w = col.work[0][0];
    CHECK(w.n_kv == 768);
    CHECK(w.visible == 301);
    CHECK(w.split_kv_visible == 600);
    const ubatch_terms t = two.terms(col.work[0]);
    CHECK(t.kv_bytes == doctest::Approx(600.0 * w.bytes_per_cell_layer * w.n_layer));
    // 4 threads: chunks of 192 cells; sequence 0 has 192 in the first (0-191), 108 in the second, 2 in the last: 4 x 192
    vis.threads = 4;
    const step_time_model four{vis, model_preset("tiny-llama"), nullptr};
    ubatch_work_collector col4(ctx, four);
    llama_batch_in h;
    h.add(301, {0});
    REQUIRE(ctx.decode(h, &col4) == DECODE_OK);
    CHECK(col4.work[0][0].split_kv_visible == 4 * 192);
    // not the split path: 2 tokens (one row each per head, the rows shared), one thread, an n_kv profile
    ubatch_work_collector col2(ctx, two);
    llama_batch_in two_tokens;
    two_tokens.add(302, {0});
    two_tokens.add(300, {1});
    REQUIRE(ctx.decode(two_tokens, &col2) == DECODE_OK);
    CHECK(col2.work[0][0].split_kv_visible == -1);
    vis.threads = 1;
    ubatch_work_collector col1(ctx, step_time_model{vis, model_preset("tiny-llama"), nullptr});
    llama_batch_in one;
    one.add(303, {0});
    REQUIRE(ctx.decode(one, &col1) == DECODE_OK);
    CHECK(col1.work[0][0].split_kv_visible == -1);
    CHECK(col1.work[0][0].visible == 304);
}

TEST_CASE("ubatch_split_kv_visible: a stream holding one sequence alone takes no walk, and gives the walk's count") {
    // cells 0-599 of sequence 0, then its token 600: n_kv 768, 2 threads: chunks 0-383 (384 cells) and 384-767 (217)
    context_params cp;
    cp.n_ctx = 1024;
    context ctx(model_preset("tiny-llama"), cp);
    device_profile vis = device_preset("cpu");
    vis.attention_cells = "visible";
    vis.threads = 2;
    ubatch_work_collector col(ctx, step_time_model{vis, model_preset("tiny-llama"), nullptr});
    llama_batch_in b;
    for (int i = 0; i < 600; ++i) b.add(i, {0});
    REQUIRE(ctx.decode(b, &col) == DECODE_OK);
    col.work.clear();
    llama_batch_in g;
    g.add(600, {0});
    REQUIRE(ctx.decode(g, &col) == DECODE_OK);
    CHECK(col.work[0][0].n_kv == 768);
    CHECK(col.work[0][0].split_kv_visible == 2 * 384);
}
