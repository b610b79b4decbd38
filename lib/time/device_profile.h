// A device profile: the numbers the step-time model (time/step_time.h) turns work into seconds
// with. Data, not constants: shipped profiles are embedded JSON (GPU profiles fitted on published llama-bench results or
// derived from one, lib/time/shipped_profiles.json; the datasheet rooflines h200-datasheet, h100-datasheet,
// a100-datasheet as upper bounds; a cpu estimate), a user's own profile is a JSON file (--device FILE), `kvsim
// calibrate` writes fitted ones. Format and units: docs/time-model.md.
#pragma once

#include "core/ggml_type.h"
#include "model/model.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvsim {

struct device_profile {
    // A profile file's defaults for a field it omits: the H200 datasheet.
    std::string name = "h200-datasheet";
    double bandwidth_gbs = 4800.0;      // memory bandwidth, GB/s (1e9 bytes/s)
    double peak_tflops = 989.0;         // dense compute peak, TFLOP/s
    std::string source = "datasheet";   // provenance in words: datasheet, calibrated from ..., derived from ..., host, file
    int threads = 0;                    // threads the numbers hold for (0 = not stated)
    // Device memory in MiB, as nvidia-smi reports the card's total (0 = unknown): what llama-server's --fit
    // sizes an unset context against (replay/server_sizing.h).
    uint64_t memory_mib = 0;
    // Achieved fraction of bandwidth_gbs when reading the weights (1 = the datasheet).
    double weight_read_fraction = 1.0;
    // The same per GGUF file type (--weights name: "f16", "q4_K_M", ...), where a fit across several models could tell
    // them apart; a type not listed reads at weight_read_fraction. On the H200 llama.cpp's matrix-vector kernels read F16
    // weights at 4.2 TB/s and Q4_K_M ones at 1.8 (bound by their dequantization: docs/benchmarks.md "The H200 measured").
    // A profile with these prices a one-token ubatch by its reads alone (its GEMM term is what the rate per type says).
    std::map<std::string, double, std::less<>> weight_read_fraction_by_type{};
    // Achieved fraction of peak_tflops in the weight GEMMs, by tokens per ubatch: (tokens, fraction)
    // points, ascending; between points linear in log2(tokens), outside them the nearest point.
    std::vector<std::pair<double, double>> gemm_fraction = {{1.0, 1.0}};
    // GEMMs of float weights (f32/f16/bf16) reach gemm_fraction times this: on CUDA they run through cuBLAS, quantized
    // ones through llama.cpp's own kernels (mmq), about 1.3x slower per FLOP on the published cards (docs/benchmarks.md).
    double float_gemm_speedup = 1.0;
    double ubatch_overhead_s = 0;       // fixed seconds per ubatch (graph build, launch, sync)
    // CPU: ggml-cpu repacks quantized weights (q4_0 as q4_0x8 ...) and multiplies `repack_rows` tokens per gemm, the
    // rest one gemv each (step_time.h: repack_extra_passes); each extra pass costs extra_pass_s_per_byte per weight
    // byte. 0 = no repacking (GPU profiles).
    int repack_rows = 0;
    double extra_pass_s_per_byte = 0;
    // Seconds per parameter per row of the matrices ggml-cpu does not repack, where they multiply several rows while the
    // repacked ones make gemv passes (step_time.h: unpacked_row_params). 0 = not modelled (GPU profiles).
    double unpacked_s_per_param_row = 0;
    // GB/s of the copies between the device's K/V and host memory that llama-server's RAM prompt cache and context
    // checkpoints make (llama_state_seq_get_data / set_data: save and restore); 0 = not modelled (they take no time).
    double host_link_gbs = 0;
    // Seconds per rotation angle the K-shift computes (step_time.h: ubatch_terms::k_shift_thetas: cells x layers x
    // head_dim / 2). llama.cpp ropes every cell of the cache, used or not, inside the llama_decode after a context
    // shift's seq_add: at 8192 cells 80 ms on one Zen 4 core for Qwen2.5-0.5B, 3.5x its decode step
    // (docs/time-model.md). 0 = not modelled (the GPU profiles: nothing measured there).
    double k_shift_s_per_theta = 0;
    double layer_overhead_s = 0;        // fixed seconds per layer per ubatch
    // more fixed seconds per layer of a ubatch of two tokens or more (the GEMM kernels': llama.cpp's CUDA build takes
    // a matrix-vector kernel for one token and GEMMs from a few; a small model's GEMMs are far below the peak, e.g.
    // Qwen2.5-0.5B's 512-token prompts on the H200 at a seventh of the 8B's FLOP rate: docs/benchmarks.md)
    double gemm_layer_overhead_s = 0;
    // A CUDA card's streaming multiprocessors. With them the GEMM term counts the layer matrices of a ubatch of more than 8
    // tokens in whole waves of output tiles (step_time.h: gemm_wave_factor), as a small model's GEMMs leave most of a
    // large card idle, and the K/V of the ubatches CUDA's MMA flash-attention kernel takes are the tiled term's
    // (step_time.h: cuda_fa_takes_mma). 0 = neither (CPU profiles, the datasheet rooflines, files from before it).
    int n_sm = 0;   // 0 .. k_max_n_sm
    // Extra seconds per byte of float weights (f32/f16/bf16) that a CUDA ubatch of 2 or more tokens reads: llama.cpp
    // takes its vector kernel for one token only and, from 2 tokens, mmf (up to 16) and cuBLAS (ggml-cuda.cu:
    // ggml_cuda_mul_mat; mmvf.cu: ggml_cuda_should_use_mmvf, "ne11 == 1" on Ampere and later), which read F16 weights
    // slower: the H200's Llama-3.1-8B F16 pp1 4.8 ms, pp2-pp64 6.8-7.8 ms (docs/benchmarks.md). Added to the weight type's
    // read price for such ubatches when memory-bound (step_time.h: ubatch_terms::float_multi_row); 0 = the same price.
    double float_gemm_extra_s_per_byte = 0;
    // Attention: "roofline" (K/V bytes join the weights' bytes, attention FLOPs the dense FLOPs,
    // inside the max) or "linear": kv_bytes * attn_s_per_kv_byte + attn_flops * attn_s_per_flop,
    // added to the dense time (what kvsim calibrate fits).
    std::string attention = "roofline";
    // The cells attention is charged for: "n_kv" (every cell up to n_kv, per stream: what a GPU
    // kernel reads) or "visible" (per token, the cells of its own sequence it sees: ggml's CPU
    // flash attention skips masked cells; step_time.h: ubatch_visible_cells).
    std::string attention_cells = "n_kv";
    double attn_s_per_kv_byte = 0;
    double attn_s_per_flop = 0;
    // "visible" only: seconds per cell the CPU kernel walks past testing the mask (step_time.h: scanned_cells)
    double attn_s_per_scanned_cell = 0;
    // Seconds per K/V byte of the attention kernel that takes query rows in tiles (step_time.h: tiled_kv_bytes): "visible",
    // the visible cells in ggml-cpu's tiled flash-attention path (ubatches of 64 tokens and more); "n_kv", CUDA's MMA
    // flash-attention kernel (step_time.h: cuda_fa_takes_mma). 0 = priced as the one-row kernel's (attn_s_per_kv_byte).
    double attn_tiled_s_per_kv_byte = 0;
    // What a fitted profile was calibrated on (its "calibration" object, written by kvsim calibrate):
    // the model preset and the weight types; empty for a datasheet or host profile.
    std::vector<std::string> calibrated_models{};   // calibration.model: "a + b" for a fit across several models
    std::vector<std::string> calibrated_weights{};
    // The K/V cache types of its calibration runs as "type_k/type_v" ("f16/f16"); empty when not recorded.
    std::vector<std::string> calibrated_kv{};
    // How far its times are known to be from llama.cpp's: calibration.held_out, the error kvsim calibrate measured on
    // results each left out of its own fit (median < 0: none recorded).
    struct held_out_error {
        std::string method;
        size_t results = 0;
        double median_abs = -1, max_abs = -1;
    } held_out{};
    // calibration.several_sequences: the error on results of several sequences in one cache (llama-batched-bench
    // -kvu: llama-server's -np steps), predicted by the fit (median < 0: none recorded)
    struct several_sequences_error {
        double median_abs = -1, max_abs = -1;
    } several_sequences{};
    std::string derived_from{};   // calibration.derived_from: a card whose fit this profile reuses (not validated here)
    bool overridden = false;      // --bandwidth-gbs / --tflops replaced a number the provenance vouches for

