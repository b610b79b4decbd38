#include "time/step_time.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <fmt/format.h>
#include <map>
#include <stdexcept>
#include <tuple>

namespace kvsim {

static double attn_flops(const model_shape & m, const ubatch_work & w) {
    return 4.0 * w.n_tokens * (double) w.n_kv * m.n_head * m.head_dim * w.n_layer;
}

static double kv_bytes(const ubatch_work & w) {
    return (double) w.n_kv * w.n_stream * w.bytes_per_cell_layer * w.n_layer;
}

double repack_extra_passes(double n_tokens, int rows) {
    if (rows <= 0 || n_tokens < 1) return 0;
    const double n = std::floor(n_tokens), gemm = std::floor(n / rows) > 0 ? 1 : 0, gemv = std::fmod(n, rows);
    return gemm + gemv - 1;
}

const weight_bytes & step_time_model::weight_sizes() const {
    if (!weights_cache_) weights_cache_ = model_weight_bytes(model, weights ? *weights : parse_weight_file_type("f16"));
    return *weights_cache_;
}

double step_time_model::attention_seconds(const ubatch_work & w) const {
    return std::max(kv_bytes(w) / (device.bandwidth_gbs * 1e9), attn_flops(model, w) / (device.peak_tflops * 1e12));
}

bool cuda_fa_takes_mma(const model_shape & m, bool kv_quantized, uint32_t rows_per_stream, uint32_t n_stream, uint32_t n_kv) {
    constexpr uint32_t kq_stride = 256;   // fattn-common.cuh: FATTN_KQ_STRIDE
    const uint32_t d = m.head_dim, gqa = m.n_head_kv ? m.n_head / m.n_head_kv : 1;
    const bool can_use_vec = d <= 256 && d % 64 == 0 && d != 192 && n_kv % kq_stride == 0;
    if (!can_use_vec) return true;
    if (!kv_quantized) {
        if (rows_per_stream == 1 && n_stream == 1 && !(gqa > 4 && (d >= 256 || n_kv >= 8192))) return false;
    } else if (rows_per_stream <= 2) {
        return false;
    }
    const bool gqa_opt_applies = gqa >= 2 && n_kv % kq_stride == 0;   // a causal mask, no ALiBi (every preset)
    return gqa_opt_applies || rows_per_stream != 1;
}

// ggml-cuda/mmvq.cuh, mmvf.cuh: MMVQ_MAX_BATCH_SIZE, MMVF_MAX_BATCH_SIZE: up to 8 tokens the matrix-vector kernels, no tiles
constexpr double k_mat_vec_max_tokens = 8;

double gemm_wave_factor(const model_shape & m, double n_tokens, int n_sm) {
    if (n_sm <= 0 || n_tokens <= k_mat_vec_max_tokens || m.n_embd == 0) return 1.0;
    // mmq takes the narrowest tile width J that gives the fewest column tiles (mmq.cuh: J_best), among the widths it
    // has kernels for (mmq-config-ampere.cuh, Q4_0)
    constexpr double rows = 128;
    constexpr std::array<double, 11> widths = {8, 16, 24, 32, 40, 48, 64, 80, 96, 112, 128};
    const double col_tiles = std::ceil(n_tokens / widths.back()), sm = n_sm;
    const double cols = *std::find_if(widths.begin(), widths.end(), [&](double j) { return std::ceil(n_tokens / j) == col_tiles; });
    double padded = 0, exact = 0;
    // (rows, columns of the weight: the reduction length) of each matrix, times how many such matrices a layer has
    const double e = m.n_embd, q = (double) m.n_head * m.head_dim, kv = (double) m.n_head_kv * m.head_dim, ff = m.n_ff;
    for (const auto & [out, in, count] : {std::tuple{q, e, 1.0}, {kv, e, 2.0}, {e, q, 1.0}, {ff, e, 2.0}, {e, ff, 1.0}}) {
        const double tiles = std::ceil(out / rows) * col_tiles;
        padded += count * std::ceil(tiles / sm) * sm * rows * cols * in;
        exact += count * out * n_tokens * in;
    }
    return padded / exact;
}

ubatch_terms step_time_model::terms(const std::vector<ubatch_work> & per_cache) const {
    ubatch_terms t;
    if (per_cache.empty()) return t;
    const weight_bytes & wb = weight_sizes();
    const ubatch_work & first = per_cache.front();
    const double n_out = first.n_outputs ? first.n_outputs : first.n_tokens;
    t.n_tokens = first.n_tokens;
    t.weight_bytes = wb.read_per_ubatch();
    t.dense_flops = 2.0 * wb.dense_params * first.n_tokens * gemm_wave_factor(model, first.n_tokens, device.n_sm);
    // a CPU's one logits row of a ubatch of several tokens: ubatch_terms::gemv_output_bytes
    if (device.n_sm == 0 && first.n_tokens >= 2 && n_out == 1) {
        t.gemv_output_bytes = wb.output;
        t.gemv_output_flops = 2.0 * wb.output_params;
        t.weight_bytes -= wb.output;
    } else {
        t.dense_flops += 2.0 * wb.output_params * n_out;
    }
    t.float_multi_row = device.n_sm > 0 && first.n_tokens >= 2 && is_float_weight_type(weights);
    if (!is_float_weight_type(weights) && device.repack_rows > 0) {
        double rows = 0;   // the rows beyond one of matrices tinyBLAS multiplies: their own term, out of the GEMM
        // weights ggml-cpu repacks none of (q8_0 on x86: ggml_repack_get_optimal_repack_type has no x86 case for it) go
        // through one kernel at every ubatch size: no passes, no split between packed and unpacked layer matrices
        if (wb.packed_bytes > 0) {
            // only the repacked matrices take extra one-row passes; fewer tokens than a gemm takes: those passes alone
            t.extra_pass_bytes = wb.packed_bytes * repack_extra_passes(first.n_tokens, device.repack_rows);
            t.gemv_only = (int64_t) first.n_tokens < device.repack_rows;
            // the unpacked layer matrices' rows, while the packed ones are gemv passes
            if (t.gemv_only && first.n_tokens >= 2) rows += wb.unpacked_dense_params * first.n_tokens;
        }
        // an unpacked output (a tied one, or nothing repacked) from two rows: the layers' GEMM price is of n_tokens rows,
        // the output multiplies n_outputs (a prompt of several sequences: one per sequence), and its tinyBLAS rows cost
        // more than the layers' (Qwen2.5-0.5B's output, one Zen 5 core: 5.5 ms for one row, 25 ms for two, 37 for four)
        if (!wb.output_packed && n_out >= 2) rows += wb.output_params * n_out;
        t.unpacked_row_params = rows;
        t.dense_flops -= 2.0 * rows;
    }
    const bool visible = charges_visible();
    for (const auto & w : per_cache) {
        t.k_shift_thetas += w.k_shift_cells * w.n_layer * (model.head_dim / 2.0);
        // ggml-cpu/ops.cpp ggml_compute_forward_flash_attn_ext_f16: the tiled path from GGML_FA_TILE_Q (64) query rows.
        // Both paths read every mask value up to n_kv per query row and head: the one-row path tests each cell
        // (ggml_compute_forward_flash_attn_ext_f16_one_chunk), the tiled one converts a whole KV tile's mask before it
        // knows the tile can be skipped (ggml_compute_forward_flash_attn_ext_tiled: mask32, can_skip). One price for
        // both: a price of its own for the tiled walk fitted 0.25-1.2 ns against 0.06-5 ns and predicted the
        // validation's prompts no better (11 runs, docs/benchmarks.md)
        if (visible) t.scanned_cells += (double) w.n_tokens * w.n_kv * model.n_head * w.n_layer;
        if (visible && w.tiled_cells >= 0) {
            t.tiled_kv_bytes += w.tiled_cells * (double) w.bytes_per_cell_layer * w.n_layer;
            t.tiled_attn_flops += 4.0 * w.tiled_cells * model.n_head * model.head_dim * w.n_layer;
        } else if (visible) {
            const double cells = w.split_kv_visible >= 0 ? w.split_kv_visible : w.visible;
            t.kv_bytes += cells * (double) w.bytes_per_cell_layer * w.n_layer;
            t.attn_flops += 4.0 * cells * model.n_head * model.head_dim * w.n_layer;
        } else {
            // a CUDA card's (n_sm) MMA flash-attention kernel (query rows in tiles) over two or more rows per stream costs
            // more per K/V byte than its vector kernel: those bytes in the tiled term (priced apart by a profile with
            // attn_tiled_s_per_kv_byte, else as the vector one's). The MMA kernel over one row (GQA > 4 over 8192 cells,
            // several streams) stays with the vector kernel's price: Qwen2.5-7B's decode steps at depth 16384 take it on
            // the H200 and read their K/V at 1.8 TB/s, where the vector kernel reads the 8B's at 2.4 and the MMA kernel a
            // 4-token prompt's at 0.6 (docs/benchmarks.md)
            const uint32_t rows = w.n_tokens / std::max(1u, w.n_stream);
            const bool mma = device.n_sm > 0 && rows >= 2 && cuda_fa_takes_mma(model, w.kv_quantized, rows, w.n_stream, w.n_kv);
            (mma ? t.tiled_kv_bytes : t.kv_bytes) += kv_bytes(w);
            t.attn_flops += attn_flops(model, w);
        }
    }
    return t;
}

double step_time_model::ubatch_seconds(const std::vector<ubatch_work> & per_cache) const {
    if (per_cache.empty()) return 0;
    return seconds_of(terms(per_cache));
}

ubatch_terms tiled_as_one_row(ubatch_terms t) {
    t.kv_bytes += t.tiled_kv_bytes;
    t.attn_flops += t.tiled_attn_flops;
    t.tiled_kv_bytes = t.tiled_attn_flops = 0;
    return t;
}

double step_time_model::seconds_of(const ubatch_terms & t) const {
    double bytes = t.weight_bytes, flops = t.dense_flops, attn = 0;
    if (measured_s_per_kv_byte > 0) {
        attn = (t.kv_bytes + t.tiled_kv_bytes) * measured_s_per_kv_byte;
    } else if (device.attention_linear()) {
        const ubatch_terms a = device.attn_tiled_s_per_kv_byte > 0 ? t : tiled_as_one_row(t);
        attn = a.kv_bytes * device.attn_s_per_kv_byte + a.attn_flops * device.attn_s_per_flop +
               a.tiled_kv_bytes * device.attn_tiled_s_per_kv_byte;
    } else {   // a roofline has one attention: the tiled path's cells join the others
        bytes += t.kv_bytes + t.tiled_kv_bytes;
        flops += t.attn_flops + t.tiled_attn_flops;
    }
    // per ubatch: the type's name as it is, no string built (weights_name() makes one)
    const double read_rate = device.bandwidth_gbs * 1e9 * device.read_fraction(weights ? weights->name : "f16");
    const double peak = device.peak_tflops * 1e12 * (is_float_weight_type(weights) ? device.float_gemm_speedup : 1.0);
    const double mem = bytes / read_rate + (t.float_multi_row ? t.weight_bytes * device.float_gemm_extra_s_per_byte : 0.0);
    const double compute = flops / (peak * device.gemm_fraction_at(t.n_tokens));
    // a profile with a read rate per weight type prices one-token ubatches (the matrix-vector kernels) by their reads alone
    const bool reads_by_type = !device.weight_read_fraction_by_type.empty();
    const bool reads_only = t.gemv_only || (reads_by_type && t.n_tokens <= 1);
    // the output's one logits row of a CPU ubatch: as in a one-token step
    const double gemv_output = reads_by_type ? t.gemv_output_bytes / read_rate
                                             : std::max(t.gemv_output_bytes / read_rate, t.gemv_output_flops / (peak * device.gemm_fraction_at(1)));
    return (reads_only ? mem : std::max(mem, compute)) + gemv_output + attn +
           t.scanned_cells * device.attn_s_per_scanned_cell + t.extra_pass_bytes * device.extra_pass_s_per_byte +
           t.unpacked_row_params * device.unpacked_s_per_param_row + t.k_shift_thetas * device.k_shift_s_per_theta + device.ubatch_overhead_s +
           model.n_layer * (device.layer_overhead_s + (t.n_tokens >= 2 ? device.gemm_layer_overhead_s : 0.0));
}

std::string step_time_model::describe() const {
    const double gb = weight_sizes().read_per_ubatch() / 1e9;
    std::string extra;
    const double read = device.read_fraction(weights_name());
    if (read != 1.0 || device.gemm_fraction.size() > 1 || device.gemm_fraction.front().second != 1.0) {
        std::string g;
        for (const auto & [tokens, f] : device.gemm_fraction) g += fmt::format("{}{:.3f} at {:g} tokens", g.empty() ? "" : ", ", f, tokens);
        extra += fmt::format(", achieved fractions: weight reads {:.3f}{}, GEMMs {}{}", read,
                             device.weight_read_fraction_by_type.count(weights_name()) ? fmt::format(" ({})", weights_name()) : "", g,
                             device.float_gemm_speedup != 1.0 ? fmt::format(" (float weights x{:.2f})", device.float_gemm_speedup) : "");
    }
    if (device.ubatch_overhead_s > 0 || device.layer_overhead_s > 0 || device.gemm_layer_overhead_s > 0) {
        extra += fmt::format(", overhead {:.1f} us per ubatch + {:.2f} us per layer{}", device.ubatch_overhead_s * 1e6,
                             device.layer_overhead_s * 1e6,
                             device.gemm_layer_overhead_s > 0 ? fmt::format(" (+ {:.2f} from 2 tokens)", device.gemm_layer_overhead_s * 1e6) : "");
    }
    const std::string dense = fmt::format("max(weights {:.3f} GB ({}) / {:.0f} GB/s, FLOPs{} / {:.2f} TFLOP/s)", gb, weights_name(),
                                          device.bandwidth_gbs, device.n_sm > 0 ? fmt::format(" in waves of 128-row tiles on {} SMs", device.n_sm) : "",
                                          device.peak_tflops);
    if (measured_s_per_kv_byte > 0) {
        return fmt::format("dense part: {} on {} ({}){}; attention part: measured kernel time, {:.3f} ns per K/V KiB read (all layers)",
                           dense, device.name, device.source, extra, measured_s_per_kv_byte * 1e9 * 1024);
    }
    if (device.attention_linear()) {
        return fmt::format("per ubatch: {} + attention ({:.3f} ns per K/V KiB, {:.3f} ns per MFLOP) on {} ({}){}", dense,
                           device.attn_s_per_kv_byte * 1e9 * 1024, device.attn_s_per_flop * 1e15, device.name, device.source, extra);
    }
    return fmt::format("roofline per ubatch: max((weights {:.3f} GB ({}) + K/V read) / {:.0f} GB/s, FLOPs / {:.2f} TFLOP/s) on {} ({}){}",
                       gb, weights_name(), device.bandwidth_gbs, device.peak_tflops, device.name, device.source, extra);
}

ubatch_work_collector::ubatch_work_collector(const context & ctx, const step_time_model & tm, decode_observer * next)
    : next(next), first_cache_(ctx.memory().caches().front()), tiled_(tm.charges_visible()),
      threads_(tm.charges_visible() ? tm.device.threads : 0), n_head_(ctx.model().n_head),
      params_(ctx.params()) {
    const auto & m = ctx.model();
    bytes_ = kv_bytes_per_cell_layer(m, ctx.params().type_k, ctx.params().type_v);
    n_swa_layers_ = m.n_layer_swa();
    n_layer_ = m.n_layer;
    iswa_ = ctx.memory().caches().size() > 1;
    kv_quantized_ = ggml_is_quantized(params_.type_k) || ggml_is_quantized(params_.type_v);
}

void ubatch_work_collector::on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
    if (&c == first_cache_) work.emplace_back();
    const uint32_t layers = !iswa_ ? n_layer_ : (c.params().swa != swa_type::none ? n_swa_layers_ : n_layer_ - n_swa_layers_);
    work.back().push_back({ub.n_tokens, n_kv, sinfo.n_stream(), layers, bytes_, ub.n_seqs_unq, ubatch_visible_cells(c, ub),
                           tiled_ ? ubatch_tiled_cells(c, ub, n_kv, params_, n_head_, threads_) : -1,
                           threads_ > 1 && sinfo.n_stream() == 1 ? ubatch_split_kv_visible(c, ub, n_kv, params_, threads_) : -1,
                           kv_quantized_});
    const auto shifted = std::find_if(k_shift_.begin(), k_shift_.end(), [&](const auto & k) { return k.first == &c; });
    if (shifted != k_shift_.end()) {
        work.back().back().k_shift_cells = shifted->second;
        k_shift_.erase(shifted);
    }
    if (next) next->on_apply(c, sinfo, ub, n_kv);
}

