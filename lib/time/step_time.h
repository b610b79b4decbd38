// Simulated time of a llama_decode step, per ubatch, from the model's weights (time/weight_types.h:
// bytes per tensor group for the GGUF file type), the ubatch's placement (tokens, n_kv, streams)
// and a device profile (time/device_profile.h). Formula and units: docs/time-model.md.
// Measured attention kernel times can replace the attention part (measured_s_per_kv_byte). A
// replay computes each call's time once, in the step timer (time/step_timer.h).
#pragma once

#include "kv/context.h"
#include "model/model.h"
#include "time/device_profile.h"
#include "time/weight_types.h"

#include <optional>
#include <string>
#include <vector>

namespace kvsim {

// Work of one ubatch in one cache, as placed.
struct ubatch_work {
    uint32_t n_tokens = 0;
    uint32_t n_kv = 0;        // cells read per stream
    uint32_t n_stream = 1;    // streams the ubatch spans
    uint32_t n_layer = 0;     // layers backed by this cache
    size_t bytes_per_cell_layer = 0;
    uint32_t n_outputs = 0;   // rows the output matrix computes (logits); 0 = unknown: n_tokens
    double visible = 0;       // sum over the ubatch's tokens of the cells each one sees (ubatch_visible_cells)
    double tiled_cells = -1;  // rows x cells ggml's tiled path computes per head (ubatch_tiled_cells); < 0: not that path
    double split_kv_visible = -1;   // one token over its KV split among threads: the cells charged (ubatch_split_kv_visible); < 0: not split
    bool kv_quantized = false;      // K or V of a quantized type (q8_0, q4_0, ...): CUDA's kernel choice depends on it
    // Cells of this cache the K-shift rotated before this ubatch: kv_size * n_stream on the first ubatch of a decode whose
    // memory update applied one (llama_kv_cache::update, build_graph_shift: a rope over every cell of every layer, used
    // or not, after a seq_add, the context shift's); 0 otherwise
    double k_shift_cells = 0;
};

// Whether llama.cpp's CUDA build runs a ubatch's flash attention on its MMA kernel (query rows in tiles) rather than the
// vector kernel, on a card of compute capability 8.9 or more (Ada, Hopper: the cards whose profiles price the two apart),
// as fattn.cu: ggml_cuda_get_best_fattn_kernel decides from Q's shape (head_dim, rows_per_stream = Q->ne[1], n_stream =
// Q->ne[3]), the GQA ratio, K's cells (n_kv = K->ne[1]) and the K/V types. f16 K/V: the vector kernel for one row in one
// stream (unless GQA > 4 over 8192 cells or more), else MMA; quantized: the vector kernel up to two rows; and the vector
// kernel for one row whenever the GQA optimisation does not apply (no GQA, n_kv not a multiple of 256). The sparse gather
// (head sizes of 256 and more with GQA > 4) is not modelled: no preset has it.
bool cuda_fa_takes_mma(const model_shape & m, bool kv_quantized, uint32_t rows_per_stream, uint32_t n_stream, uint32_t n_kv);

// ggml-cpu's repacked quantized matmul (ggml-cpu/repack.cpp: forward_mul_mat_one_chunk) takes the ubatch's tokens
// `rows` at a time through one gemm and each of the n % rows left over through its own gemv, each pass reading the
// weights: the passes beyond one. 0 when rows is 0 (no repacking).
double repack_extra_passes(double n_tokens, int rows);

// Sum over the ubatch's tokens of the cells of their sequence each one attends to (causal, and
// within the window on a standard-SWA cache), assuming the tokens are their sequences' newest
// positions (llama-server, llama-bench): a sequence holding N cells after the placement, with n
// tokens in the ubatch, gives N + (N - 1) + ... + (N - n + 1). ggml's CPU flash attention skips
// masked cells (ggml-cpu/ops.cpp: ggml_compute_forward_flash_attn_ext_f16_one_chunk), so this,
// not n_kv, is its work in a cache shared by several sequences. O(n_tokens).
double ubatch_visible_cells(const kv_cache & c, const ubatch & ub);

// ggml's tiled CPU flash attention (ggml-cpu/ops.cpp: ggml_compute_forward_flash_attn_ext_tiled), which
// ggml_compute_forward_flash_attn_ext_f16 runs with flash attention on, K and V of one type, f16 or f32, and 64
// (GGML_FA_TILE_Q) or more query tokens per stream: it cuts the query rows (tokens x heads x streams) into 4 chunks per
// thread, walks each chunk in Q tiles of up to 64 consecutive tokens of one head, and computes a whole 64 x 64 tile
// (GGML_FA_TILE_KV cells) unless every cell of it is masked for every row of the Q tile. A Q tile of fewer rows (the
// end of a head's tokens or of a chunk) costs as much as a full one: its rows are padded. This returns the rows x cells
// computed, 64 x 64 per tile, per head (summed over the heads' tiles / n_head), or -1 when ggml takes the one-row path.
// A Q tile holding tokens of several sequences, or cells of one sequence spread among others', computes more than the
// visible cells. O(n_kv x sequences + distinct Q tiles x K/V tiles x sequences).
double ubatch_tiled_cells(const kv_cache & c, const ubatch & ub, uint32_t n_kv, const context_params & p, uint32_t n_head,
                          int n_threads);

// ggml's split-KV CPU flash attention (ggml-cpu/ops.cpp: ggml_compute_forward_flash_attn_ext_f16, use_split_kv_path):
// a ubatch of one token in one stream over n_kv >= 512 cells of an f16 or f32 cache (K and V of one type) is cut into
// n_threads chunks of ceil(n_kv / n_threads) cells, each chunk's every head on its own thread, and the op waits for the
// busiest thread. The token's cells (its sequence's, causal, within the window on a standard-SWA cache) crowd into
// the chunks that hold them: this returns n_threads x the most of them in one chunk (the visible cells a balanced
// split would take that long for), or -1 when the path is not taken (then the rows of query heads are shared among
// the threads, and the visible cells are the work). O(1) when the stream holds the token's sequence alone in cells
// [0, used) (llama-bench, one slot), O(n_kv) otherwise.
double ubatch_split_kv_visible(const kv_cache & c, const ubatch & ub, uint32_t n_kv, const context_params & p, int n_threads);

// How many times the FLOPs of one layer's weight matrices (Q, K, V, output projection; FFN up, gate, down) their GEMMs
// take on a card of n_sm streaming multiprocessors when each matrix is computed in whole waves of output tiles of 128
// rows by up to 128 tokens: a tile is a multiprocessor's work (ggml-cuda/mmq-config-ampere.cuh: I = 128, J <= 128, one
// block per multiprocessor), and a wave left partly empty costs a full one. A small model's matrices fill a fraction of
// a large card: Qwen2.5-0.5B's 896-row projections make 28 tiles of a 512-token ubatch for the H200's 132 SMs. >= 1;
// 1 for n_sm 0, up to 8 tokens (the matrix-vector kernels: mmvq.cuh MMVQ_MAX_BATCH_SIZE, mmvf.cuh MMVF_MAX_BATCH_SIZE)
// or a shape without dimensions (n_embd 0).
double gemm_wave_factor(const model_shape & m, double n_tokens, int n_sm);

// The dense and attention quantities of one ubatch (all caches), before a device turns them into time.
struct ubatch_terms {
    double n_tokens = 0;
    double weight_bytes = 0;   // weights read (time/weight_types.h: read_per_ubatch)
    double dense_flops = 0;    // 2 * dense_params * n_tokens + 2 * output_params * n_outputs (but see gemv_output_bytes)
    // The output matrix multiplies the rows that want logits only (llama.cpp's build_inp_out_ids), and on a CPU that row
    // count picks its kernel: one row goes through ggml_vec_dot, as in a one-token step, two or more through tinyBLAS
    // (ggml-cpu.c ggml_compute_forward_mul_mat: llamafile_sgemm returns false for one row) like the layers' matrices.
    // So on a CPU (device n_sm 0) a ubatch of two tokens or more with one output row (a prompt's last token) holds that
    // row's bytes and FLOPs here, priced as a one-token step prices them (the larger of the reads at the weight-read
    // rate and the FLOPs at the GEMM rate of one token) beside the layers' GEMM, and neither in dense_flops nor in
    // weight_bytes. A one-token ubatch, several output rows and a CUDA card: 0.
    double gemv_output_bytes = 0;
    double gemv_output_flops = 0;
    double kv_bytes = 0;       // K/V read: n_kv * n_stream * bytes_per_cell_layer * n_layer, all caches
    double attn_flops = 0;     // 4 * n_tokens * n_kv * n_head * head_dim * n_layer, all caches
    // (device attention_cells "visible": ubatches of fewer than 64 tokens only, visible * bytes_per_cell_layer * n_layer
    //  and 4 * visible * n_head * head_dim * n_layer instead; larger ones in tiled_kv_bytes / tiled_attn_flops)
    // Weight bytes read again by the repacked matmul's one-row passes (device repack_rows > 0 and quantized weights):
    // weight_bytes * repack_extra_passes(n_tokens); 0 otherwise
    double extra_pass_bytes = 0;
    bool gemv_only = false;    // repacked weights and fewer tokens than a gemm takes: one-row passes, memory-bound
    // float weights on a CUDA card (device n_sm > 0) and 2 or more tokens: read by mmf / cuBLAS, not the vector kernel
    // (device_profile::float_gemm_extra_s_per_byte)
    bool float_multi_row = false;
    // Cells the attention walks testing the mask (device attn_s_per_scanned_cell > 0 or a fit: ggml's CPU flash attention
    // for fewer than 64 query rows visits every cell up to n_kv of its stream per row and head, computing only the
    // unmasked ones; from 64 rows its tiled path converts every KV tile's mask values before it skips a tile whose values
    // are all -inf): n_tokens * n_kv * n_head * n_layer, all caches
    double scanned_cells = 0;
    // Parameters times rows of the matrices ggml-cpu does not repack (device repack_rows > 0, quantized weights;
    // weight_bytes::packed_bytes says which): the output's, times its output rows when they are two or more, and the
    // layers' unpacked ones, times the tokens when 2 <= n_tokens < repack_rows (the packed ones then make gemv passes;
    // from repack_rows tokens all of them are in the GEMM term); weights of which nothing is repacked (q8_0 on x86): the
    // output's rows alone. One row is a gemv (gemv_output_bytes, or weight_bytes for a one-token ubatch); several go
    // through tinyBLAS (ggml-cpu/llamafile/sgemm.cpp), compute-bound on a CPU: measured 5.5 ms for one row, 25 ms for
    // two, 37 ms for four (qwen2.5-0.5b's tied q8_0 output, 136 M parameters, Zen 5, one thread: docs/benchmarks.md).
    // Their FLOPs leave dense_flops.
    double unpacked_row_params = 0;
    // The K/V bytes of the attention kernel that takes query rows in tiles, priced by attn_tiled_s_per_kv_byte:
    // - (device attention_cells "visible") ubatches of 64 tokens and more: ggml's CPU flash attention takes its tiled path
    //   (ggml_compute_forward_flash_attn_ext_tiled: a GEMM per Q tile and K/V tile, tiles masked for every row skipped),
    //   whose cost per cell differs from the one-row path's: tiled_cells * bytes_per_cell_layer * n_layer, all caches;
    //   kv_bytes and attn_flops then hold the one-row path's ubatches only;
    // - (a CUDA card: device n_sm > 0) ubatches of two or more query rows per stream that CUDA runs on its MMA
    //   flash-attention kernel (cuda_fa_takes_mma), their n_kv * n_stream * bytes_per_cell_layer * n_layer here instead of
    //   in kv_bytes (their FLOPs stay in attn_flops). On the H200 the vector kernel reads a decode's K/V at about 2.4
    //   TB/s, the MMA kernel a 4-token prompt's at about 0.6 (docs/benchmarks.md).
    double tiled_kv_bytes = 0;
    double tiled_attn_flops = 0;   // 4 * tiled_cells * n_head * head_dim * n_layer of those ubatches (a roofline adds them)
    // Rotation angles the K-shift before this ubatch computed: k_shift_cells * n_layer * head_dim / 2, all caches (priced
    // by device k_shift_s_per_theta). ggml-cpu's rope computes a cos/sin pair per cell, layer and pair of rotated
    // dimensions (ggml-cpu/ops.cpp: ggml_rope_cache_init, shared by the cell's KV heads) and then rotates each head's
    // values; the angles are the cost: on one Zen 4 core 12.7-13.5 ns each for Qwen2.5-0.5B (2 KV heads) and
    // Llama-3.2-1B (8) alike, at 2048 and 8192 cells (docs/time-model.md)
    double k_shift_thetas = 0;
};

// t with the tiled path's bytes and FLOPs moved into kv_bytes / attn_flops: how a linear profile without a tiled price
// (attn_tiled_s_per_kv_byte 0: a file from before it, or a fit that could not separate it) prices those cells, as the
// one-row path's. step_time_model::seconds_of and calibrate's fit both go through it.
ubatch_terms tiled_as_one_row(ubatch_terms t);

struct step_time_model {
    device_profile device;
    model_shape model;
    const weight_file_type * weights = nullptr;   // GGUF file type; nullptr = f16
    // When > 0, the attention part of a ubatch is this many seconds per K/V byte read (fitted
    // from measured kernel times), added to the dense part, instead of the device's terms.
    double measured_s_per_kv_byte = 0;

