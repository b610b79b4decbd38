// Flash-attention decode on the CPU: FlashAttention-2 online softmax over tiles of 32-128 cells, split-KV over
// chunks with a final log-sum-exp merge (FlashDecoding). One work item = (stream, chunk) and handles all query
// heads x n_tps tokens; each K/V row is read and converted once for all the query heads sharing it
// (ggml_compute_forward_flash_attn_ext_f16_one_chunk re-reads and re-converts it per query head).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu/cpu_backend.h"
#include "cpu/fa_amx.h"
#include "cpu/fa_group.h"
#include "cpu/simd.h"
#include "quant.h"

namespace kvsim {

namespace {

constexpr int64_t T_chunk = cpu_backend::fa_tile;  // split-KV chunks are multiples of the largest tile

// Cells per tile: the most (128, 64 or 32) whose K and V rows fit in ~320 KiB. The next tile is prefetched into L2
// while this one is computed, so a tile must leave room in a 2 MiB L2; measured on the 2-vCPU test VM (Xeon,
// 2 MiB L2 per core), Llama-3-8B shape: f16 64 cells beat 32 (+12 %) and 128 (-17 %), q8_0 128 beat 64 (+11 %).
int64_t tile_cells(const fa_args & a) {
    const size_t row = a.k.row_bytes() + a.v.row_bytes();
    for (int64_t t = T_chunk; t > 32; t /= 2) {
        if ((size_t) t * row <= (size_t) 320 << 10) return t;
    }
    return 32;
}

// The query rows as the Q.K loops read them: f32 (rotated, and rounded through q8_0 when K's dot type is q8_0)
// and, when quantized, the q8_0 blocks themselves ([n_stream][n_tps][n_head][head_dim_k / 32]) for AMX.
struct fa_query {
    const float * q = nullptr;
    const char * packed = nullptr;  // AMX: each (stream, KV head) group's rows packed by amx_pack_q, in that order
    size_t packed_bytes = 0;        // per group
    bool amx = false;               // Q.K of the grouped path on AMX (this thread's tiles configured)
    cpu::cpu_isa isa = cpu::cpu_isa::scalar;  // the vector loops every helper of this call runs (cpu_isa.h)
    const block_q8_0 * qq = nullptr;  // q8_0 K: Q's rows as q8_0 blocks ([row][head_dim_k / 32], rows as q)
};

// Row i of KV head hk's group in stream s (token i / gqa, query head hk * gqa + i % gqa) as a row of Q.
inline int64_t group_row(const fa_desc & d, int64_t s, int64_t hk, int64_t i) {
    const int64_t gqa = d.n_head / d.n_head_kv;
    return (s * d.n_tps + i / gqa) * d.n_head + hk * gqa + i % gqa;
}

// Mask values (before the ALiBi slope) of cells j0..j0+nt of every token of stream s into mv[t * T + j], and
// live[j] = 1 where some token sees cell j. Returns false when no token sees any cell of the tile.
bool mask_tile(const fa_desc & d, const fa_args & a, cpu::cpu_isa isa, int64_t s, int64_t j0, int64_t nt, int64_t T,
               float * mv, char * live) {
    std::fill(live, live + nt, 0);
    bool any = false;
    for (int64_t t = 0; t < d.n_tps; ++t) {
        float * row = mv + t * T;
        if (!a.mask) {
            std::fill(row, row + nt, 0.0f);
        } else {
            const size_t idx = (size_t) ((s * d.n_tps + t) * d.n_kv + j0);
            if (a.mask_type == ggml_type::f16) {
                cpu::row_to_f32_fast(ggml_type::f16, static_cast<const fp16_t *>(a.mask) + idx, row, nt, isa);
            } else {
                std::copy_n(static_cast<const float *>(a.mask) + idx, nt, row);
            }
        }
        for (int64_t j = 0; j < nt; ++j) {
            const bool seen = row[j] != -INFINITY;
            live[j] |= (char) seen;
            any |= seen;
        }
    }
    return any;
}

// The cells of the tile each token sees (vis[t * T + k], k < vis_n[t]) from mask_tile's values.
void visible_cells(const fa_desc & d, int64_t nt, int64_t T, const float * mv, int32_t * vis, int64_t * vis_n) {
    for (int64_t t = 0; t < d.n_tps; ++t) {
        int64_t n = 0;
        for (int64_t j = 0; j < nt; ++j) {
            if (mv[t * T + j] != -INFINITY) vis[t * T + n++] = (int32_t) j;
        }
        vis_n[t] = n;
    }
}

// Convert cell `cell` of `stream` to f32 into the tile buffer laid out [n_head_kv][T][head_dim] (tile slot j):
// head-major so that one kv head's 32 rows are contiguous for the score and P.V loops.
inline void convert_row_by_head(const kv_tensor & x, cpu::cpu_isa isa, int64_t stream, int64_t cell, int64_t j, int64_t T,
                                float * tile) {
    const char * src = static_cast<const char *>(x.row(stream, cell));
    const size_t hb = x.head_bytes();
    for (int64_t h = 0; h < x.n_head_kv; ++h) {
        cpu::row_to_f32_fast(x.type, src + h * hb, tile + (h * T + j) * x.head_dim, x.head_dim, isa);
    }
}

// Online-softmax step of query row r over its tile scores srow (FlashAttention-2): finishes the scores, turns
// them into probabilities against the new running max and rescales the row's accumulator.
void softmax_row(const fa_desc & d, int64_t r, float * srow, const float * mrow, int64_t nt, float * acc,
                 fa_thread_scratch & w) {
    const float scale = d.softcap != 0.0f ? d.scale / d.softcap : d.scale;
    cpu::tile_scores_finish(srow, mrow, nt, scale, d.softcap, w.slope[(size_t) (r % d.n_head)], w.isa);
    float & m = w.m[(size_t) r];
    float mn;
    const float sum = cpu::tile_softmax(srow, nt, m, &mn, w.isa);
    if (sum == 0.0f) return;
    const float alpha = expf(m - mn);  // 0 when m is -INF (nothing accumulated yet)
    if (alpha != 1.0f) {
        for (int64_t e = 0; e < d.head_dim_v; ++e) acc[e] *= alpha;
    }
    w.l[(size_t) r] = w.l[(size_t) r] * alpha + sum;
    m = mn;
}

// A token sees this tile sparsely when it sees at most half its cells (other sequences' cells of a unified cache, a
// causal or SWA border): its rows then take Q.K and P.V over just those cells, as ggml's CPU kernel skips each
// row's masked cells, instead of the whole tile.
inline bool sparse_token(const fa_thread_scratch & w, const fa_desc & d, int64_t t, int64_t nt) {
    return d.n_tps > 1 && 2 * w.vis_n[(size_t) t] <= nt;
}

// From this many rows on (a prompt chunk: tokens x GQA group), one KV head's K and V rows of the tile are
// converted to f32 once and the f32 loops run on them: the in-register conversion of fa_group.h is repeated for
// every block of 4 rows (docs/kernels.md, measured gains).
constexpr int64_t f32_tile_min_rows = 16;

// The tile's rows of one KV head (head_dim elements each at h0 + j * row) as f32, [nt][head_dim] (dead cells
// converted too; they are masked or skipped).
const char * head_tile_f32(const kv_tensor & x, cpu::cpu_isa isa, const char * h0, size_t row, int64_t nt,
                           std::vector<float> & buf) {
    buf.resize((size_t) (nt * x.head_dim));
    for (int64_t j = 0; j < nt; ++j) {
        cpu::row_to_f32_fast(x.type, h0 + (size_t) j * row, buf.data() + j * x.head_dim, x.head_dim, isa);
    }
    return reinterpret_cast<const char *>(buf.data());
}

// Rows [0, n) of w.qp/w.ap/w.rows/w.mrows over the whole tile: Q.K (AMX when `amx`: the rows are the group's in
// amx_pack_q order; int_qk: integer Q.K on w.qqp, the rows' q8_0 blocks), online softmax, P.V.
void dense_rows(const fa_desc & d, const fa_args & a, bool amx, const char * packed, bool int_qk, int64_t n,
                const char * k0, const char * v0, size_t k_row, size_t v_row, int64_t nt, fa_thread_scratch & w,
                cpu::prefetch_stream & pf) {
    const int64_t T = w.tile;
    float * sc = w.sc.data();
    const bool f32_tile = n >= f32_tile_min_rows;
    if (amx) {
        cpu::fa_amx_qk_q8_0(packed, w.qp.data(), n, k0, k_row, nt, d.head_dim_k, sc, T, pf);
    } else if (f32_tile && a.k.type != ggml_type::f32) {
        const char * kf = head_tile_f32(a.k, w.isa, k0, k_row, nt, w.kt);
        cpu::fa_group_qk(w.isa, ggml_type::f32, w.qp.data(), n, kf, (size_t) d.head_dim_k * sizeof(float), nt, d.head_dim_k, sc, T, pf);
    } else {
        cpu::fa_group_qk(w.isa, a.k.type, w.qp.data(), n, k0, k_row, nt, d.head_dim_k, sc, T, pf, nullptr,
                         int_qk ? w.qqp.data() : nullptr);
    }
    for (int64_t i = 0; i < n; ++i) softmax_row(d, w.rows[(size_t) i], sc + i * T, w.mrows[(size_t) i], nt, w.ap[(size_t) i], w);
    if (f32_tile && a.v.type != ggml_type::f32) {
        const char * vf = head_tile_f32(a.v, w.isa, v0, v_row, nt, w.vt);
        cpu::fa_group_pv(w.isa, ggml_type::f32, w.ap.data(), sc, T, n, vf, (size_t) d.head_dim_v * sizeof(float), nt, d.head_dim_v,
                         w.live.data(), pf);
    } else {
        cpu::fa_group_pv(w.isa, a.v.type, w.ap.data(), sc, T, n, v0, v_row, nt, d.head_dim_v, w.live.data(), pf);
    }
}

// Token t's rows (qp/ap/rows[0..gqa)) over the cells it sees; their scores in w.sc rows from `first`.
void sparse_token_rows(const fa_desc & d, const fa_args & a, int64_t t, const float * const * qp, float * const * ap,
                       const int64_t * rows, int64_t first, const char * k0, const char * v0, size_t k_row, size_t v_row,
                       fa_thread_scratch & w, cpu::prefetch_stream & pf) {
    const int64_t gqa = d.n_head / d.n_head_kv, T = w.tile, n = w.vis_n[(size_t) t];
    if (n == 0) return;  // nothing seen: the rows keep their state
    const int32_t * cells = w.vis.data() + t * T;
    float * sc = w.sc.data() + first * T;
    w.mvc.resize((size_t) T);
    for (int64_t k = 0; k < n; ++k) w.mvc[(size_t) k] = w.mv[(size_t) (t * T + cells[k])];
    cpu::fa_group_qk(w.isa, a.k.type, qp, gqa, k0, k_row, n, d.head_dim_k, sc, T, pf, cells);
    for (int64_t i = 0; i < gqa; ++i) softmax_row(d, rows[i], sc + i * T, w.mvc.data(), n, ap[i], w);
    cpu::fa_group_pv(w.isa, a.v.type, ap, sc, T, gqa, v0, v_row, n, d.head_dim_v, nullptr, pf, cells);
}

// One KV head's query rows (its GQA group x the stream's tokens) over one tile, K/V read in place
// (fa_group.h). Row i of the group is token i / gqa, query head hk*gqa + i % gqa.
void group_tile(const fa_desc & d, const fa_args & a, const fa_query & fq, int64_t s, int64_t j0, int64_t nt, int64_t nt_next,
                int64_t hk, float * part, fa_thread_scratch & w) {
    const int64_t gqa = d.n_head / d.n_head_kv;
    const int64_t n_rows = gqa * d.n_tps;
    const int64_t T = w.tile;
    const size_t pstride = (size_t) (d.head_dim_v + 2);
    for (auto * v : {&w.qp, &w.sq}) v->resize((size_t) n_rows);
    w.qqp.resize((size_t) n_rows);
    w.ap.resize((size_t) n_rows);
    w.sa.resize((size_t) n_rows);
    w.rows.resize((size_t) n_rows);
    w.srows.resize((size_t) n_rows);
    w.mrows.resize((size_t) n_rows);
    // rows of tokens that see the whole tile (or most of it) first, in group order; the sparse tokens' rows apart
    int64_t n_dense = 0, n_sparse = 0;
    for (int64_t i = 0; i < n_rows; ++i) {
        const int64_t t = i / gqa, r = t * d.n_head + hk * gqa + i % gqa;
        const float * q = fq.q + group_row(d, s, hk, i) * d.head_dim_k;
        float * acc = part + (size_t) r * pstride + 2;
        if (sparse_token(w, d, t, nt)) {
            w.sq[(size_t) n_sparse] = q;
            w.sa[(size_t) n_sparse] = acc;
            w.srows[(size_t) n_sparse++] = r;
        } else {
            w.qp[(size_t) n_dense] = q;
            w.qqp[(size_t) n_dense] = fq.qq ? fq.qq + group_row(d, s, hk, i) * (d.head_dim_k / QK8_0) : nullptr;
            w.ap[(size_t) n_dense] = acc;
            w.rows[(size_t) n_dense] = r;
            w.mrows[(size_t) n_dense++] = w.mv.data() + t * T;
        }
    }
    const size_t k_row = a.k.row_bytes(), v_row = a.v.row_bytes();  // ggml_row_size is not free at this rate
    const char * k_tile = static_cast<const char *>(a.k.row(a.stream0 + s, j0));
    const char * v_tile = static_cast<const char *>(a.v.row(a.stream0 + s, j0));
    const char * k0 = k_tile + (size_t) hk * a.k.head_bytes();
    const char * v0 = v_tile + (size_t) hk * a.v.head_bytes();
    // the next tile's K and V are contiguous blocks: each KV head's turn prefetches its share of them in address
    // order (whole cells), spread over its inner loops, so the next tile is in L2 when it starts
    cpu::prefetch_stream pf;
    if (nt_next > 0) {
        const int64_t per = (nt_next + d.n_head_kv - 1) / d.n_head_kv;
        const int64_t r0 = std::min(nt_next, hk * per), n = std::min(nt_next, r0 + per) - r0;
        pf.k = k_tile + (size_t) (T + r0) * k_row;
        pf.k_end = pf.k + (size_t) n * k_row;
        pf.v = v_tile + (size_t) (T + r0) * v_row;
        pf.v_end = pf.v + (size_t) n * v_row;
        const int64_t lines = (int64_t) ((pf.k_end - pf.k) + (pf.v_end - pf.v)) / 64;
        const int64_t steps = std::max<int64_t>(1, cpu::fa_group_steps(fq.isa, n_rows, nt, d.head_dim_k, d.head_dim_v, fq.amx));
        pf.lines_per_step = (uint32_t) std::min<int64_t>(((lines << 16) + steps - 1) / steps, INT32_MAX);
    }
    if (n_dense > 0) {
        // AMX reads the group's rows as amx_pack_q packed them: all of them, or the FMA loops on the subset
        const bool amx = fq.amx && n_dense == n_rows;
        const char * packed = amx ? fq.packed + (size_t) (s * d.n_head_kv + hk) * fq.packed_bytes : nullptr;
        dense_rows(d, a, amx, packed, fq.qq != nullptr, n_dense, k0, v0, k_row, v_row, nt, w, pf);
    }
    for (int64_t i = 0; i < n_sparse; i += gqa) {
        const int64_t t = w.srows[(size_t) i] / d.n_head;
        sparse_token_rows(d, a, t, w.sq.data() + i, w.sa.data() + i, w.srows.data() + i, n_dense, k0, v0, k_row, v_row,
                          w, pf);
    }
    pf.finish();
}

// One (stream, chunk): accumulates unnormalised partial outputs for the n_head*n_tps query rows (row r = t*n_head + h)
// into part: per row [m, l, acc[head_dim_v]]. Each tile's K (then V) rows are converted to f32 whole, in address
// order; every kv head's rows are then used by all the n_head/n_head_kv query heads of its group.
void run_chunk(const fa_desc & d, const fa_args & a, fa_query fq, int64_t s, int64_t c0, int64_t c1, float * part,
               fa_thread_scratch & w, bool allow_grouped) {
    const int64_t gqa = d.n_head / d.n_head_kv;
    const int64_t n_q = d.n_head * d.n_tps;
    const int64_t dk = d.head_dim_k, dv = d.head_dim_v;
    const int64_t ek = dk * d.n_head_kv, ev = dv * d.n_head_kv;
    const size_t pstride = (size_t) (dv + 2);
    const bool grouped = allow_grouped && cpu::fa_group_supported(fq.isa, a.k.type, a.v.type, dk, dv);
    w.isa = fq.isa;
    fq.amx = fq.amx && grouped;
    const int64_t T = w.tile = tile_cells(a);
    struct amx_scope {  // this thread's tile configuration, released however the chunk ends
        bool on;
        explicit amx_scope(bool b) : on(b) { if (on) cpu::amx_begin(); }
        ~amx_scope() { if (on) cpu::amx_end(); }
    } amx(fq.amx);
    if (!grouped) {
        w.kt.resize((size_t) (T * ek));
        w.vt.resize((size_t) (T * ev));
    }
    w.sc.resize((size_t) (n_q * T));
    w.mv.resize((size_t) (d.n_tps * T));
    w.slope.resize((size_t) d.n_head);
    w.m.assign((size_t) n_q, -INFINITY);
    w.l.assign((size_t) n_q, 0.0f);
    w.live.resize((size_t) T);
    w.vis.resize((size_t) (d.n_tps * T));  // filled per tile by visible_cells
    w.vis_n.resize((size_t) d.n_tps);
    auto & kt = w.kt;
    auto & vt = w.vt;
    auto & sc = w.sc;
    auto & mv = w.mv;
    auto & live = w.live;
    for (int64_t h = 0; h < d.n_head; ++h) w.slope[(size_t) h] = alibi_slope(h, d.n_head, d.max_bias);
    for (int64_t r = 0; r < n_q; ++r) std::memset(part + r * pstride, 0, pstride * sizeof(float));

    for (int64_t j0 = c0; j0 < c1; j0 += T) {
        const int64_t nt = std::min(T, c1 - j0);
        if (!mask_tile(d, a, fq.isa, s, j0, nt, T, mv.data(), live.data())) continue;  // fully masked: neither K nor V is read
        if (grouped && d.n_tps > 1) visible_cells(d, nt, T, mv.data(), w.vis.data(), w.vis_n.data());

        if (grouped) {
            const int64_t nt_next = std::min(T, c1 - j0 - T);  // <= 0 on the chunk's last tile
            for (int64_t hk = 0; hk < d.n_head_kv; ++hk) group_tile(d, a, fq, s, j0, nt, nt_next, hk, part, w);
            continue;
        }
        for (int64_t j = 0; j < nt; ++j) {
            if (live[(size_t) j]) convert_row_by_head(a.k, fq.isa, a.stream0 + s, j0 + j, j, T, kt.data());
        }
        for (int64_t r = 0; r < n_q; ++r) {
            const int64_t t = r / d.n_head, h = r % d.n_head;
            const float * q = fq.q + ((s * d.n_tps + t) * d.n_head + h) * dk;
            float * srow = sc.data() + r * T;
            cpu::tile_qk_f32(q, kt.data() + (h / gqa) * T * dk, dk, nt, dk, srow, fq.isa);  // dead cells: stale values, masked next
            softmax_row(d, r, srow, mv.data() + t * T, nt, part + r * pstride + 2, w);
        }

        for (int64_t j = 0; j < nt; ++j) {
            if (live[(size_t) j]) convert_row_by_head(a.v, fq.isa, a.stream0 + s, j0 + j, j, T, vt.data());
        }
        for (int64_t r = 0; r < n_q; ++r) {
            const float * vh = vt.data() + (r % d.n_head / gqa) * T * dv;
            cpu::tile_pv_f32(part + r * pstride + 2, sc.data() + r * T, vh, dv, nt, dv, fq.isa);
        }
    }
    for (int64_t r = 0; r < n_q; ++r) {
        part[r * pstride + 0] = w.m[(size_t) r];
        part[r * pstride + 1] = w.l[(size_t) r];
    }
}

}  // namespace

fa_plan cpu_backend::plan_flash_attn(const fa_desc & d) const {
    if (d.n_kv <= 0 || d.n_head_kv <= 0 || d.n_stream <= 0) throw std::invalid_argument("plan_flash_attn: empty shape");
    fa_plan p;
    p.n_threads = pool_.size();
    const int64_t groups = d.n_stream;
    const int64_t max_chunks = (d.n_kv + 255) / 256;  // chunks of >= 256 cells amortise the merge
    const int64_t want = (4 * (int64_t) p.n_threads + groups - 1) / groups;
    const int64_t n_chunks = std::max<int64_t>(1, std::min(want, max_chunks));
    p.chunk = ((d.n_kv + n_chunks - 1) / n_chunks + T_chunk - 1) / T_chunk * T_chunk;
    p.n_chunks = (d.n_kv + p.chunk - 1) / p.chunk;
    return p;
}

size_t cpu_backend::pack_q_for_amx(const fa_desc & d) {
    const int64_t n_rows = d.n_head / d.n_head_kv * d.n_tps, nblk = d.head_dim_k / QK8_0;
    const size_t bytes = cpu::amx_packed_q_bytes(n_rows, d.head_dim_k);
    fa_q_packed_.resize(bytes * (size_t) (d.n_stream * d.n_head_kv) / 64);
    std::vector<const block_q8_0 *> & rows = fa_q_rows_;
    rows.resize((size_t) n_rows);
    for (int64_t s = 0; s < d.n_stream; ++s) {
        for (int64_t hk = 0; hk < d.n_head_kv; ++hk) {
            for (int64_t i = 0; i < n_rows; ++i) rows[(size_t) i] = fa_qq_.data() + group_row(d, s, hk, i) * nblk;
            char * dst = reinterpret_cast<char *>(fa_q_packed_.data()) + (size_t) (s * d.n_head_kv + hk) * bytes;
            cpu::amx_pack_q(rows.data(), n_rows, d.head_dim_k, dst);
        }
    }
    return bytes;
}

void cpu_backend::flash_attn(const fa_desc & d, const fa_plan & plan, const fa_args & a) {
    check_fa(d, a);
    if (plan.chunk <= 0 || plan.chunk % T_chunk != 0 || plan.n_chunks * plan.chunk < d.n_kv) {
        throw std::invalid_argument("flash_attn: plan does not cover n_kv (make it with plan_flash_attn)");
    }
    const int64_t n_q = d.n_head * d.n_tps;
    const int64_t dk = d.head_dim_k, dv = d.head_dim_v;
    const size_t q_elems = (size_t) (dk * d.n_head * d.n_tps * d.n_stream);
    fa_query fq{a.q, nullptr, 0, false, isa_};
    if (d.rot.k()) {
        fa_q_.assign(a.q, a.q + q_elems);
        fwht_blocks(fa_q_.data(), (int64_t) q_elems, d.rot.n_k);
        fq.q = fa_q_.data();
    }
    if (fa_q_dot_type(a.k.type) == ggml_type::q8_0) {
        // ggml's CPU flash attention quantizes Q to K's vec_dot_type (q8_0 for a q8_0 or q4_0 K) once per row
        // before its Q.K dots (ops.cpp: ggml_compute_forward_flash_attn_ext_f16_one_chunk, q_to_vec_dot); the f32
        // paths read the same values dequantized, so every path computes the same products
        const int64_t nblk = dk / QK8_0, n_rows = (int64_t) q_elems / dk;
        if (fq.q != fa_q_.data()) fa_q_.assign(a.q, a.q + q_elems);
        fa_qq_.resize((size_t) (n_rows * nblk));
        for (int64_t r = 0; r < n_rows; ++r) {
            round_row_q8_0(fa_q_.data() + r * dk, fa_qq_.data() + r * nblk, dk);
        }
        fq.q = fa_q_.data();
        fq.qq = fa_qq_.data();
        // the AMX tiles multiply q8_0 K blocks (fa_amx.h): a q4_0 K takes the FMA loops on the rounded Q
        fq.amx = fa_amx_ && a.k.type == ggml_type::q8_0 && isa_ == cpu::cpu_isa::avx512 && dk <= cpu::amx_max_head_dim &&
                 cpu::amx_int8_available();
        if (fq.amx) {
            fq.packed_bytes = pack_q_for_amx(d);
            fq.packed = reinterpret_cast<const char *>(fa_q_packed_.data());
        }
    }
    const size_t pstride = (size_t) (dv + 2);
    const size_t per_item = (size_t) n_q * pstride;
    const int64_t n_items = d.n_stream * plan.n_chunks;
    fa_partial_.resize((size_t) n_items * per_item);

    fa_scratch_.resize((size_t) pool_.size());
    pool_.parallel_for(n_items, [&](int64_t item, int thread) {
        const int64_t c = item % plan.n_chunks, s = item / plan.n_chunks;
        const int64_t c0 = c * plan.chunk;
        const int64_t c1 = std::min(d.n_kv, c0 + plan.chunk);
        run_chunk(d, a, fq, s, c0, c1, fa_partial_.data() + (size_t) item * per_item, fa_scratch_[(size_t) thread],
                  fa_grouped_);
    });

    // log-sum-exp merge of the chunks of each stream into out
    pool_.parallel_for(d.n_stream, [&](int64_t s, int) {
        const float * base = fa_partial_.data() + (size_t) s * (size_t) plan.n_chunks * per_item;
        for (int64_t r = 0; r < n_q; ++r) {
            const int64_t t = r / d.n_head, h = r % d.n_head;
            float * o = a.out + ((s * d.n_tps + t) * d.n_head + h) * dv;
            float mx = -INFINITY;
            for (int64_t c = 0; c < plan.n_chunks; ++c) mx = std::max(mx, base[(size_t) c * per_item + (size_t) r * pstride]);
            std::fill(o, o + dv, 0.0f);
            if (mx == -INFINITY) continue;  // every cell masked: zeros, as ggml's S == 0 guard
            float l = 0.0f;
            for (int64_t c = 0; c < plan.n_chunks; ++c) {
                const float * p = base + (size_t) c * per_item + (size_t) r * pstride;
                if (p[0] == -INFINITY) continue;
                const float w = expf(p[0] - mx);
                l += w * p[1];
                cpu::axpy_f32(o, p + 2, w, dv);
            }
            const float inv = 1.0f / l;
            for (int64_t e = 0; e < dv; ++e) o[e] *= inv;
            if (d.rot.v()) fwht_blocks(o, dv, d.rot.n_v);
        }
    });
}

}  // namespace kvsim
