#include "cpu/fa_amx.h"

// GCC 12 flags the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics (GCC bug 105593).
#if !defined(__clang__)  // GCC's warnings; clang does not know them
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__AVX512F__) && defined(__F16C__) && defined(__linux__)
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define KVSIM_AMX 1
#endif

#include <algorithm>
#include <cstring>

namespace kvsim::cpu {

#if KVSIM_AMX
namespace {

// Tiles: 0-1 hold the int32 dot products of 16 cells x (up to 4 q8_0 blocks x 4 query rows), two groups of 16
// cells at a time; 2-3 hold their K quants (16 cells x 32 bytes); 4-7
// hold Q quants of up to 4 blocks in the VNNI layout TDPBSSD wants, block b's rows in columns 4b..4b+3 and zeros
// elsewhere, so the 4 blocks' products land side by side in one accumulator tile.
struct alignas(64) tile_config {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

constexpr int cells = 16;    // cells per tile (M)
constexpr int q_rows = 4;    // query rows per block of Q (4 of the 16 accumulator columns per q8_0 block)

// One packed 4-row block of Q (amx_pack_q): nblk B tiles of 8 x 64 bytes, then nblk x 16 scales laid out like the
// score lanes (4 * cell + row).
struct q_view {
    const int8_t * b;  // [nblk][8][64]
    const float * dq;  // [nblk][16]
    const int8_t * tile(int blk) const { return b + (size_t) blk * 512; }
    const float * scales(int blk) const { return dq + (size_t) blk * 16; }
};

q_view view_of(const void * packed, int nblk, int64_t row_block) {
    const char * p = static_cast<const char *>(packed) + (size_t) row_block * (size_t) nblk * 576;
    return {reinterpret_cast<const int8_t *>(p), reinterpret_cast<const float *>(p + (size_t) nblk * 512)};
}

inline void load_b(const q_view & t, int b0, int nb) {
    _tile_loadd(4, t.tile(b0), 64);
    if (nb > 1) _tile_loadd(5, t.tile(b0 + 1), 64);
    if (nb > 2) _tile_loadd(6, t.tile(b0 + 2), 64);
    if (nb > 3) _tile_loadd(7, t.tile(b0 + 3), 64);
}

// Dot products of cells k..k+15 (tile 0) and, when `two`, k+16..k+31 (tile 1) with Q blocks b0..b0+nb-1: the two
// groups alternate per block so the TMUL runs two independent accumulation chains (each block's multiply waits for
// the previous one into the same tile).
inline void issue_pair(const char * k, size_t stride, int b0, int nb, bool two) {
    constexpr size_t bs = sizeof(block_q8_0);
    const char * qa = k + (size_t) b0 * bs + offsetof(block_q8_0, qs);
    const char * qb = qa + (size_t) cells * stride;
    const long st = (long) stride;
    _tile_zero(0);
    if (two) _tile_zero(1);
    _tile_loadd(2, qa, st);
    if (two) _tile_loadd(3, qb, st);
    _tile_dpbssd(0, 2, 4);
    if (two) _tile_dpbssd(1, 3, 4);
    if (nb > 1) {
        _tile_loadd(2, qa + bs, st);
        if (two) _tile_loadd(3, qb + bs, st);
        _tile_dpbssd(0, 2, 5);
        if (two) _tile_dpbssd(1, 3, 5);
    }
    if (nb > 2) {
        _tile_loadd(2, qa + 2 * bs, st);
        if (two) _tile_loadd(3, qb + 2 * bs, st);
        _tile_dpbssd(0, 2, 6);
        if (two) _tile_dpbssd(1, 3, 6);
    }
    if (nb > 3) {
        _tile_loadd(2, qa + 3 * bs, st);
        if (two) _tile_loadd(3, qb + 3 * bs, st);
        _tile_dpbssd(0, 2, 7);
        if (two) _tile_dpbssd(1, 3, 7);
    }
}

// d_k of block b of the 16 cells, as f32 (the gather reads the 2-byte scale and the block's first 2 quants).
inline __m512 k_scales(const char * k, __m512i idx, int b) {
    const __m512i raw = _mm512_i32gather_epi32(idx, k + (size_t) b * sizeof(block_q8_0), 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(raw));
}

// Scale and add one accumulator tile (stored: row = cell, lane 4 * block + query row) into acc[g] (cells
// 4g..4g+3, lanes 4 * cell + row): a 4x4 transpose of 128-bit lanes turns each block's products into score lanes.
void finish(const int32_t * c, const char * k, __m512i idx, const q_view & t, int b0, int nb, __m512 * acc) {
    __m512 dk[4];
    for (int i = 0; i < nb; ++i) dk[i] = k_scales(k, idx, b0 + i);
    for (int g = 0; g < 4; ++g) {
        const __m512i r0 = _mm512_load_si512(c + 64 * g), r1 = _mm512_load_si512(c + 64 * g + 16);
        const __m512i r2 = _mm512_load_si512(c + 64 * g + 32), r3 = _mm512_load_si512(c + 64 * g + 48);
        const __m512i t0 = _mm512_shuffle_i32x4(r0, r1, 0x44), t1 = _mm512_shuffle_i32x4(r0, r1, 0xEE);
        const __m512i t2 = _mm512_shuffle_i32x4(r2, r3, 0x44), t3 = _mm512_shuffle_i32x4(r2, r3, 0xEE);
        const __m512i x[4] = {_mm512_shuffle_i32x4(t0, t2, 0x88), _mm512_shuffle_i32x4(t0, t2, 0xDD),
                              _mm512_shuffle_i32x4(t1, t3, 0x88), _mm512_shuffle_i32x4(t1, t3, 0xDD)};
        const __m512i sel = _mm512_setr_epi32(4 * g, 4 * g, 4 * g, 4 * g, 4 * g + 1, 4 * g + 1, 4 * g + 1, 4 * g + 1,
                                              4 * g + 2, 4 * g + 2, 4 * g + 2, 4 * g + 2, 4 * g + 3, 4 * g + 3, 4 * g + 3,
                                              4 * g + 3);
        for (int i = 0; i < nb; ++i) {
            const __m512 scale = _mm512_mul_ps(_mm512_permutexvar_ps(sel, dk[i]), _mm512_load_ps(t.scales(b0 + i)));
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x[i]), scale, acc[g]);
        }
    }
}

// Lanes 4 * cell + row -> 4 * row + cell, then row r's four scores to scores[(r0 + r) * ld + j ..].
inline void store_4x4(__m512 s, float * scores, int64_t ld, int64_t r0, int64_t n_valid, int64_t j) {
    const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    s = _mm512_permutexvar_ps(tr, s);
    if (n_valid > 0) _mm_storeu_ps(scores + (r0 + 0) * ld + j, _mm512_extractf32x4_ps(s, 0));
    if (n_valid > 1) _mm_storeu_ps(scores + (r0 + 1) * ld + j, _mm512_extractf32x4_ps(s, 1));
    if (n_valid > 2) _mm_storeu_ps(scores + (r0 + 2) * ld + j, _mm512_extractf32x4_ps(s, 2));
    if (n_valid > 3) _mm_storeu_ps(scores + (r0 + 3) * ld + j, _mm512_extractf32x4_ps(s, 3));
}

// One 4-row block of Q against cells [0, n_full) (n_full % 16 == 0), 32 cells (two accumulator tiles) at a time.
void qk_rows(const q_view & t, int nblk, const char * k0, size_t stride, int64_t n_full, float * scores, int64_t ld,
             int64_t r0, int64_t n_valid, prefetch_stream & pf) {
    const int nq = (nblk + 3) / 4;
    alignas(64) int32_t cbuf[2][cells * 16];
    __m512 acc[2][4];
    // byte offsets of the 16 cells' rows, for the scale gathers
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int) stride));
    if (nq == 1) load_b(t, 0, nblk);
    for (int64_t j = 0; j < n_full; j += 2 * cells) {
        const bool two = j + cells < n_full;
        const char * k = k0 + (size_t) j * stride;
        for (auto & a : acc[0]) a = _mm512_setzero_ps();
        for (auto & a : acc[1]) a = _mm512_setzero_ps();
        for (int b0 = 0; b0 < nblk; b0 += 4) {
            const int nb = std::min(4, nblk - b0);
            if (nq > 1) load_b(t, b0, nb);
            issue_pair(k, stride, b0, nb, two);
            _tile_stored(0, cbuf[0], 64);
            if (two) _tile_stored(1, cbuf[1], 64);
            finish(cbuf[0], k, idx, t, b0, nb, acc[0]);
            if (two) finish(cbuf[1], k + (size_t) cells * stride, idx, t, b0, nb, acc[1]);
            for (int i = 0; i < (two ? 2 : 1) * nb; ++i) pf.step();
        }
        for (int h = 0; h < (two ? 2 : 1); ++h) {
            for (int g = 0; g < 4; ++g) store_4x4(acc[h][g], scores, ld, r0, n_valid, j + h * cells + 4 * g);
        }
    }
}

}  // namespace

