// CUDA backend object: validation (shared with the CPU backend), scratch buffers, metadata uploads and the split-KV
// plan; the kernels live in cuda_flash_attn.cu, cuda_kq_mask.cu and cuda_k_shift.cu.
#include "cuda_backend.h"

#include <algorithm>
#include <bitset>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "cuda_fa_decode.h"
#include "cuda_internal.h"
#include "core/errors.h"

namespace kvsim {

namespace {

// libstdc++/libc++ store std::bitset<256> as an array of machine words, bit i at bit i%64 of word i/64; on a
// little-endian host its bytes are then the 8 uint32 words the mask kernels read. Checked once at run time.
bool seq_set_is_word_array() {
    static_assert(sizeof(seq_set) == 32, "seq_set must be 256 bits without padding");
    seq_set s;
    s.set(0);
    s.set(37);
    s.set(255);
    uint32_t w[8];
    std::memcpy(w, &s, sizeof w);
    return w[0] == 1u && w[1] == (1u << 5) && w[7] == (1u << 31) && w[2] == 0 && w[6] == 0;
}

// Words of one seq set, bit b of word w = seq 32w+b.
void seq_words(const seq_set & s, uint32_t * w) {
    static const bool direct = seq_set_is_word_array();
    if (direct) {
        std::memcpy(w, &s, 32);
        return;
    }
    for (int i = 0; i < 8; ++i) w[i] = 0;
    for (int b = 0; b < LLAMA_MAX_SEQ; ++b) {
        if (s.test((size_t) b)) w[b / 32] |= 1u << (b % 32);
    }
}

// Grow-only device scratch.
void * ensure(cuda_buffer & b, size_t bytes) {
    if (b.size() < bytes) b = cuda_buffer(std::max(bytes, b.size() * 3 / 2));
    return b.data();
}

// Pinned host staging of one call's metadata uploads (cell deltas, tokens, full cell metadata): the caller's host
// data is copied in, and each region goes to the device with cudaMemcpyAsync from pinned memory (a true
// asynchronous DMA; from pageable memory the runtime stages and synchronises). The next call waits for the
// previous call's copies (one event) before it overwrites the buffer.
class pinned_stage {
public:
    pinned_stage() = default;
    pinned_stage(const pinned_stage &) = delete;
    pinned_stage & operator=(const pinned_stage &) = delete;
    ~pinned_stage() {
        if (done_) cudaEventDestroy(done_);
        if (host_) cudaFreeHost(host_);
    }
    // Start a call: the previous call's copies must have read the buffer.
    void begin() {
        if (!done_) cuda::check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
        if (pending_) cuda::check(cudaEventSynchronize(done_), "pinned staging wait");
        pending_ = false;
        used_ = 0;
    }
    // Enqueue a copy of n bytes of host src to device dst through the buffer (legacy default stream).
    void copy(void * dst, const void * src, size_t n) {
        if (!n) return;
        if (used_ + n > cap_) grow(used_ + n);
        char * h = static_cast<char *>(host_) + used_;
        std::memcpy(h, src, n);
        cuda::check(cudaMemcpyAsync(dst, h, n, cudaMemcpyHostToDevice, nullptr), "upload");
        used_ = (used_ + n + 15) / 16 * 16;
    }
    // End a call: the next begin() waits for its copies.
    void end() {
        if (used_ == 0) return;
        cuda::check(cudaEventRecord(done_, nullptr), "cudaEventRecord");
        pending_ = true;
    }

private:
    // A larger buffer; copies already enqueued from the old one finish first.
    void grow(size_t need) {
        if (used_ > 0) {
            cuda::check(cudaEventRecord(done_, nullptr), "cudaEventRecord");
            cuda::check(cudaEventSynchronize(done_), "pinned staging wait");
        }
        if (host_) cudaFreeHost(host_);
        host_ = nullptr;
        cap_ = std::max(need, 2 * cap_);
        cuda::check(cudaMallocHost(&host_, cap_), "cudaMallocHost");
        used_ = 0;
    }
    void * host_ = nullptr;
    size_t cap_ = 0, used_ = 0;
    cudaEvent_t done_ = nullptr;
    bool pending_ = false;
};

// Device mirror of the metadata of the last mask built into one dst.
struct mask_mirror {
    int64_t n_kv = 0, n_stream = 0;
    cuda_buffer cell_pos, cell_seq;
    uint64_t last_use = 0;
};

class cuda_backend final : public attn_backend {
public:
    cuda_backend(int device, bool synchronous) : sync_(synchronous) {
        std::string why;
        if (!cuda_device_available(&why)) throw std::runtime_error("CUDA backend unavailable: " + why);
        int n = 0;
        cuda::check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
        if (device < 0 || device >= n) {
            throw std::runtime_error("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) + " devices)");
        }
        cuda::check(cudaSetDevice(device), "cudaSetDevice");
        info_ = cuda_current_device();
    }