    bool attention_linear() const { return attention == "linear"; }
    // The weight-read fraction of weights of file type `name` (weight_read_fraction_by_type, else weight_read_fraction).
    double read_fraction(std::string_view name) const;
    double gemm_fraction_at(double tokens) const;
};

// What is known of the accuracy of this profile's simulated times, one sentence for the terminal and the report,
// and the same as JSON (summary.json's "time_accuracy").
std::string time_accuracy_note(const device_profile & d);
nlohmann::json time_accuracy_json(const device_profile & d);

// Why this profile's simulated times may not hold for a replay, one sentence each: a calibration on
// another model shape, on other weight types or on other K/V cache types (kv: the replay's "type_k/type_v" pairs,
// several for a plan's grid), and -fa off (not modelled: the times are flash
// attention's). Empty when none applies.
std::vector<std::string> profile_warnings(const device_profile & d, const model_shape & m, const std::string & weights,
                                          const std::vector<std::string> & kv, bool flash_attn);
// "type_k/type_v", as a profile's calibration.kv records a K/V cache type pair.
std::string kv_types_name(ggml_type type_k, ggml_type type_v);

// A shipped profile by name (device_preset_names()). Throws std::invalid_argument listing them.
device_profile device_preset(const std::string & name);
std::vector<std::string> device_preset_names();
// The shipped profiles of one kind: fitted on (or derived from) published llama-bench results, or the datasheet
// rooflines and the cpu estimate.
std::vector<std::string> device_preset_names(bool calibrated);
// The embedded JSON text of a shipped profile (the same text docs/time-model.md shows).
const std::string & device_preset_json(const std::string & name);

