// The loops of the grouped flash attention (fa_group.h) that do not depend on the instruction set, written once:
// the row blocks (4 query rows at a time; a short last block repeats its last row, whose lanes are not stored),
// the walk over a tile's cells (listed or 0..nt-1), the choice of the loops by KV type and the store of a block's
// scores. The instruction set comes in as a traits type `Isa` (fa_group_avx512.cpp, fa_group_avx2.cpp,
// fa_group_neon.cpp) with
//   qk_cells                     cells per Q.K block (4 rows x qk_cells scores per call);
//   qk_block<T>(q, qq, k, dk, pf, out, ld, n_valid, n_cells)
//                                scores of 4 rows q[r] (qq[r]: their q8_0 blocks, or null) against the K rows
//                                k[0..qk_cells), written to out[r * ld + c] for r < n_valid, c < n_cells;
//   pv_wide                      elements per P.V column block (a multiple of 16; the rest of a row goes by 16);
//   pv_cols<T, Listed, W>(acc, p, n_valid, v0, stride, nt, e0, live, cells, pf)
//                                acc[r][e0..e0+W) += sum over the live cells j of p[r][j] * V_j[e0..e0+W), for
//                                r < n_valid, with the accumulators in registers across the walk (for_each_cell).
// Include it inside the file's target region (isa_target.h), after every other include: its templates are
// compiled for that instruction set. Each traits type lives in an anonymous namespace, so every instantiation is
// internal to its file and the linker cannot pick one file's copy for another's instruction set.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "cpu/fa_group.h"

namespace kvsim::cpu::fa_loops {

// A Q.K block's scores from memory where lanes[r * row_step + c * cell_step] holds row r's score of cell c.
template <int row_step, int cell_step>
inline void store_lanes(const float * lanes, float * out, int64_t ld, int64_t n_valid, int64_t n_cells) {
    for (int64_t r = 0; r < n_valid; ++r) {
        for (int64_t c = 0; c < n_cells; ++c) out[r * ld + c] = lanes[r * row_step + c * cell_step];
    }
}

// The cell walk of a P.V column block: for each cell j < nt one prefetch step, then f(j, V_j) for a live cell
// (every listed cell when Listed: V_j is the row of cells[j]).
template <bool Listed, class F>
inline void for_each_cell(const char * v0, size_t stride, int64_t nt, const char * live, const int32_t * cells,
                          prefetch_stream & pf_out, F && f) {
    // a local copy: through the reference, the prefetch credit went to memory and back every cell, a
    // store-to-load chain longer than the cell's FMAs
    prefetch_stream pf = pf_out;
    for (int64_t j = 0; j < nt; ++j) {
        pf.step();
        if (!Listed && !live[j]) continue;
        f(j, v0 + (size_t) (Listed ? cells[j] : j) * stride);
    }
    pf_out = pf;
}

// fa_group_qk for one K type; Listed: K_j is the row of cells[j] (a template parameter, so the whole-tile loops
// compile exactly as without the list). The last block of cells repeats the tile's last cell (computed, not stored).
template <class Isa, ggml_type T, bool Listed>
void qk(const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt, int64_t dk, float * scores,
        int64_t ld, prefetch_stream & pf_out, const int32_t * cells, const block_q8_0 * const * qq) {
    // a local copy: through the reference, the prefetch credit went to memory and back every step, a
    // store-to-load chain longer than the step's FMAs
    prefetch_stream pf = pf_out;
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int64_t n_valid = std::min<int64_t>(4, n_rows - r0);
        const float * qb[4];
        const block_q8_0 * qqb[4] = {};
        for (int r = 0; r < 4; ++r) {
            qb[r] = q[std::min(r0 + r, n_rows - 1)];
            if (qq) qqb[r] = qq[std::min(r0 + r, n_rows - 1)];
        }
        for (int64_t j = 0; j < nt; j += Isa::qk_cells) {
            const char * kb[Isa::qk_cells];
            for (int c = 0; c < Isa::qk_cells; ++c) {
                const int64_t jj = std::min(j + c, nt - 1);
                kb[c] = k0 + (size_t) (Listed ? cells[jj] : jj) * stride;
            }
            const int64_t n_cells = std::min<int64_t>(Isa::qk_cells, nt - j);
            Isa::template qk_block<T>(qb, qqb, kb, dk, pf, scores + r0 * ld + j, ld, n_valid, n_cells);
        }
    }
    pf_out = pf;
}

