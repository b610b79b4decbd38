#include "timing/kernel_hooks.h"

#include "bytes.h"
#include "cpu/cpu_backend.h"
#include "timing/kernel_account.h"
#include "timing/kernel_report.h"
#include "timing/kv_buffers.h"
#include "timing/step_feedback.h"
#include "timing/step_sampler.h"
#include "timing/verify.h"

#include <algorithm>
#include <thread>

namespace kvsim {

namespace {

// The replay's hook interface over the parts: the decode observer's events become buffer writes (kv_buffers),
// K-shifts and sampled steps (step_kernels, step_sampler), accounted (kernel_account) and fed back (step_feedback);
// the report side reads the accounting (kernel_report).
class kernel_hooks final : public replay_hooks, public decode_observer {
public:
    kernel_hooks(const kernel_options & o, std::unique_ptr<attn_backend> be, limit_probe limit, kernel_drive drive)
        : o_(o), be_(std::move(be)), probe_(std::move(limit)), drive_(std::move(drive)), sampler_(o) {}

    void begin(context & ctx, const sim_clock & clock, attention_feedback * feedback) override {
        clock_ = &clock;
        feedback_ = feedback;
        const auto & m = ctx.model();
        const auto & p = ctx.params();
        rot_ = attn_rot_config(p.type_k, p.type_v, m.head_dim, m.head_dim, o_.no_rot);
        kernels_ = std::make_unique<step_kernels>(*be_, drive_, m, p.rope, rot_);
        limit_ = probe_.measure ? probe_.measure() : measure_bandwidth(size_t(256) << 20, threads(), 5);
        const kv_layout layout{p.type_k, p.type_v, m.head_dim, m.n_head_kv, layers()};
        bufs_ = std::make_unique<kv_buffers>(*be_, layout, rot_, o_.verify);
        for (kv_cache * c : ctx.memory().caches()) bufs_->add(*c);
    }

    decode_observer * observer() override { return this; }
    const std::vector<bandwidth_row> & rows() const override { return acct_.rows(); }
    uint64_t verify_failures() const override { return verify_.failures; }

    void on_update(const kv_memory & mem) override {
        (void) mem;
        for (auto & b : bufs_->all()) {
            bufs_->copy_streams(b);
            if (!b.cache->get_has_shift()) continue;
            const std::vector<int32_t> shift = shift_array(*b.cache);
            // the shadow follows the cells' shifts on its own, so --verify also catches a K-shift
            // kernel that did not run or rotated wrongly
            if (o_.verify) b.shadow->apply_shift(shift);
            k_shift(b, shift);
        }
    }

    void on_apply(const kv_cache & c, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv) override {
        cache_buffers & b = bufs_->of(c);
        bufs_->write_placed(b, sinfo, ub);
        const step_sample s = sampler_.next(acct_.spent_ns());
        if (s.time) time_step(b, sinfo, ub, n_kv, s.verify);
    }

    // A state restore: the cells' K/V are the saved ones; kvsim's content is a function of (seq,
    // pos), so the verify shadow gets the restored cells' rows. Nothing is timed.
    void on_restore(const kv_cache & c, const slot_info & sinfo, const ubatch & ub) override {
        bufs_->write_placed(bufs_->of(c), sinfo, ub);
    }

    nlohmann::json summary() const override { return kernel_summary(report_input()); }
    std::vector<std::pair<std::string, std::string>> terminal_rows() const override {
        return kernel_terminal_rows(report_input());
    }

private:
    int threads() const {
        return o_.threads > 0 ? o_.threads : std::max(1, (int) std::thread::hardware_concurrency());
    }
    uint32_t layers() const { return std::max<uint32_t>(1, o_.time_layers); }
    void k_shift(const cache_buffers & b, const std::vector<int32_t> & shift);
    void time_step(cache_buffers & b, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv, bool verify_now);
    bandwidth_row step_row(const cache_buffers & b, const slot_info & sinfo, const ubatch & ub, const fa_desc & d,
                           const step_times & t) const;
    kernel_report_input report_input() const {
        return {&acct_, &sampler_, limit_, (bool) probe_.measure, probe_.what, be_->kind(), threads(), layers(), rot_,
                o_.verify ? &verify_ : nullptr, feedback_ != nullptr && o_.measured_step_time};
    }

    kernel_options o_;
    std::unique_ptr<attn_backend> be_;
    limit_probe probe_;
    kernel_drive drive_;
    const sim_clock * clock_ = nullptr;             // from begin()
    attention_feedback * feedback_ = nullptr;      // from begin(); null: no step time to feed
    attn_rot rot_;
    bandwidth_result limit_;
    std::unique_ptr<kv_buffers> bufs_;        // from begin()
    std::unique_ptr<step_kernels> kernels_;   // from begin()
    step_sampler sampler_;
    kernel_account acct_;
    verify_stats verify_;
};

void kernel_hooks::k_shift(const cache_buffers & b, const std::vector<int32_t> & shift) {
    const kv_cache & c = *b.cache;
    acct_.count_shift_event();
    // without --verify the data need not stay consistent: run (and time) the shift only when the
    // budget allows, like the attention samples
    if (!o_.verify && sampler_.over_budget(acct_.spent_ns())) return;
    const kshift_times t = kernels_->k_shift(b, shift);
    const kv_tensor & k = b.k[0];
    acct_.add_shift(t.ns, b.k.size(), kshift_bytes(c.get_size(), c.get_n_stream(), k.n_head_kv, k.type, k.head_dim),
                    t.hazards);
}

void kernel_hooks::time_step(cache_buffers & b, const slot_info & sinfo, const ubatch & ub, uint32_t n_kv, bool verify_now) {
    const fa_desc d = kernels_->desc(sinfo, ub, n_kv);
    const step_times t = kernels_->run(b, d, sinfo, ub);
    acct_.add_spent(t.mask_ns + t.attn_ns * (double) b.k.size());
    acct_.add_step(step_row(b, sinfo, ub, d, t), limit_.read_gbs, t.mask_updated);
    feed_step_time(feedback_, o_.measured_step_time, acct_);
    if (verify_now) {
        verify_step(*b.shadow, *b.cache, sinfo, ub, d, kernels_->q(), kernels_->download_out(d), kernels_->rope(),
                    b.k[0].type, b.v[0].type, verify_);
    }
}

// The step's identity, bytes and kernel times; kernel_account::add_step fills the rest.
bandwidth_row kernel_hooks::step_row(const cache_buffers & b, const slot_info & sinfo, const ubatch & ub,
                                     const fa_desc & d, const step_times & t) const {
    bandwidth_row r;
    r.step = clock_->step();
    r.sim_time = clock_->now();
    r.cache = b.cache->name();
    r.n_kv = (uint32_t) d.n_kv;
    r.tokens = ub.n_tokens;
    r.n_stream = (uint32_t) d.n_stream;
    r.layers_timed = (uint32_t) b.k.size();
    r.kv_bytes = step_kv_bytes(*b.cache, sinfo, ub, d, b.k[0], b.v[0]);
    r.mask_bytes = kq_mask_bytes(d.n_kv, d.n_tps, d.n_stream, ggml_type::f16);
    r.mask_ns = t.mask_ns;
    r.attn_ns = t.attn_ns;
    return r;
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
