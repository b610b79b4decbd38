#include "timing/kernel_hooks.h"

#include "bandwidth.h"
#include "bytes.h"
#include "cpu/cpu_backend.h"
#include "kv_content.h"
#include "timing/mask_tracker.h"
#include "timing/verify.h"
#include "sched/step_time.h"
#include "util/errors.h"
#include "util/nvtx.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fmt/format.h>
#include <thread>

namespace kvsim {

namespace {
using clock_t_ = std::chrono::steady_clock;

std::vector<int32_t> shift_array(const kv_cache & c);

// Consecutive ubatch stream blocks [first, first + count) that live in cache streams [stream0, stream0 + count).
struct stream_run {
    int64_t first = 0, stream0 = 0, count = 0;
};
std::vector<stream_run> stream_runs(const slot_info & sinfo);
fa_desc run_desc(const fa_desc & d, const stream_run & r);

double ns_since(clock_t_::time_point t0) {
    return std::chrono::duration<double, std::nano>(clock_t_::now() - t0).count();
}

// K/V buffers of the timed layers of one cache.
// All in backend memory (host for the CPU backend, device for CUDA).
struct cache_buffers {
    const kv_cache * cache = nullptr;
    std::vector<std::shared_ptr<void>> mem;   // owns the K/V tensors' data
    std::vector<kv_tensor> k, v;
    std::shared_ptr<void> mask;   // f16 [n_kv, n_tps, n_stream] of the last build
    size_t mask_bytes = 0;
    mask_tracker mask_state;      // what `mask` was built from (drive.incremental_mask)
    std::unique_ptr<cell_shadow> shadow;
};

class kernel_hooks final : public replay_hooks, public decode_observer {
public:
    kernel_hooks(const kernel_options & o, std::unique_ptr<attn_backend> be, limit_probe limit, kernel_drive drive)
        : o_(o), be_(std::move(be)), probe_(std::move(limit)), drive_(std::move(drive)) {}

    void begin(context & ctx, const uint64_t * step, const double * sim_time, step_time_model * tm) override {
        ctx_ = &ctx;
        step_ = step;
        sim_time_ = sim_time;
        tm_ = tm;
        const auto & m = ctx.model();
        const auto & p = ctx.params();
        rot_ = attn_rot_config(p.type_k, p.type_v, m.head_dim, m.head_dim, o_.no_rot);
        rope_.n_rot = (int) m.head_dim;
        rope_.mode = m.rope == rope_type::neox ? rope_mode::neox : rope_mode::norm;
        rope_.freq_base = m.rope_freq_base;
        rope_.freq_scale = m.rope_freq_scale;
        limit_ = probe_.measure ? probe_.measure() : measure_bandwidth(size_t(256) << 20, threads(), 5);
        for (kv_cache * c : ctx.memory().caches()) {
            bufs_.push_back(alloc(*c));
        }
    }

    decode_observer * observer() override { return this; }
    const std::vector<bandwidth_row> & rows() const override { return rows_; }
    uint64_t verify_failures() const override { return verify_.failures; }

    void on_update(const kv_memory & mem) override {
        (void) mem;
        for (auto & b : bufs_) {
            copy_streams(b);
            if (!b.cache->get_has_shift()) continue;
            const std::vector<int32_t> shift = shift_array(*b.cache);
            // the shadow follows the cells' shifts on its own, so --verify also catches a K-shift
            // kernel that did not run or rotated wrongly
            if (o_.verify) b.shadow->apply_shift(shift);
            k_shift(b, shift);
        }
    }

    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        cache_buffers & b = buffers_of(c);
        if (o_.verify) write_placed(b, sinfo, ub);
        ++n_seen_;
        if (!should_time()) return;
        time_step(b, sinfo, ub, n_kv);
    }

    // A state restore: the cells' K/V are the saved ones; kvsim's content is a function of (seq,
    // pos), so the verify shadow gets the restored cells' rows. Nothing is timed.
    void on_restore(const kv_cache & c, const slot_info & sinfo, const ubatch & ub) override {
        if (o_.verify) write_placed(buffers_of(c), sinfo, ub);
    }

