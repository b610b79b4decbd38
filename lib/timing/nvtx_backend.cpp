#include "timing/nvtx_backend.h"

#include "util/nvtx.h"

#include <stdexcept>

namespace kvsim {

namespace {

class nvtx_backend final : public attn_backend {
public:
    explicit nvtx_backend(std::unique_ptr<attn_backend> inner) : in_(std::move(inner)) {
        if (!in_) throw std::invalid_argument("make_nvtx_backend: null backend");
    }
    backend_kind kind() const override { return in_->kind(); }
    void build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst) override {
        KVSIM_NVTX_RANGE("kq_mask", d.n_kv);
        in_->build_kq_mask(d, streams, dst);
    }
    void update_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, const kq_mask_change * changes,
                        void * dst) override {
        KVSIM_NVTX_RANGE("kq_mask", d.n_kv);
        in_->update_kq_mask(d, streams, changes, dst);
    }
    fa_plan plan_flash_attn(const fa_desc & d) const override { return in_->plan_flash_attn(d); }
    void flash_attn(const fa_desc & d, const fa_plan & plan, const fa_args & a) override {
        KVSIM_NVTX_RANGE("attention", d.n_kv);
        in_->flash_attn(d, plan, a);
    }
    ggml_type fa_q_dot_type(ggml_type type_k) const override { return in_->fa_q_dot_type(type_k); }
    kshift_report k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) override {
        KVSIM_NVTX_RANGE("k_shift", k.kv_size * k.n_stream);
        return in_->k_shift(d, k, shift);
    }
    std::shared_ptr<void> alloc(size_t bytes) override { return in_->alloc(bytes); }
    void upload(void * dst, const void * host_src, size_t bytes) override { in_->upload(dst, host_src, bytes); }
    void download(void * host_dst, const void * src, size_t bytes) override { in_->download(host_dst, src, bytes); }
    void copy(void * dst, const void * src, size_t bytes) override { in_->copy(dst, src, bytes); }

private:
    std::unique_ptr<attn_backend> in_;
};

}  // namespace

std::unique_ptr<attn_backend> make_nvtx_backend(std::unique_ptr<attn_backend> inner) {
    return std::make_unique<nvtx_backend>(std::move(inner));
}

}  // namespace kvsim