    backend_kind kind() const override { return backend_kind::cuda; }

    std::shared_ptr<void> alloc(size_t bytes) override {
        void * p = nullptr;
        cuda::check(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
        return std::shared_ptr<void>(p, [](void * q) { cudaFree(q); });
    }
    void upload(void * dst, const void * host_src, size_t bytes) override {
        if (bytes) cuda::check(cudaMemcpy(dst, host_src, bytes, cudaMemcpyHostToDevice), "upload");
    }
    void download(void * host_dst, const void * src, size_t bytes) override {
        if (bytes) cuda::check(cudaMemcpy(host_dst, src, bytes, cudaMemcpyDeviceToHost), "download");
    }
    void copy(void * dst, const void * src, size_t bytes) override {
        if (bytes) cuda::check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "copy");
    }

    void build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, void * dst) override {
        check_kq_mask_desc(d, streams);
        mask_mirror & mm = mirror(dst);
        stage_.begin();
        upload_cells(d, streams, mm);
        upload_tokens(d, streams, nullptr);
        stage_.end();
        cuda::mask_build_launch(d, meta(d, mm), dst, nullptr);
        finish("KQ mask build");
    }

    // Relies on the change list (attention.h): the cells of the device mirror kept for dst since the last call are
    // patched with the changed cells only; without a mirror of this shape for dst, all metadata is uploaded.
    void update_kq_mask(const kq_mask_desc & d, const kq_mask_stream * streams, const kq_mask_change * changes,
                        void * dst) override {
        check_kq_mask_desc(d, streams);
        size_t max_changed = 0;
        for (int64_t s = 0; s < d.n_stream; ++s) {
            const auto & ch = changes[s];
            if ((int64_t) ch.prev_tok_pos.size() != d.n_tps || (int64_t) ch.prev_tok_seq.size() != d.n_tps) {
                throw std::invalid_argument("update_kq_mask: previous tokens do not match n_tps");
            }
            for (uint32_t j : ch.cells) {
                if ((int64_t) j >= d.n_kv) throw std::invalid_argument("update_kq_mask: changed cell beyond n_kv");
            }
            max_changed = std::max(max_changed, ch.cells.size());
        }
        mask_mirror & mm = mirror(dst);
        const bool have = mm.n_kv == d.n_kv && mm.n_stream == d.n_stream;
        const int mc = (int) max_changed;
        // changed cells: [n_stream][mc] indices, counts, and their new pos / seq words
        h_changed_.assign((size_t) d.n_stream * max_changed, 0);
        h_nchanged_.assign((size_t) d.n_stream, 0);
        h_chpos_.assign(h_changed_.size(), 0);
        h_chseq_.assign(h_changed_.size() * 8, 0);
        for (int64_t s = 0; s < d.n_stream; ++s) {
            const auto & cells = changes[s].cells;
            h_nchanged_[(size_t) s] = (int32_t) cells.size();
            for (size_t k = 0; k < cells.size(); ++k) {
                const size_t o = (size_t) s * max_changed + k;
                h_changed_[o] = cells[k];
                h_chpos_[o] = streams[s].cell_pos[cells[k]];
                seq_words(streams[s].cell_seq[cells[k]], &h_chseq_[o * 8]);
            }
        }
        const size_t nc = h_changed_.size();
        char * chb = static_cast<char *>(ensure(changes_buf_, nc * 40 + (size_t) d.n_stream * 4 + 64));
        auto * d_changed = reinterpret_cast<uint32_t *>(chb);
        auto * d_chpos = reinterpret_cast<int32_t *>(chb + nc * 4);
        auto * d_chseq = reinterpret_cast<uint32_t *>(chb + nc * 8);
        auto * d_nchanged = reinterpret_cast<int32_t *>(chb + nc * 40);
        stage_.begin();
        copy_h2d(d_changed, h_changed_.data(), nc * 4);
        copy_h2d(d_chpos, h_chpos_.data(), nc * 4);
        copy_h2d(d_chseq, h_chseq_.data(), nc * 32);
        copy_h2d(d_nchanged, h_nchanged_.data(), (size_t) d.n_stream * 4);
        if (have) {
            cuda::mask_scatter_launch(d.n_stream, d.n_kv, d_changed, d_nchanged, mc, d_chpos, d_chseq,
                                      static_cast<int32_t *>(mm.cell_pos.data()), static_cast<uint32_t *>(mm.cell_seq.data()), nullptr);
        } else {
            upload_cells(d, streams, mm);
        }
        upload_tokens(d, streams, changes);
        stage_.end();
        cuda::mask_update_launch(d, meta(d, mm), d_changed, d_nchanged, mc, dst, nullptr);
        finish("KQ mask update");
    }