    nlohmann::json summary() const override;
    std::vector<std::pair<std::string, std::string>> terminal_rows() const override;

private:
    int threads() const {
        return o_.threads > 0 ? o_.threads : std::max(1, (int) std::thread::hardware_concurrency());
    }
    cache_buffers alloc(const kv_cache & c);
    cache_buffers & buffers_of(const kv_cache & c) {
        for (auto & b : bufs_) {
            if (b.cache == &c) return b;
        }
        throw std::logic_error("kernel hooks: unknown cache " + c.name());
    }
    bool should_time();
    void write_placed(cache_buffers & b, const slot_info & sinfo, const ubatch & ub);
    void write_row(const kv_tensor & t, int64_t stream, int64_t cell, uint32_t layer, kv_which which, llama_seq_id seq,
                   llama_pos pos, int rot_n);
    void copy_streams(cache_buffers & b);
    void k_shift(cache_buffers & b, const std::vector<int32_t> & shift);
    void time_step(cache_buffers & b, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv);
    fa_desc fa_for(const cache_buffers & b, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) const;
    double build_mask(cache_buffers & b, const kq_mask_desc & md, const slot_info & sinfo, const kq_mask_stream * streams);
    void ensure_q_out(size_t q_floats, size_t out_floats);
    // Nanoseconds of `calls` by the drive's clock (steady_clock around synchronous calls when it has none).
    double timed(const std::function<void()> & calls) const {
        if (drive_.time_ns) return drive_.time_ns(calls);
        const auto t0 = clock_t_::now();
        calls();
        return ns_since(t0);
    }