void ubatch_work_collector::on_update(const kv_memory & mem) {
    for (const kv_cache * c : mem.caches()) {
        if (c->get_has_shift()) k_shift_.emplace_back(c, (double) c->get_size() * c->get_n_stream());
    }
    if (next) next->on_update(mem);
}

void ubatch_work_collector::on_restore(const kv_cache & c, const slot_info & sinfo, const ubatch & ub) {
    if (next) next->on_restore(c, sinfo, ub);
}

double ubatch_visible_cells(const kv_cache & c, const ubatch & ub) {
    const uint32_t n_swa = c.params().swa == swa_type::standard ? c.params().n_swa : 0;
    double sum = 0;
    for (const llama_seq_id s : ub.seq_id_unq) {
        uint32_t n = 0;
        for (uint32_t t = 0; t < ub.n_tokens; ++t) n += ub.seq_id[t][0] == s;
        const double cells = (double) c.cells(c.seq_to_stream(s)).seq_n_cells(s);
        for (uint32_t j = 0; j < n; ++j) {
            const double v = std::max(0.0, cells - j);   // the j-th newest token sees all but the j newer ones
            sum += n_swa ? std::min<double>(v, n_swa) : v;
        }
    }
    return sum;
}

double ubatch_split_kv_visible(const kv_cache & c, const ubatch & ub, uint32_t n_kv, const context_params & p, int n_threads) {
    const bool f16_or_f32 = p.type_k == ggml_type::f16 || p.type_k == ggml_type::f32;
    if (!p.flash_attn || ub.n_tokens != 1 || n_kv < 512 || n_threads < 2 || p.type_k != p.type_v || !f16_or_f32) return -1;
    const llama_seq_id s = ub.seq_id[0][0];
    const llama_pos pos = ub.pos[0];
    const uint32_t n_swa = c.params().swa == swa_type::standard ? c.params().n_swa : 0;
    const auto & cells = c.cells(c.seq_to_stream(s));
    const uint32_t chunk = (n_kv + (uint32_t) n_threads - 1) / (uint32_t) n_threads;
    // the stream holds this sequence alone in cells [0, used), all seen (llama-bench, one slot): no walk, which made
    // a 131k-token decode quadratic
    const uint32_t used = cells.get_used();
    if (!n_swa && used == cells.seq_n_cells(s) && cells.used_max_p1() == used && c.seq_pos_max(s) <= pos) {
        return (double) n_threads * std::min(chunk, std::min(used, n_kv));
    }
    uint32_t most = 0, in_chunk = 0;
    for (uint32_t i = 0; i < n_kv && i < cells.size(); ++i) {
        if (i % chunk == 0) in_chunk = 0;
        if (!cells.is_empty(i) && cells.seq_has(i, s)) {
            const llama_pos q = cells.pos_get(i);
            in_chunk += q <= pos && (!n_swa || pos - q < (llama_pos) n_swa);
        }
        most = std::max(most, in_chunk);
    }
    return (double) n_threads * most;
}

