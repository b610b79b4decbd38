// kvsim calibrate: fit a device profile's free terms to llama-bench results (`llama-bench -o json`)
// of one model on one machine. Each result is replayed through kvsim's own KV cache exactly as
// llama-bench drives llama.cpp (tools/llama-bench/llama-bench.cpp: n_ctx = n_prompt + n_gen +
// n_depth, one sequence, the depth prompt first (untimed), then the timed prompt in n_batch chunks
// (test_prompt) and n_gen one-token decodes (test_gen)), which gives every timed ubatch's weights,
// FLOPs, K/V bytes and attention FLOPs; the terms are then fitted by least squares on relative
// error. Method and limits: docs/time-model.md.
#pragma once

#include "model/model.h"
#include "time/device_profile.h"
#include "time/step_time.h"
#include "time/weight_types.h"

#include <ostream>
#include <string>
#include <vector>

namespace kvsim {

// One llama-bench result row (one object of the JSON array).
struct llama_bench_row {
    std::string file;
    size_t index = 0;             // 0-based position in the file's array
    long line = 0;                // a markdown table's row: its line (errors name it); 0 for JSON
    std::string model_type;       // llama_model_desc: "<arch> <size> <ftype name>"
    double model_size = 0;        // bytes (llama_model_size)
    double model_n_params = 0;
    uint32_t n_batch = 0, n_ubatch = 0;
    int n_threads = 0;
    std::string type_k, type_v;
    int flash_attn = -1;          // -1 auto, 0 off, 1 on
    uint32_t n_prompt = 0, n_gen = 0, n_depth = 0;
    // kvsim's extension for llama-batched-bench results (scripts/time-validation/batched_to_bench.py writes them):
    // n_seq sequences at once, each with n_depth untimed then n_prompt timed prompt tokens (one batch of them all), or
    // n_gen steps of one token per sequence; kv_unified: one cache stream for them (-kvu); n_ctx: its -c (0: just fits)
    uint32_t n_seq = 1;
    // n_seq_gen: the sequences that take the n_gen steps, the first ones (0: all n_seq); the others only hold their
    // cells, so a step reads the same visible cells beside more scanned ones (ggml's CPU kernel skips masked cells)
    uint32_t n_seq_gen = 0;
    uint32_t seqs_generating() const { return n_seq_gen ? n_seq_gen : n_seq; }
    bool kv_unified = true;
    uint32_t n_ctx = 0;
    // k_shift: before each of the n_gen steps the sequence's oldest cell is removed and the others shifted down one
    // position (llama_memory_seq_rm + seq_add: a context shift of n_keep 0, n_discard 1), so every timed llama_decode
    // first ropes the whole cache (scripts/time-validation/kshift_steps.py measures such steps)
    bool k_shift = false;
    double avg_s = 0, stddev_s = 0;
    // llama-bench's build_commit (a markdown table: its "build: <commit> (<number>)" line) and the device it ran on
    // (gpu_info, else cpu_info; a markdown file: its "Device 0: <name>," line); empty when the file does not say
    std::string build, device;
    // "pp512", "tg128", "pp512+tg128", with " @ d<depth>", " x<n_seq>", " (<n_seq_gen> decoding)", " after K-shifts"
    std::string test_name() const;
};

// Reads `llama-bench -o json` output (also accepts JSON lines, -o jsonl, and llama-bench's default
// markdown table: time/llama_bench_markdown.h). Throws input_error
// naming the file, the entry and the field for a file that cannot be read, is not JSON, is not
// an array of objects, or lacks / mistypes a field the fit needs.
std::vector<llama_bench_row> read_llama_bench(const std::string & path);

// The file type of a point: from model_type's ftype name; checked against `given` (--weights)
// when not null. Throws input_error naming the file and field model_type.
const weight_file_type & bench_weight_type(const llama_bench_row & p, const weight_file_type * given);

// Checks that the point's model_n_params (within 2 %) and model_size (within 3 %) are those of
// `m` in file type `ft`; throws input_error naming the file and the field otherwise.
void check_bench_model(const llama_bench_row & p, const model_shape & m, const weight_file_type & ft);
// The model of a point: the first of `models` that check_bench_model accepts (one model: check_bench_model's error);
// throws input_error naming the file, the row and model_n_params when none does. llama-bench's model_type ("llama 8B
// Q4_K - Medium") names no preset, so the parameters and the file size decide (llama-3-8b and llama-3.1-8b are one shape).
const model_shape & bench_model(const llama_bench_row & p, const weight_file_type & ft, const std::vector<model_shape> & models);

// The timed ubatches of one point: terms per ubatch (step_time_model::terms). Throws input_error
// for a cache type kvsim does not model.
std::vector<ubatch_terms> bench_row_ubatches(const llama_bench_row & p, const step_time_model & tm);

struct calibration_point {
    llama_bench_row bench;
    double predicted_s = 0;
    double error() const { return (predicted_s - bench.avg_s) / bench.avg_s; }   // relative
};

struct calibration_result {
    device_profile profile;
    std::vector<const weight_file_type *> weights;   // the results' weight types, each once, in order of first use
    std::vector<std::string> models;                 // the results' models, each once, in order of first use
    std::vector<calibration_point> points;
    std::vector<std::string> notes;   // terms that could not be fitted and were fixed
    std::string weights_text() const;   // "q4_K_M" or "q4_K_M + f16"
    std::string models_text() const;    // "llama-3.1-8b" or "llama-3.1-8b + llama-3.2-1b"
    bool in_sample = false;             // the points are the fit's own (calibrate), not held out (predict_bench)
};

// Fits weight_read_fraction, a gemm_fraction per ubatch size that has compute-bound ubatches,
// ubatch_overhead_s, attn_s_per_kv_byte and attn_s_per_flop on top of `base` (its bandwidth and
// peak stay: the fractions are relative to them); a term the results cannot separate is fixed at 0 and named in notes.
// Each result's model is the first of `models` it matches (bench_model). Results of several weight types of one model
// fit together: one weight-read fraction for all, so the per-ubatch cost that does not scale with bytes becomes
// separable (a fit on one type cannot tell it from the weight reads); the base's ratios between types
// (weight_read_fraction_by_type) are kept, scaled. Results of models of several layer counts fit layer_overhead_s
// (one layer count: kept from the base) and a read fraction per weight type (weight_read_fraction_by_type; the
// fraction for other types their median). `weights` (--weights), when given, must be every result's type. With
// fewer results than free terms (a published pp512 + tg128 pair) the per-type rates, the per-layer and per-ubatch
// costs, then the attention terms (and, when both, the attention model) are kept from `base`, each named in notes.
// Throws input_error (file, field) for inconsistent input and usage_error when there are fewer
// points than free terms or the points cannot separate them.
calibration_result calibrate(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                             const weight_file_type * weights, const device_profile & base);
inline calibration_result calibrate(const std::vector<llama_bench_row> & points, const model_shape & m, const weight_file_type * weights,
                                    const device_profile & base) {
    return calibrate(points, std::vector<model_shape>{m}, weights, base);
}

// No fit: each result's time predicted by `profile` (held-out points, or a shipped profile against
// published llama-bench numbers). Same checks of the input as calibrate.
calibration_result predict_bench(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                                 const weight_file_type * weights, const device_profile & profile);
inline calibration_result predict_bench(const std::vector<llama_bench_row> & points, const model_shape & m,
                                        const weight_file_type * weights, const device_profile & profile) {
    return predict_bench(points, std::vector<model_shape>{m}, weights, profile);
}

// Held-out accuracy of a fit: each result predicted by the profile fitted on all the others (leave-one-out), or,
// past k_max_leave_one_out results, on the other 9 of 10 folds (result i in fold i % 10): one fit per result would
// cost results^2. Relative errors in the results' order; a result whose fold's removal leaves the others unable to
// fit is skipped.
inline constexpr size_t k_max_leave_one_out = 200;
struct held_out_errors {
    std::string method;   // "leave-one-out" or "10-fold": calibration.held_out.method of the profile
    std::vector<double> errs;
};
held_out_errors held_out_fit(const std::vector<llama_bench_row> & points, const std::vector<model_shape> & models,
                             const weight_file_type * weights, const device_profile & base);
inline held_out_errors held_out_fit(const std::vector<llama_bench_row> & points, const model_shape & m, const weight_file_type * weights,
                                    const device_profile & base) {
    return held_out_fit(points, std::vector<model_shape>{m}, weights, base);
}

// "held out (leave-one-out ...): |error| median ..., p90 ..., max ... over K of N results".
std::string held_out_line(const held_out_errors & h, size_t n_results);
// The q-quantile (0..1) of |errs|, linear between ranks; 0 for none. What held_out_line prints and what a profile's
// calibration.held_out records (one definition: the file had said 12.9 % where the terminal said 6.6 %).
double abs_error_quantile(const std::vector<double> & errs, double q);

// The residual table and summary (median / p90 / max absolute error).
void print_calibration(std::ostream & out, const calibration_result & r);

}  // namespace kvsim