    kernel_options o_;
    std::unique_ptr<attn_backend> be_;
    context * ctx_ = nullptr;
    const uint64_t * step_ = nullptr;
    const double * sim_time_ = nullptr;
    step_time_model * tm_ = nullptr;
    attn_rot rot_;
    rope_params rope_;
    limit_probe probe_;
    kernel_drive drive_;
    bandwidth_result limit_;
    std::vector<cache_buffers> bufs_;
    std::vector<bandwidth_row> rows_;
    uint64_t n_seen_ = 0, next_time_ = 0, every_ = 1;
    double spent_ns_ = 0, attn_ns_total_ = 0, kv_bytes_total_ = 0;
    uint64_t shift_events_ = 0, shift_hazards_ = 0, mask_updates_ = 0;
    double pending_shift_ns_ = 0;
    uint64_t pending_shift_bytes_ = 0;
    verify_stats verify_;
    std::vector<uint8_t> row_staging_;
    // per-step Q and output in backend memory, grown when a step needs more (Q's values depend only on the index,
    // so its upload happens only when it grows); the host copies serve --verify
    std::vector<float> q_, out_;
    std::shared_ptr<void> dev_q_, dev_out_, dev_shift_;
    size_t dev_q_floats_ = 0, dev_out_floats_ = 0, dev_shift_ints_ = 0;
};

cache_buffers kernel_hooks::alloc(const kv_cache & c) {
    cache_buffers b;
    b.cache = &c;
    const auto & m = ctx_->model();
    const auto & p = ctx_->params();
    const uint32_t layers = std::max<uint32_t>(1, o_.time_layers);
    std::vector<uint8_t> host;
    for (uint32_t l = 0; l < layers; ++l) {
        for (int which = 0; which < 2; ++which) {
            kv_tensor t;
            t.type = which == 0 ? p.type_k : p.type_v;
            t.head_dim = m.head_dim;
            t.n_head_kv = m.n_head_kv;
            t.kv_size = c.get_size();
            t.n_stream = c.get_n_stream();
            // deterministic content everywhere, so timing reads real values (never NaN)
            host.resize(t.total_bytes());
            kv_tensor staging = t;
            staging.data = host.data();
            const int rot_n = which == 0 ? rot_.n_k : rot_.n_v;
            for (int64_t s = 0; s < t.n_stream; ++s) {
                for (int64_t cell = 0; cell < t.kv_size; ++cell) {
                    write_kv_cell(staging, s, cell, l, which == 0 ? kv_which::k : kv_which::v, 0, (llama_pos) cell, rot_n);
                }
            }
            b.mem.push_back(be_->alloc(t.total_bytes()));
            t.data = b.mem.back().get();
            be_->upload(t.data, host.data(), t.total_bytes());
            (which == 0 ? b.k : b.v).push_back(t);
        }
    }
    if (o_.verify) b.shadow = std::make_unique<cell_shadow>(c.get_size(), c.get_n_stream());
    return b;
}

bool kernel_hooks::should_time() {
    if (o_.time_budget_s > 0 && spent_ns_ > o_.time_budget_s * 1e9) return false;
    if (n_seen_ - 1 < next_time_) return false;
    // geometric sampling without knowing the replay's length: every ubatch at first, then the
    // interval doubles every 64 timed steps (an explicit --time-every fixes it)
    if (o_.time_every > 0) {
        every_ = o_.time_every;
    } else if (!rows_.empty() && rows_.size() % 64 == 0) {
        every_ *= 2;
    }
    next_time_ = n_seen_ - 1 + every_;
    return true;
}

// One cell's row written through host staging (the tensor may live on the device).
void kernel_hooks::write_row(const kv_tensor & t, int64_t stream, int64_t cell, uint32_t layer, kv_which which,
                             llama_seq_id seq, llama_pos pos, int rot_n) {
    kv_tensor one = t;
    row_staging_.resize(t.row_bytes());
    one.data = row_staging_.data();
    one.kv_size = 1;
    one.n_stream = 1;
    write_kv_cell(one, 0, 0, layer, which, seq, pos, rot_n);
    be_->upload(t.row(stream, cell), row_staging_.data(), t.row_bytes());
}

void kernel_hooks::write_placed(cache_buffers & b, const slot_info & sinfo, const ubatch & ub) {
    const uint32_t per = sinfo.size();
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        for (uint32_t ii = 0; ii < per; ++ii) {
            const uint32_t i = s * per + ii;
            const uint32_t cell = sinfo.idxs[s][ii];
            const llama_seq_id seq = ub.seq_id[i][0];
            for (size_t l = 0; l < b.k.size(); ++l) {
                write_row(b.k[l], sinfo.strm[s], cell, (uint32_t) l, kv_which::k, seq, ub.pos[i], rot_.n_k);
                write_row(b.v[l], sinfo.strm[s], cell, (uint32_t) l, kv_which::v, seq, ub.pos[i], rot_.n_v);
            }
            b.shadow->place(sinfo.strm[s], cell, seq, ub.pos[i]);
        }
    }
}

// llama_kv_cache::update: whole-stream K/V buffer copies queued by cross-stream seq_cp.
void kernel_hooks::copy_streams(cache_buffers & b) {
    for (const auto & [src, dst] : b.cache->pending_copies()) {
        for (auto * ts : {&b.k, &b.v}) {
            for (const kv_tensor & t : *ts) be_->copy(t.row(dst, 0), t.row(src, 0), t.stream_bytes());
        }
    }
    if (o_.verify) b.shadow->apply_copies(b.cache->pending_copies());
}

// Pending shift of every cell, [kv_size * n_stream] (llama_kv_cache::set_input_k_shift).
std::vector<int32_t> shift_array(const kv_cache & c) {
    std::vector<int32_t> shift((size_t) c.get_size() * c.get_n_stream());
    for (uint32_t s = 0; s < c.get_n_stream(); ++s) {
        const auto & sh = c.cells(s).shift();
        std::copy(sh.begin(), sh.end(), shift.begin() + (size_t) s * c.get_size());
    }
    return shift;
}

