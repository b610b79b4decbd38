#include "timing/verify.h"

#include "kv_content.h"
#include "reference.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace kvsim {

void cell_shadow::apply_shift(const std::vector<int32_t> & shift) {
    for (size_t i = 0; i < cells_.size() && i < shift.size(); ++i) {
        cells_[i].rot += shift[i];
        ++cells_[i].passes;
    }
}

void cell_shadow::apply_copies(const std::vector<std::pair<uint32_t, uint32_t>> & copies) {
    for (const auto & [src, dst] : copies) {
        std::copy_n(cells_.begin() + (long) ((size_t) src * kv_size_), kv_size_, cells_.begin() + (long) ((size_t) dst * kv_size_));
    }
}

nlohmann::json verify_stats::json() const {
    return {{"steps", steps}, {"sequences", sequences}, {"failures", failures}, {"max_abs_err", max_err},
            {"first_failures", first_failures}};
}

double verify_tolerance(ggml_type type_k, ggml_type type_v) {
    auto tol = [](ggml_type t) {
        switch (t) {
            case ggml_type::f32: return 1e-4;
            case ggml_type::f16:
            case ggml_type::bf16: return 4e-3;
            case ggml_type::q8_0: return 4e-2;
            default: return 2.5e-1;
        }
    };
    return std::max(tol(type_k), tol(type_v));
}

namespace {
// K of a cell after its K-shifts: the rotations add up (the angle is linear in the position), the magnitude of each
// pass multiplies (ops.cpp: rope_yarn's mscale, attn_factor times 1 + 0.1 ln(1/freq_scale) with YaRN extrapolation).
void rotate_as_shifted(const rope_params & rope, const cell_shadow::cell_data & sd, float * k) {
    if (sd.passes == 0) return;
    ref_rope(rope, sd.rot, k);  // the rotation and one pass's magnitude
    if (sd.passes == 1) return;
    double m = rope.attn_factor;
    if (rope.ext_factor != 0.0f) m *= 1.0 + 0.1 * std::log(1.0 / rope.freq_scale);
    const double more = std::pow(m, (double) (sd.passes - 1));
    for (int i = 0; i < rope.n_rot; ++i) k[i] = (float) (k[i] * more);
}

// Naive attention in double over the cells of `seq` visible to a query at `p` in one stream.
std::vector<double> expected_out(const cell_shadow & shadow, const kv_cache & c, uint32_t stream, uint32_t n_kv,
                                 llama_seq_id seq, llama_pos p, const fa_desc & d, const float * q, const rope_params & rope) {
    const kv_cells & cells = c.cells(stream);
    const int64_t dk = d.head_dim_k, dv = d.head_dim_v, gqa = d.n_head / d.n_head_kv;
    std::vector<double> out((size_t) dv * d.n_head, 0.0);
    std::vector<float> k(dk), v(dv);
    for (int64_t h = 0; h < d.n_head; ++h) {
        const int64_t hk = h / gqa;
        std::vector<double> scores;
        std::vector<std::vector<double>> vals;
        for (uint32_t j = 0; j < n_kv; ++j) {
            if (cells.is_empty(j) || !cells.seq_has(j, seq)) continue;
            const llama_pos pj = cells.pos_get(j);
            if (pj > p || is_masked_swa(c.params().n_swa, c.params().swa, pj, p)) continue;
            const auto & sd = shadow.get(stream, j);
            for (int64_t x = 0; x < dk; ++x) k[x] = kv_value(0, kv_which::k, sd.seq, sd.pos, hk, x);
            for (int64_t x = 0; x < dv; ++x) v[x] = kv_value(0, kv_which::v, sd.seq, sd.pos, hk, x);
            rotate_as_shifted(rope, sd, k.data());
            double s = 0;
            for (int64_t x = 0; x < dk; ++x) s += (double) q[h * dk + x] * k[x];
            s *= d.scale;
            if (d.softcap > 0) s = d.softcap * std::tanh(s / d.softcap);
            scores.push_back(s);
            vals.emplace_back(v.begin(), v.end());
        }
        if (scores.empty()) continue;
        const double mx = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double & s : scores) sum += (s = std::exp(s - mx));
        for (size_t t = 0; t < scores.size(); ++t) {
            for (int64_t x = 0; x < dv; ++x) out[h * dv + x] += scores[t] / sum * vals[t][x];
        }
    }
    return out;
}
}  // namespace

void verify_step(const cell_shadow & shadow, const kv_cache & c, const slot_info & sinfo, const ubatch & ub,
                 const fa_desc & d, const std::vector<float> & q, const std::vector<float> & out, const rope_params & rope,
                 ggml_type type_k, ggml_type type_v, verify_stats & stats) {
    ++stats.steps;
    const double tol = verify_tolerance(type_k, type_v);
    const int64_t per_q = d.head_dim_k * d.n_head, per_o = d.head_dim_v * d.n_head;
    for (int64_t s = 0; s < d.n_stream; ++s) {
        // last token of each sequence in this stream block
        std::vector<std::pair<llama_seq_id, int64_t>> last;
        for (int64_t ii = 0; ii < d.n_tps; ++ii) {
            const llama_seq_id seq = ub.seq_id[(size_t) (s * d.n_tps + ii)][0];
            auto it = std::find_if(last.begin(), last.end(), [&](auto & e) { return e.first == seq; });
            if (it == last.end()) last.emplace_back(seq, ii);
            else it->second = ii;
        }
        for (const auto & [seq, ii] : last) {
            const int64_t t = s * d.n_tps + ii;
            const auto exp = expected_out(shadow, c, sinfo.strm[s], (uint32_t) d.n_kv, seq, ub.pos[(size_t) t], d,
                                          q.data() + t * per_q, rope);
            double err = 0;
            for (int64_t x = 0; x < per_o; ++x) {
                const double e = std::abs((double) out[(size_t) (t * per_o + x)] - exp[x]);
                err = std::isfinite(e) ? std::max(err, e) : INFINITY;  // std::max would drop a NaN
            }
            ++stats.sequences;
            stats.max_err = std::max(stats.max_err, err);
            if (err > tol) {
                ++stats.failures;
                if (stats.first_failures.size() < 5) {
                    stats.first_failures.push_back(fmt::format("cache {} stream {} seq {} pos {}: max |err| {:.3e} > {:.1e}",
                                                               c.name(), sinfo.strm[s], seq, ub.pos[(size_t) t], err, tol));
                }
            }
        }
    }
}

}  // namespace kvsim