// fa_group_pv for one V type; Listed as qk.
template <class Isa, ggml_type T, bool Listed>
void pv(float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0, size_t stride, int64_t nt,
        int64_t dv, const char * live, const int32_t * cells, prefetch_stream & pf) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int64_t n_valid = std::min<int64_t>(4, n_rows - r0);
        const float * pb[4];
        float * ab[4];
        for (int r = 0; r < 4; ++r) {
            const int64_t rr = std::min(r0 + r, n_rows - 1);
            pb[r] = p + rr * ld;
            ab[r] = acc[rr];
        }
        int64_t e0 = 0;
        for (; e0 + Isa::pv_wide <= dv; e0 += Isa::pv_wide) {
            Isa::template pv_cols<T, Listed, Isa::pv_wide>(ab, pb, n_valid, v0, stride, nt, e0, live, cells, pf);
        }
        for (; e0 < dv; e0 += 16) Isa::template pv_cols<T, Listed, 16>(ab, pb, n_valid, v0, stride, nt, e0, live, cells, pf);
    }
}

template <class Isa, ggml_type T>
void qk_any(const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt, int64_t dk,
            float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells, const block_q8_0 * const * qq) {
    if (cells) return qk<Isa, T, true>(q, n_rows, k0, stride, nt, dk, scores, ld, pf, cells, qq);
    qk<Isa, T, false>(q, n_rows, k0, stride, nt, dk, scores, ld, pf, nullptr, qq);
}

template <class Isa, ggml_type T>
void pv_any(float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0, size_t stride, int64_t nt,
            int64_t dv, const char * live, const int32_t * cells, prefetch_stream & pf) {
    if (cells) return pv<Isa, T, true>(acc, p, ld, n_rows, v0, stride, nt, dv, live, cells, pf);
    pv<Isa, T, false>(acc, p, ld, n_rows, v0, stride, nt, dv, live, nullptr, pf);
}

// f(std::integral_constant<ggml_type, T>{}) for a K/V type T the loops are compiled for; other types do nothing.
template <class F>
void with_kv_type(ggml_type t, F && f) {
    switch (t) {
        case ggml_type::f32: return f(std::integral_constant<ggml_type, ggml_type::f32>{});
        case ggml_type::f16: return f(std::integral_constant<ggml_type, ggml_type::f16>{});
        case ggml_type::q8_0: return f(std::integral_constant<ggml_type, ggml_type::q8_0>{});
        case ggml_type::q4_0: return f(std::integral_constant<ggml_type, ggml_type::q4_0>{});
        default: return;
    }
}

// fa_group_qk's contract; qq reaches the loops for a q8_0 K only.
template <class Isa>
void fa_qk(ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt,
           int64_t dk, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells,
           const block_q8_0 * const * qq) {
    with_kv_type(tk, [&](auto t) {
        constexpr ggml_type T = decltype(t)::value;
        qk_any<Isa, T>(q, n_rows, k0, stride, nt, dk, scores, ld, pf, cells, T == ggml_type::q8_0 ? qq : nullptr);
    });
}

// fa_group_pv's contract.
template <class Isa>
void fa_pv(ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,
           size_t stride, int64_t nt, int64_t dv, const char * live, prefetch_stream & pf, const int32_t * cells) {
    with_kv_type(tv, [&](auto t) {
        pv_any<Isa, decltype(t)::value>(acc, p, ld, n_rows, v0, stride, nt, dv, live, cells, pf);
    });
}

// The traits of an instruction set whose Q.K block is 4 rows x 2 cells in 8 lanes (lane 4c + r) and whose P.V
// goes 16 elements at a time (AVX2, NEON). Kern supplies
//   qk_lanes<T>(q, qq, k, dk, pf, lanes)   the block's 8 scores into lanes;
//   pv16<T, Listed>(acc, p, n_valid, v0, stride, nt, e0, live, cells, pf)   pv_cols for 16 elements.
template <class Kern>
struct isa_4x2_by_16 {
    static constexpr int qk_cells = 2;
    static constexpr int64_t pv_wide = 16;

    template <ggml_type T>
    static void qk_block(const float * const * q, const block_q8_0 * const * qq, const char * const * k, int64_t dk,
                         prefetch_stream & pf, float * out, int64_t ld, int64_t n_valid, int64_t n_cells) {
        alignas(32) float lanes[8];
        Kern::template qk_lanes<T>(q, qq, k, dk, pf, lanes);
        store_lanes<1, 4>(lanes, out, ld, n_valid, n_cells);
    }

    template <ggml_type T, bool Listed, int W, class... Args>
    static void pv_cols(Args &&... args) {
        static_assert(W == 16);
        Kern::template pv16<T, Listed>(std::forward<Args>(args)...);
    }
};

}  // namespace kvsim::cpu::fa_loops