void kernel_hooks::k_shift(cache_buffers & b, const std::vector<int32_t> & shift) {
    const kv_cache & c = *b.cache;
    ++shift_events_;
    // without --verify the data need not stay consistent: run (and time) the shift only when the
    // budget allows, like the attention samples
    if (!o_.verify && o_.time_budget_s > 0 && spent_ns_ > o_.time_budget_s * 1e9) return;
    kshift_desc d;
    d.rope = rope_;
    d.rot = rot_;
    d.on_null_rot = null_rot_policy::plain;
    KVSIM_NVTX_RANGE("k_shift", (int64_t) shift.size());
    if (shift.size() > dev_shift_ints_) {
        dev_shift_ = be_->alloc(shift.size() * sizeof(int32_t));
        dev_shift_ints_ = shift.size();
    }
    be_->upload(dev_shift_.get(), shift.data(), shift.size() * sizeof(int32_t));
    const double ns = timed([&] {
        for (const auto & k : b.k) {
            const kshift_report r = be_->k_shift(d, k, (const int32_t *) dev_shift_.get());
            shift_hazards_ += r.null_rotation_hazard ? 1 : 0;
        }
    });
    spent_ns_ += ns;
    pending_shift_ns_ += ns / (double) b.k.size();
    pending_shift_bytes_ += kshift_bytes(c.get_size(), c.get_n_stream(), b.k[0].n_head_kv, b.k[0].type, b.k[0].head_dim);
}

// Ubatch stream blocks [first, first + count) whose cache streams are consecutive, from stream0: one flash-attention
// call each (fa_args reads K/V of streams stream0 + s). Upstream's sequential split keeps a ubatch's streams
// consecutive (llama_kv_cache::get_k views streams s0..s1), so this is one run in practice; K/V must still be read
// from the stream the mask and --verify use, sinfo.strm[s], whatever the ubatch.
std::vector<stream_run> stream_runs(const slot_info & sinfo) {
    std::vector<stream_run> runs;
    for (uint32_t s = 0; s < sinfo.n_stream(); ++s) {
        if (!runs.empty() && sinfo.strm[s] == runs.back().stream0 + runs.back().count) {
            ++runs.back().count;
        } else {
            runs.push_back({(int64_t) s, (int64_t) sinfo.strm[s], 1});
        }
    }
    return runs;
}

fa_desc run_desc(const fa_desc & d, const stream_run & r) {
    fa_desc dr = d;
    dr.n_stream = r.count;
    return dr;
}

fa_desc kernel_hooks::fa_for(const cache_buffers & b, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) const {
    const auto & m = ctx_->model();
    fa_desc d;
    d.head_dim_k = d.head_dim_v = m.head_dim;
    d.n_head = m.n_head;
    d.n_head_kv = m.n_head_kv;
    d.n_kv = n_kv;
    d.n_stream = sinfo.n_stream();
    d.n_tps = ub.n_tokens / d.n_stream;
    d.scale = 1.0f / std::sqrt((float) m.head_dim);
    d.softcap = m.attn_softcap;
    d.rot = rot_;
    (void) b;
    return d;
}

// Build (or, with drive.incremental_mask and the same shape and streams as the last step, update) the step's mask
// in b.mask; returns the kernel time in ns.
double kernel_hooks::build_mask(cache_buffers & b, const kq_mask_desc & md, const slot_info & sinfo, const kq_mask_stream * streams) {
    KVSIM_NVTX_RANGE("kq_mask", md.n_kv);
    const size_t mask_bytes = (size_t) md.n_kv * md.n_tps * md.n_stream * sizeof(uint16_t);
    if (mask_bytes > b.mask_bytes) {
        b.mask = be_->alloc(mask_bytes);
        b.mask_bytes = mask_bytes;
        b.mask_state.forget();
    }
    double ns = 0;
    if (drive_.incremental_mask && b.mask_state.plan(md, sinfo.strm, streams)) {
        ns = timed([&] { be_->update_kq_mask(md, streams, b.mask_state.changes(), b.mask.get()); });
        ++mask_updates_;
    } else {
        ns = timed([&] { be_->build_kq_mask(md, streams, b.mask.get()); });
    }
    if (drive_.incremental_mask) b.mask_state.remember(md, sinfo.strm, streams);
    return ns;
}