bool amx_int8_available() {
    static const bool ok = [] {
        constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;  // <asm/prctl.h>, Linux >= 5.16
        return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
    }();
    return ok;
}

namespace {
tile_config make_config() {
    tile_config c;
    for (int t = 0; t < 2; ++t) {
        c.rows[t] = cells;
        c.colsb[t] = 64;
    }
    for (int t = 2; t < 4; ++t) {
        c.rows[t] = cells;
        c.colsb[t] = QK8_0;
    }
    for (int t = 4; t < 8; ++t) {
        c.rows[t] = QK8_0 / 4;
        c.colsb[t] = 64;
    }
    return c;
}
}  // namespace

void amx_begin() {
    // a static object: GCC's _tile_loadconfig declares only 8 bytes read, so the stores that fill a local
    // configuration are dead-store eliminated (seen with GCC 12: ldtilecfg then read palette 1, no tiles)
    static const tile_config config = make_config();
    _tile_loadconfig(&config);
}

void amx_end() { _tile_release(); }

size_t amx_packed_q_bytes(int64_t n_rows, int64_t head_dim) {
    return (size_t) ((n_rows + q_rows - 1) / q_rows) * (size_t) (head_dim / QK8_0) * 576;
}

void amx_pack_q(const block_q8_0 * const * qq, int64_t n_rows, int64_t head_dim, void * dst) {
    const int nblk = (int) (head_dim / QK8_0);
    std::memset(dst, 0, amx_packed_q_bytes(n_rows, head_dim));
    for (int64_t r0 = 0; r0 < n_rows; r0 += q_rows) {
        char * p = static_cast<char *>(dst) + (size_t) (r0 / q_rows) * (size_t) nblk * 576;
        int8_t * b = reinterpret_cast<int8_t *>(p);
        float * dq = reinterpret_cast<float *>(p + (size_t) nblk * 512);
        for (int r = 0; r < q_rows; ++r) {
            const block_q8_0 * row = qq[std::min<int64_t>(r0 + r, n_rows - 1)];  // a short block repeats its last row
            for (int blk = 0; blk < nblk; ++blk) {
                // VNNI layout: B[kk][4n + i] = q[4kk + i] for accumulator column n = 4 * (blk % 4) + r
                for (int kk = 0; kk < 8; ++kk) std::memcpy(b + blk * 512 + kk * 64 + 16 * (blk % 4) + 4 * r, row[blk].qs + 4 * kk, 4);
                const float d = _cvtsh_ss(row[blk].d);
                for (int c = 0; c < 4; ++c) dq[blk * 16 + 4 * c + r] = d;
            }
        }
    }
}