// The range parse_device_profile accepts for bandwidth_gbs and peak_tflops (and replay's
// --bandwidth-gbs / --tflops): 10 MB/s .. 1 PB/s, 1 MFLOP/s .. 1 EFLOP/s.
inline constexpr double k_min_bandwidth_gbs = 0.01, k_max_bandwidth_gbs = 1e6;
inline constexpr double k_min_peak_tflops = 1e-6, k_max_peak_tflops = 1e6;
// The most streaming multiprocessors a profile may name: the largest cards have 132-148 (H100/H200 SXM, B200); far more
// would make every GEMM a few huge, nearly empty waves (gemm_wave_factor) rather than describe a card.
inline constexpr double k_max_n_sm = 1024;

// Parse a profile; `where` names the file in errors. Throws input_error(where, 0, value, why)
// naming the field for a missing or mistyped field, a non-positive bandwidth / peak / fraction,
// a negative cost, a number outside its range (fractions <= 10, overheads <= 1 s, threads a
// whole number), gemm_fraction points out of order; unknown fields are refused (a typo would
// otherwise silently keep a default).
device_profile parse_device_profile(const nlohmann::json & j, const std::string & where);
// Throws input_error(where, 0, name, why) for a name parse_device_profile would refuse (control characters): calibrate
// checks its --name so before the fit.
void check_profile_name(const std::string & name, const std::string & where);
// Read a JSON file; input_error for a file that cannot be read or is not JSON.
device_profile load_device_profile(const std::string & path);
nlohmann::json device_profile_json(const device_profile & d);

}  // namespace kvsim