void kernel_hooks::ensure_q_out(size_t q_floats, size_t out_floats) {
    if (q_floats > dev_q_floats_) {
        q_.resize(q_floats);
        for (size_t i = 0; i < q_.size(); ++i) q_[i] = std::sin(0.37f * (float) (i + 1));
        dev_q_ = be_->alloc(q_floats * sizeof(float));
        be_->upload(dev_q_.get(), q_.data(), q_floats * sizeof(float));
        dev_q_floats_ = q_floats;
    }
    if (out_floats > dev_out_floats_) {
        dev_out_ = be_->alloc(out_floats * sizeof(float));
        dev_out_floats_ = out_floats;
    }
}

void kernel_hooks::time_step(cache_buffers & b, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) {
    const kv_cache & c = *b.cache;
    const fa_desc d = fa_for(b, sinfo, ub, n_kv);
    kq_mask_desc md;
    md.n_kv = n_kv;
    md.n_tps = d.n_tps;
    md.n_stream = d.n_stream;
    md.n_swa = c.params().n_swa;
    md.swa = c.params().swa;
    md.type = ggml_type::f16;
    std::vector<llama_seq_id> tok_seq(ub.n_tokens);
    for (uint32_t i = 0; i < ub.n_tokens; ++i) tok_seq[i] = ub.seq_id[i][0];
    std::vector<kq_mask_stream> streams(d.n_stream);
    for (int64_t s = 0; s < d.n_stream; ++s) {
        const kv_cells & cells = c.cells(sinfo.strm[s]);
        streams[s] = {cells.pos().data(), cells.seq().data(), ub.pos.data() + s * d.n_tps, tok_seq.data() + s * d.n_tps};
    }
    const double mask_ns = build_mask(b, md, sinfo, streams.data());

    const size_t q_floats = (size_t) d.head_dim_k * d.n_head * d.n_tps * d.n_stream;
    const size_t out_floats = (size_t) d.head_dim_v * d.n_head * d.n_tps * d.n_stream;
    ensure_q_out(q_floats, out_floats);
    const std::vector<stream_run> runs = stream_runs(sinfo);
    std::vector<fa_plan> plans;
    for (const stream_run & sr : runs) plans.push_back(be_->plan_flash_attn(run_desc(d, sr)));
    double attn_ns = 0;
    {
        KVSIM_NVTX_RANGE("attention", n_kv);
        for (size_t l = 0; l < b.k.size(); ++l) {
            attn_ns += timed([&] {
                for (size_t r = 0; r < runs.size(); ++r) {
                    const stream_run & sr = runs[r];
                    const int64_t q_off = sr.first * d.n_tps * d.n_head * d.head_dim_k;
                    const int64_t o_off = sr.first * d.n_tps * d.n_head * d.head_dim_v;
                    const auto * mask = static_cast<const uint16_t *>(b.mask.get()) + sr.first * d.n_tps * n_kv;
                    fa_args a{static_cast<const float *>(dev_q_.get()) + q_off, b.k[l], b.v[l], sr.stream0, mask, ggml_type::f16,
                              static_cast<float *>(dev_out_.get()) + o_off};
                    be_->flash_attn(run_desc(d, sr), plans[r], a);
                }
            });
        }
    }
    const bool verify_now = o_.verify && (o_.verify_every == 0 || rows_.size() % o_.verify_every == 0 || o_.verify_every == 1);
    if (verify_now) {
        out_.resize(out_floats);
        be_->download(out_.data(), dev_out_.get(), out_floats * sizeof(float));
    }
    attn_ns /= (double) b.k.size();
    spent_ns_ += mask_ns + attn_ns * (double) b.k.size();

    bandwidth_row r;
    r.step = step_ ? *step_ : 0;
    r.sim_time = sim_time_ ? *sim_time_ : 0;
    r.cache = c.name();
    r.n_kv = n_kv;
    r.tokens = ub.n_tokens;
    r.n_stream = (uint32_t) d.n_stream;
    r.layers_timed = (uint32_t) b.k.size();
    // bytes of the cells the ubatch's sequences hold: the kernel skips tiles masked for every
    // token, so other sequences' cells in a shared stream are not read
    uint64_t owned = 0;
    for (int64_t st = 0; st < d.n_stream; ++st) {
        seq_set mine;
        for (int64_t ii = 0; ii < d.n_tps; ++ii) {
            for (llama_seq_id q : ub.seq_id[(size_t) (st * d.n_tps + ii)]) mine.set(q);
        }
        const kv_cells & cells = c.cells(sinfo.strm[st]);
        for (uint32_t j = 0; j < n_kv; ++j) owned += (cells.seq_get_all(j) & mine).any();
    }
    r.kv_bytes = owned * fa_kv_bytes(1, 1, d.n_head_kv, b.k[0].type, d.head_dim_k, b.v[0].type, d.head_dim_v);
    r.mask_bytes = kq_mask_bytes(n_kv, d.n_tps, d.n_stream, ggml_type::f16);
    r.shift_bytes = pending_shift_bytes_;
    r.mask_ns = mask_ns;
    r.attn_ns = attn_ns;
    r.shift_ns = pending_shift_ns_;
    r.attn_gbs = attn_ns > 0 ? (double) r.kv_bytes / attn_ns : 0;
    r.frac_of_limit = limit_.read_gbs > 0 ? r.attn_gbs / limit_.read_gbs : 0;
    rows_.push_back(r);
    pending_shift_ns_ = 0;
    pending_shift_bytes_ = 0;
    attn_ns_total_ += attn_ns;
    kv_bytes_total_ += (double) r.kv_bytes;
    if (o_.measured_step_time && tm_ && kv_bytes_total_ > 0) {
        tm_->measured_s_per_kv_byte = attn_ns_total_ * 1e-9 / kv_bytes_total_;
    }
    if (verify_now) {
        verify_step(*b.shadow, c, sinfo, ub, d, q_, out_, rope_, b.k[0].type, b.v[0].type, verify_);
    }
}