    // Split-KV plan of the selected kernel (cuda_fa_decode.h: wave-efficiency search over the occupancy, or the
    // legacy kernel's ~4 waves under KVSIM_CUDA_FA=legacy).
    fa_plan plan_flash_attn(const fa_desc & d) const override {
        if (d.n_kv <= 0 || d.n_head_kv <= 0 || d.n_stream <= 0 || d.n_tps <= 0 || d.n_head % d.n_head_kv != 0) {
            throw std::invalid_argument("plan_flash_attn: empty or inconsistent shape");
        }
        return cuda::fa_plan_select(d, info_.sm_count);
    }

    void flash_attn(const fa_desc & d, const fa_plan & plan, const fa_args & a) override {
        check_fa(d, a);
        cuda::fa_check_cuda_shape(d);
        if (plan.chunk <= 0 || plan.n_chunks <= 0 || plan.n_chunks * plan.chunk < d.n_kv || plan.chunk > INT32_MAX) {
            throw std::invalid_argument("flash_attn: plan does not cover n_kv (make it with plan_flash_attn)");
        }
        const int64_t q_rows = d.n_head * d.n_tps * d.n_stream;
        const float * q = a.q;
        if (d.rot.k()) {
            float * qr = static_cast<float *>(ensure(q_rot_, (size_t) q_rows * d.head_dim_k * sizeof(float)));
            cuda::rotate_q_launch(a.q, qr, q_rows, d.head_dim_k, d.rot.n_k, nullptr);
            q = qr;
        }
        const size_t part_floats = (size_t) (d.n_stream * plan.n_chunks * d.n_head * d.n_tps * (d.head_dim_v + 2));
        float * part = static_cast<float *>(ensure(part_, part_floats * sizeof(float)));
        cuda::fa_launch(d, plan, a, q, part, nullptr);
        finish("flash_attn");
    }

    kshift_report k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) override {
        if (!shift) throw std::invalid_argument("k_shift: null shift");
        kshift_report rep = begin_kshift(d, k);
        const bool quant = ggml_is_quantized(k.type);
        const float * ff = nullptr;
        if (d.rope.freq_factors) {
            ff = static_cast<const float *>(ensure(freq_, (size_t) d.rope.n_rot / 2 * sizeof(float)));
            stage_.begin();
            copy_h2d(const_cast<float *>(ff), d.rope.freq_factors, (size_t) d.rope.n_rot / 2 * sizeof(float));
            stage_.end();
        }
        cuda::kshift_launch(d, k, shift, ff, quant && d.rot.k() ? d.rot.n_k : 0, nullptr);
        finish("k_shift");
        return rep;
    }

private:
    // Metadata upload through the pinned staging (between stage_.begin() and stage_.end()).
    void copy_h2d(void * dst, const void * src, size_t n) { stage_.copy(dst, src, n); }

    void finish(const char * what) const {
        cuda::check(cudaGetLastError(), what);
        if (sync_) cuda::check(cudaStreamSynchronize(nullptr), what);
    }

    void upload_cells(const kq_mask_desc & d, const kq_mask_stream * streams, mask_mirror & mm) {
        const size_t n = (size_t) d.n_kv;
        ensure(mm.cell_pos, (size_t) d.n_stream * n * 4);
        ensure(mm.cell_seq, (size_t) d.n_stream * n * 32);
        h_seq_.resize(n * 8);
        for (int64_t s = 0; s < d.n_stream; ++s) {
            copy_h2d(static_cast<char *>(mm.cell_pos.data()) + (size_t) s * n * 4, streams[s].cell_pos, n * 4);
            for (size_t j = 0; j < n; ++j) seq_words(streams[s].cell_seq[j], &h_seq_[j * 8]);
            copy_h2d(static_cast<char *>(mm.cell_seq.data()) + (size_t) s * n * 32, h_seq_.data(), n * 32);
        }
        mm.n_kv = d.n_kv;
        mm.n_stream = d.n_stream;
    }