    // Seconds of one ubatch (one entry per cache; the weights are read once per ubatch):
    //   max(weight_bytes / (bandwidth * weight_read_fraction), dense_flops / (peak * gemm_fraction(n_tokens)))
    //   + attention + ubatch_overhead_s + n_layer * layer_overhead_s
    // attention: kv_bytes * attn_s_per_kv_byte + attn_flops * attn_s_per_flop when the device
    // has those terms; else (roofline) K/V bytes join the weight bytes and attention FLOPs the
    // dense FLOPs inside the max.
    double ubatch_seconds(const std::vector<ubatch_work> & per_cache) const;
    ubatch_terms terms(const std::vector<ubatch_work> & per_cache) const;
    // ubatch_seconds from the terms (the calibration evaluates fitted profiles through this).
    double seconds_of(const ubatch_terms & t) const;
    // A copy of `bytes` of K/V state between the device and host memory (a RAM-cache or checkpoint save or restore).
    double host_copy_seconds(double bytes) const {
        return device.host_link_gbs > 0 ? bytes / (device.host_link_gbs * 1e9) : 0.0;
    }
    // The attention part alone (K/V bytes over bandwidth vs attention FLOPs over peak).
    double attention_seconds(const ubatch_work & w) const;
    const weight_bytes & weight_sizes() const;
    std::string weights_name() const { return weights ? weights->name : "f16"; }
    bool charges_visible() const { return device.attention_cells == "visible"; }
    std::string describe() const;