// Timed ubatches of one kind: decode (one query token per stream, the memory-bound case kvbench measures) or
// several tokens per stream (prompt chunks, sequences decoding together in a unified cache: more arithmetic per
// byte, so their GB/s is not a bandwidth efficiency).
struct attn_class {
    size_t ubatches = 0;
    double ns = 0, bytes = 0;
    double gbs() const { return ns > 0 ? bytes / ns : 0; }
};

std::pair<attn_class, attn_class> split_by_tokens(const std::vector<bandwidth_row> & rows) {
    attn_class one, more;
    for (const auto & r : rows) {
        attn_class & c = r.tokens <= r.n_stream ? one : more;
        ++c.ubatches;
        c.ns += r.attn_ns;
        c.bytes += (double) r.kv_bytes;
    }
    return {one, more};
}

nlohmann::json kernel_hooks::summary() const {
    std::vector<double> fr;
    double mask_ns = 0;
    for (const auto & r : rows_) {
        fr.push_back(r.frac_of_limit);
        mask_ns += r.mask_ns;
    }
    std::sort(fr.begin(), fr.end());
    const double gbs = attn_ns_total_ > 0 ? kv_bytes_total_ / attn_ns_total_ : 0;
    const auto [one, more] = split_by_tokens(rows_);
    const auto class_json = [&](const attn_class & c) {
        return nlohmann::json{{"ubatches", c.ubatches}, {"attention_seconds", c.ns * 1e-9}, {"gbs", c.gbs()},
                              {"frac_of_limit", limit_.read_gbs > 0 ? c.gbs() / limit_.read_gbs : 0}};
    };
    const nlohmann::json by_tokens = {{"one_per_stream", class_json(one)}, {"several_per_stream", class_json(more)}};
    nlohmann::json j = {
        {"backend", be_->kind() == backend_kind::cpu ? "cpu" : "cuda"},
        {"threads", threads()},
        {"measured_limit_gbs", {{"read", limit_.read_gbs}, {"copy", limit_.copy_gbs}}},
        {"layers_timed", std::max<uint32_t>(1, o_.time_layers)},
        {"layers_scaled_note", "times are per layer; the model's other layers are assumed to cost the same"},
        {"ubatches_seen", n_seen_},
        {"ubatches_timed", rows_.size()},
        {"kernel_wall_seconds", spent_ns_ * 1e-9},
        {"attention_gbs", gbs},
        {"attention_frac_of_limit", limit_.read_gbs > 0 ? gbs / limit_.read_gbs : 0},
        {"attention_frac_median", fr.empty() ? 0.0 : fr[fr.size() / 2]},
        {"attention_by_tokens", by_tokens},
        {"mask_ns_mean", rows_.empty() ? 0.0 : mask_ns / (double) rows_.size()},
        {"mask_updates", mask_updates_},   // timed steps whose mask was updated in place (kernel_drive), not built
        {"k_shift_events", shift_events_},
        {"k_shift_null_rotation_hazards", shift_hazards_},
        {"rotation", {{"k", rot_.n_k}, {"v", rot_.n_v}}},
    };
    if (o_.verify) j["verify"] = verify_.json();
    return j;
}

