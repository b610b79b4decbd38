// Device buffers, CUDA-event timing with an L2 flush, and the device-to-device copy bandwidth probe.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cuda_backend.h"
#include "cuda_internal.h"

namespace kvsim {

cuda_buffer::cuda_buffer(size_t bytes) : bytes_(bytes) {
    if (bytes) cuda::check(cudaMalloc(&ptr_, bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
}

cuda_buffer::~cuda_buffer() {
    if (ptr_) cudaFree(ptr_);
}

cuda_buffer::cuda_buffer(cuda_buffer && o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

cuda_buffer & cuda_buffer::operator=(cuda_buffer && o) noexcept {
    if (this != &o) {
        if (ptr_) cudaFree(ptr_);
        ptr_ = std::exchange(o.ptr_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void cuda_buffer::upload(const void * host, size_t n, size_t off) {
    if (off > bytes_ || n > bytes_ - off) throw std::out_of_range("cuda_buffer::upload past the end");
    if (n) cuda::check(cudaMemcpy(static_cast<char *>(ptr_) + off, host, n, cudaMemcpyHostToDevice), "cuda_buffer::upload");
}

void cuda_buffer::download(void * host, size_t n, size_t off) const {
    if (off > bytes_ || n > bytes_ - off) throw std::out_of_range("cuda_buffer::download past the end");
    if (n) cuda::check(cudaMemcpy(host, static_cast<const char *>(ptr_) + off, n, cudaMemcpyDeviceToHost), "cuda_buffer::download");
}

namespace {

// RAII pair of CUDA events.
struct event_pair {
    cudaEvent_t a = nullptr, b = nullptr;
    event_pair() {
        cuda::check(cudaEventCreate(&a), "cudaEventCreate");
        cuda::check(cudaEventCreate(&b), "cudaEventCreate");
    }
    ~event_pair() {
        cudaEventDestroy(a);
        cudaEventDestroy(b);
    }
    event_pair(const event_pair &) = delete;
    event_pair & operator=(const event_pair &) = delete;
    float elapsed_ms() const {
        cuda::check(cudaEventSynchronize(b), "cudaEventSynchronize");
        float ms = 0.0f;
        cuda::check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
        return ms;
    }
};

cuda_timing summarise(std::vector<double> t) {
    std::sort(t.begin(), t.end());
    cuda_timing r;
    r.n = (int) t.size();
    r.min_ms = t.front();
    r.max_ms = t.back();
    r.median_ms = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
    return r;
}

// Scratch of at least 2x the device's L2: flush() writes it (cudaMemsetAsync), then reads it back whole, so the
// L2 holds only clean lines of the scratch when the next timed work starts (the memset alone would leave an L2's
// worth of dirty lines, written back during the timed kernel).
struct l2_flusher {
    cuda_buffer scratch, sink;
    int sm_count = 0;
    l2_flusher() {
        const cuda_device_info dev = cuda_current_device();
        scratch = cuda_buffer(std::max<size_t>(2 * dev.l2_bytes, 1 << 20));
        sink = cuda_buffer(sizeof(unsigned));
        sm_count = dev.sm_count;
    }
    void flush(int i) {
        cuda::check(cudaMemsetAsync(scratch.data(), i & 0xff, scratch.size(), nullptr), "L2 flush");
        cuda::l2_flush_read_launch(scratch.data(), scratch.size(), static_cast<unsigned *>(sink.data()), sm_count, nullptr);
    }
};

}  // namespace

std::function<double(const std::function<void()> &)> cuda_event_timer(bool flush_l2) {
    struct state {
        event_pair ev;
        std::unique_ptr<l2_flusher> l2;
        int n = 0;
    };
    auto st = std::make_shared<state>();
    if (flush_l2) st->l2 = std::make_unique<l2_flusher>();
    return [st](const std::function<void()> & calls) {
        if (st->l2) st->l2->flush(st->n++);
        cuda::check(cudaEventRecord(st->ev.a, nullptr), "cudaEventRecord");
        calls();
        cuda::check(cudaEventRecord(st->ev.b, nullptr), "cudaEventRecord");
        return 1e6 * (double) st->ev.elapsed_ms();
    };
}

cuda_timing cuda_time_ms(const std::function<void()> & launch, int n_warmup, int n_rep, bool flush_l2) {
    if (n_rep < 1) throw std::invalid_argument("cuda_time_ms: n_rep must be >= 1");
    std::unique_ptr<l2_flusher> l2;
    if (flush_l2) l2 = std::make_unique<l2_flusher>();
    for (int i = 0; i < n_warmup; ++i) launch();
    cuda::check(cudaDeviceSynchronize(), "warm-up");
    event_pair ev;
    std::vector<double> t;
    for (int i = 0; i < n_rep; ++i) {
        if (l2) l2->flush(i);
        cuda::check(cudaEventRecord(ev.a, nullptr), "cudaEventRecord");
        launch();
        cuda::check(cudaEventRecord(ev.b, nullptr), "cudaEventRecord");
        t.push_back(ev.elapsed_ms());
    }
    return summarise(std::move(t));
}

bandwidth_result cuda_copy_bandwidth(size_t bytes, int n_rep) {
    if (bytes < (1u << 20) || n_rep < 1) throw std::invalid_argument("cuda_copy_bandwidth: bytes >= 1 MiB and n_rep >= 1 required");
    cuda_buffer src(bytes), dst(bytes);
    cuda::check(cudaMemset(src.data(), 1, bytes), "cudaMemset");
    const cuda_timing t = cuda_time_ms(
        [&] { cuda::check(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, nullptr), "D2D copy"); }, 3,
        n_rep, false);
    bandwidth_result r;
    r.copy_gbs = 2.0 * (double) bytes / (t.median_ms * 1e-3) / 1e9;
    r.read_gbs = r.copy_gbs;
    return r;
}

}  // namespace kvsim