    // Token positions/seq ids (and the previous ones for an update) into tok_ as [4][n_stream][n_tps] int32.
    void upload_tokens(const kq_mask_desc & d, const kq_mask_stream * streams, const kq_mask_change * changes) {
        const size_t n = (size_t) (d.n_stream * d.n_tps);
        h_tok_.assign(4 * n, 0);
        for (int64_t s = 0; s < d.n_stream; ++s) {
            for (int64_t i = 0; i < d.n_tps; ++i) {
                const size_t o = (size_t) (s * d.n_tps + i);
                h_tok_[o] = streams[s].tok_pos[i];
                h_tok_[n + o] = streams[s].tok_seq[i];
                if (changes) {
                    h_tok_[2 * n + o] = changes[s].prev_tok_pos[(size_t) i];
                    h_tok_[3 * n + o] = changes[s].prev_tok_seq[(size_t) i];
                }
            }
        }
        copy_h2d(ensure(tok_, 16 * n), h_tok_.data(), 16 * n);
    }

    cuda::mask_meta_dev meta(const kq_mask_desc & d, const mask_mirror & mm) const {
        const size_t n = (size_t) (d.n_stream * d.n_tps);
        const auto * t = static_cast<const int32_t *>(tok_.data());
        return {static_cast<const int32_t *>(mm.cell_pos.data()), static_cast<const uint32_t *>(mm.cell_seq.data()), t, t + n,
                t + 2 * n, t + 3 * n};
    }

    // The mirror of dst, created empty when new. The least recently used mirrors beyond 16 are dropped: a freed
    // dst would otherwise keep its mirror forever (kvbench allocates masks per point); a dropped mirror only
    // means the next update of that dst uploads all metadata again.
    mask_mirror & mirror(void * dst) {
        mask_mirror & mm = mirrors_[dst];
        mm.last_use = ++mirror_tick_;
        while (mirrors_.size() > 16) {
            auto oldest = mirrors_.begin();
            for (auto it = mirrors_.begin(); it != mirrors_.end(); ++it) {
                if (it->second.last_use < oldest->second.last_use) oldest = it;
            }
            mirrors_.erase(oldest);
        }
        return mm;
    }

    bool sync_;
    uint64_t mirror_tick_ = 0;
    cuda_device_info info_;
    cuda_buffer q_rot_, part_, tok_, changes_buf_, freq_;
    pinned_stage stage_;
    std::map<void *, mask_mirror> mirrors_;
    std::vector<uint32_t> h_seq_, h_changed_, h_chseq_;
    std::vector<int32_t> h_tok_, h_chpos_, h_nchanged_;
};

}  // namespace

bool cuda_device_available(std::string * why) {
    static std::once_flag once;
    static bool ok = false;
    static std::string reason;
    std::call_once(once, [] {
        int n = 0;
        const cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) {
            // without a GPU the runtime reports what it tripped on first, e.g. "CUDA driver version is insufficient
            // for CUDA runtime version" where no driver is installed: say what that means before quoting it
            reason = std::string("no usable GPU or CUDA driver (cudaGetDeviceCount: ") + cudaGetErrorString(e) + ")";
            cudaGetLastError();  // clear the sticky-free error so later calls start clean
        } else if (n == 0) {
            reason = "no CUDA device";
        } else {
            ok = true;
        }
    });
    if (!ok && why) *why = reason;
    return ok;
}

std::unique_ptr<attn_backend> make_cuda_backend(int device, bool synchronous) {
    return std::make_unique<cuda_backend>(device, synchronous);
}

cuda_device_info cuda_current_device() {
    int dev = 0;
    cuda::check(cudaGetDevice(&dev), "cudaGetDevice");
    cudaDeviceProp prop{};
    cuda::check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    cuda_device_info i;
    i.name = prop.name;
    i.sm_count = prop.multiProcessorCount;
    i.cc_major = prop.major;
    i.cc_minor = prop.minor;
    i.l2_bytes = (size_t) prop.l2CacheSize;
    i.global_bytes = prop.totalGlobalMem;
    return i;
}

}  // namespace kvsim