    // Cache of weight_sizes() (public only so the struct stays an aggregate: {device, model, weights});
    // model and weights must not change after the first call.
    mutable std::optional<weight_bytes> weights_cache_{};
};

// Collects the ubatch_work of each placement of a decode call (decode_observer::on_apply; one
// inner vector per ubatch, one entry per cache), for the step-time model, and forwards every
// event to `next` (may be null). n_outputs is the ubatch's distinct sequences (one logits row per
// sequence: llama-bench's and llama-server's prompt chunks and generated tokens).
class ubatch_work_collector : public decode_observer {
public:
    // Only a model charging the visible cells (step_time_model::charges_visible) prices ubatch_tiled_cells and
    // ubatch_split_kv_visible (O(n_kv) per ubatch of 64 tokens and more, per one-token ubatch of a profile for several
    // threads): they are counted for such a model only.
    ubatch_work_collector(const context & ctx, const step_time_model & tm, decode_observer * next = nullptr);
    void on_update(const kv_memory & mem) override;
    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override;
    void on_restore(const kv_cache & c, const slot_info & sinfo, const ubatch & ub) override;
    std::vector<std::vector<ubatch_work>> work;
    decode_observer * next;

private:
    const kv_cache * first_cache_;
    size_t bytes_ = 0;
    // caches whose K-shift the memory update of the running decode applied, with their cells (on_update); the first
    // ubatch placed in each carries them (ubatch_work::k_shift_cells)
    std::vector<std::pair<const kv_cache *, double>> k_shift_;
    uint32_t n_swa_layers_ = 0, n_layer_ = 0;
    bool iswa_ = false;
    bool tiled_ = false;
    int threads_ = 0;         // the profile's threads when it charges the visible cells: ggml's row chunks of the tiled
                              // path (ubatch_tiled_cells) and, above 1, its split-KV path (ubatch_split_kv_visible)
    uint32_t n_head_ = 0;
    bool kv_quantized_ = false;   // the context's K or V type is quantized (ubatch_work::kv_quantized)
    context_params params_;
};

}  // namespace kvsim