void fa_amx_qk_q8_0(const void * packed_q, const float * const * q, int64_t n_rows, const char * k0, size_t stride,
                    int64_t nt, int64_t head_dim, float * scores, int64_t ld, prefetch_stream & pf) {
    const int nblk = (int) (head_dim / QK8_0);
    const int64_t n_full = nt / cells * cells;
    for (int64_t r0 = 0; r0 < n_rows && n_full > 0; r0 += q_rows) {
        const int64_t n_valid = std::min<int64_t>(q_rows, n_rows - r0);
        qk_rows(view_of(packed_q, nblk, r0 / q_rows), nblk, k0, stride, n_full, scores, ld, r0, n_valid, pf);
    }
    if (n_full < nt) {
        fa_group_qk(cpu_isa::avx512, ggml_type::q8_0, q, n_rows, k0 + (size_t) n_full * stride, stride, nt - n_full, head_dim,
                    scores + n_full, ld, pf);
    }
}

#else

bool amx_int8_available() { return false; }
void amx_begin() {}
void amx_end() {}
size_t amx_packed_q_bytes(int64_t, int64_t) { return 0; }
void amx_pack_q(const block_q8_0 * const *, int64_t, int64_t, void *) {}
void fa_amx_qk_q8_0(const void *, const float * const *, int64_t, const char *, size_t, int64_t, int64_t, float *,
                    int64_t, prefetch_stream &) {}

#endif

}  // namespace kvsim::cpu