std::vector<std::pair<std::string, std::string>> kernel_hooks::terminal_rows() const {
    const double gbs = attn_ns_total_ > 0 ? kv_bytes_total_ / attn_ns_total_ : 0;
    const auto [one, more] = split_by_tokens(rows_);
    const auto pct = [&](double g) { return limit_.read_gbs > 0 ? 100.0 * g / limit_.read_gbs : 0.0; };
    std::vector<std::pair<std::string, std::string>> rows = {
        {"measured limit", probe_.measure ? fmt::format("{:.1f} GB/s {}", limit_.read_gbs, probe_.what)
                                          : fmt::format("{:.1f} GB/s read, {:.1f} GB/s copy ({} threads)", limit_.read_gbs,
                                                        limit_.copy_gbs, threads())},
        {"attention (measured)", fmt::format("{} of {} ubatches timed, {:.2f} GB/s = {:.0f}% of the {} limit", rows_.size(),
                                             n_seen_, gbs, pct(gbs), probe_.measure ? probe_.what : "read")},
        {"  1 token per stream", fmt::format("{} ubatches, {:.3f} s, {:.2f} GB/s = {:.0f}%", one.ubatches, one.ns * 1e-9,
                                            one.gbs(), pct(one.gbs()))},
        {"  more tokens", fmt::format("{} ubatches, {:.3f} s, {:.2f} GB/s (more arithmetic per byte)", more.ubatches,
                                     more.ns * 1e-9, more.gbs())},
        {"K-shift events", fmt::format("{}{}", shift_events_,
                                       shift_hazards_ ? fmt::format(" ({} with upstream's null-rotation hazard)", shift_hazards_) : "")},
    };
    if (o_.verify) {
        rows.emplace_back("verify", fmt::format("{} sequences at {} steps, max |err| {:.2e}, {} failures", verify_.sequences,
                                                verify_.steps, verify_.max_err, verify_.failures));
    }
    return rows;
}
}  // namespace

std::unique_ptr<replay_hooks> make_kernel_hooks(const kernel_options & o, std::unique_ptr<attn_backend> backend,
                                                limit_probe limit, kernel_drive drive) {
    return std::make_unique<kernel_hooks>(o, std::move(backend), std::move(limit), std::move(drive));
}

std::unique_ptr<replay_hooks> make_cpu_kernel_hooks(const kernel_options & o) {
    return make_kernel_hooks(o, make_cpu_backend(o.threads > 0 ? o.threads : std::max(1, (int) std::thread::hardware_concurrency())));
}

}  // namespace kvsim