namespace {
constexpr uint32_t k_fa_tile_q = 64, k_fa_tile_kv = 64;   // ggml-cpu/common.h: GGML_FA_TILE_Q, GGML_FA_TILE_KV

// The positions a Q tile's sequences reach: for each sequence of the tile (index into seqs), its tokens' lowest and
// highest position; -1 when the tile has none.
struct tile_span {
    std::vector<llama_pos> lo, hi;
};

// Whether K/V tile k (cells [64k, 64k + 64) of n_kv) holds a cell some token of the Q tile sees: per sequence, the
// lowest position of its cells in that K/V tile (min_pos[k * n_seq + s]) against the tile's highest position (causal),
// and within n_swa of its lowest (standard SWA).
bool kv_tile_seen(const std::vector<llama_pos> & min_pos, const std::vector<llama_pos> & max_pos, size_t k, const tile_span & q,
                  const std::vector<size_t> & active, uint32_t n_swa) {
    const size_t n = q.lo.size();
    for (const size_t s : active) {
        if (min_pos[k * n + s] < 0 || min_pos[k * n + s] > q.hi[s]) continue;
        if (n_swa == 0 || max_pos[k * n + s] > q.lo[s] - (llama_pos) n_swa) return true;
    }
    return false;
}

// Each stream's K/V view holds its own cells: per K/V tile of the first n_kv cells and sequence of `seqs`, the lowest
// and highest position of the sequence's cells in the tile (-1: none), as [tile * seqs.size() + s].
void kv_tile_positions(const kv_cache & c, uint32_t strm, const std::vector<llama_seq_id> & seqs, uint32_t n_kv,
                       std::vector<llama_pos> & min_pos, std::vector<llama_pos> & max_pos) {
    const kv_cells & cells = c.cells(strm);
    const size_t n_seq = seqs.size();
    // one bitset AND per cell, not a test per sequence (this runs over every cell up to n_kv)
    seq_set mask;
    std::array<size_t, LLAMA_MAX_SEQ> index{};
    for (size_t s = 0; s < n_seq; ++s) {
        if (c.seq_to_stream(seqs[s]) != strm) continue;
        mask.set((size_t) seqs[s]);
        index[(size_t) seqs[s]] = s;
    }
    for (uint32_t j = 0; j < std::min(n_kv, cells.size()); ++j) {
        if (cells.is_empty(j)) continue;
        const seq_set hit = cells.seq_get_all(j) & mask;
        if (hit.none()) continue;
        const llama_pos p = cells.pos_get(j);
        for (size_t b = seq_first(hit); b < hit.size(); b = seq_next(hit, b)) {
            const size_t at = (j / k_fa_tile_kv) * n_seq + index[b];
            min_pos[at] = min_pos[at] < 0 ? p : std::min(min_pos[at], p);
            max_pos[at] = std::max(max_pos[at], p);
        }
    }
}
}  // namespace

namespace {
// ggml_compute_forward_flash_attn_ext_f16's row chunks: the Q rows (n_tps tokens x n_head heads x n_stream streams,
// token fastest) cut into 4 chunks per thread (one per thread with one thread, or when there are fewer rows), each
// chunk [ir0, ir1) of dr rows
int64_t fa_row_chunk(int64_t nr, int n_threads) {
    const int64_t nth = std::max(1, n_threads);
    const int64_t chunk_size = (nr + nth * 4 - 1) / (nth * 4);
    int64_t nchunk = (nr + chunk_size - 1) / chunk_size;
    if (nth == 1 || nchunk < nth) nchunk = nth;
    return (nr + nchunk - 1) / nchunk;
}

// The K/V tiles of one stream (up to n_kv) that a Q tile of the stream's tokens [t0, t0 + rows) computes.
struct stream_tiles {
    std::vector<uint32_t> tokens;                // the stream's tokens, ubatch indices in ubatch order
    std::vector<llama_pos> min_pos, max_pos;     // kv_tile_positions
};

size_t seen_kv_tiles(const ubatch & ub, const stream_tiles & st, const std::vector<llama_seq_id> & seqs, size_t n_tiles,
                     uint32_t t0, uint32_t rows, uint32_t n_swa) {
    const size_t n_seq = seqs.size();
    tile_span q{std::vector<llama_pos>(n_seq, -1), std::vector<llama_pos>(n_seq, -1)};
    for (uint32_t i = t0; i < t0 + rows; ++i) {
        const uint32_t t = st.tokens[i];
        // a token of several sequences sees the cells of each
        for (const llama_seq_id s : ub.seq_id[t]) {
            const size_t k = (size_t) (std::lower_bound(seqs.begin(), seqs.end(), s) - seqs.begin());
            q.lo[k] = q.lo[k] < 0 ? ub.pos[t] : std::min(q.lo[k], ub.pos[t]);
            q.hi[k] = std::max(q.hi[k], ub.pos[t]);
        }
    }
    std::vector<size_t> active;   // the sequences the Q tile has tokens of
    for (size_t s = 0; s < n_seq; ++s)
        if (q.hi[s] >= 0) active.push_back(s);
    size_t seen = 0;
    for (size_t k = 0; k < n_tiles; ++k) seen += kv_tile_seen(st.min_pos, st.max_pos, k, q, active, n_swa);
    return seen;
}
}  // namespace

double ubatch_tiled_cells(const kv_cache & c, const ubatch & ub, uint32_t n_kv, const context_params & p, uint32_t n_head,
                          int n_threads) {
    const bool f16_or_f32 = p.type_k == ggml_type::f16 || p.type_k == ggml_type::f32;
    if (!p.flash_attn || !f16_or_f32 || p.type_k != p.type_v || n_kv == 0 || n_head == 0) return -1;
    const uint32_t n_swa = c.params().swa == swa_type::standard ? c.params().n_swa : 0;
    const std::vector<llama_seq_id> & seqs = ub.seq_id_unq;
    const size_t n_tiles = (n_kv + k_fa_tile_kv - 1) / k_fa_tile_kv;
    // only the streams the ubatch's sequences live in (one stream per sequence without -kvu): Q's ne[3]
    std::vector<uint32_t> streams;
    for (const llama_seq_id s : seqs) streams.push_back(c.seq_to_stream(s));
    std::sort(streams.begin(), streams.end());
    streams.erase(std::unique(streams.begin(), streams.end()), streams.end());
    std::vector<stream_tiles> st(streams.size());
    for (uint32_t t = 0; t < ub.n_tokens; ++t) {
        const uint32_t strm = c.seq_to_stream(ub.seq_id[t][0]);
        st[(size_t) (std::lower_bound(streams.begin(), streams.end(), strm) - streams.begin())].tokens.push_back(t);
    }
    if (st.empty()) return -1;
    // Q's ne[1]: llama.cpp splits a ubatch of several streams equally among them (split_equal); Q has no other shape
    const uint32_t n_tps = (uint32_t) st.front().tokens.size();
    for (const stream_tiles & x : st)
        if (x.tokens.size() != n_tps) return -1;
    if (n_tps < k_fa_tile_q) return -1;   // use_tiled needs neq1 >= GGML_FA_TILE_Q: the one-row path
    for (size_t i = 0; i < streams.size(); ++i) {
        st[i].min_pos.assign(n_tiles * seqs.size(), -1);
        st[i].max_pos.assign(n_tiles * seqs.size(), -1);
        kv_tile_positions(c, streams[i], seqs, n_kv, st[i].min_pos, st[i].max_pos);
    }
    // ggml_compute_forward_flash_attn_ext_tiled walks each row chunk in Q tiles of up to 64 rows that neither cross a
    // head nor the chunk's end; a tile of fewer rows still computes all 64 (Q zero-padded, its padded rows' scores
    // unmasked) and every K/V tile 64 cells wide. Most tiles recur in every head: counted once per (stream, first
    // token, rows).
    const int64_t nr = (int64_t) n_tps * n_head * (int64_t) streams.size(), dr = fa_row_chunk(nr, n_threads);
    std::map<std::tuple<size_t, uint32_t, uint32_t>, size_t> memo;
    double pairs = 0;
    for (int64_t ir0 = 0; ir0 < nr; ir0 += dr) {
        const int64_t ir1 = std::min(ir0 + dr, nr);
        for (int64_t ir = ir0; ir < ir1;) {
            const size_t strm = (size_t) (ir / ((int64_t) n_head * n_tps));
            const uint32_t iq1 = (uint32_t) (ir % n_tps);
            const uint32_t rows = (uint32_t) std::min<int64_t>({k_fa_tile_q, ir1 - ir, (int64_t) (n_tps - iq1)});
            const auto key = std::tuple{strm, iq1, rows};
            auto it = memo.find(key);
            if (it == memo.end()) it = memo.emplace(key, seen_kv_tiles(ub, st[strm], seqs, n_tiles, iq1, rows, n_swa)).first;
            pairs += (double) it->second;
            ir += rows;
        }
    }
    // per head, as the terms price it (rows x cells, times n_head for the FLOPs)
    return pairs * k_fa_tile_q * k_fa_tile_kv / n_head;
}

}  // namespace kvsim
