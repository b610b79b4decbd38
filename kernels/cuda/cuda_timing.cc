// Device buffers, CUDA-event timing with an L2 flush, and the device-to-device copy bandwidth probe.
#include <algorithm>
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

}  // namespace

cuda_timing cuda_time_ms(const std::function<void()> & launch, int n_warmup, int n_rep, bool flush_l2) {
    if (n_rep < 1) throw std::invalid_argument("cuda_time_ms: n_rep must be >= 1");
    cuda_buffer scratch;
    if (flush_l2) scratch = cuda_buffer(std::max<size_t>(2 * cuda_current_device().l2_bytes, 1 << 20));
    for (int i = 0; i < n_warmup; ++i) launch();
    cuda::check(cudaDeviceSynchronize(), "warm-up");
    event_pair ev;
    std::vector<double> t;
    for (int i = 0; i < n_rep; ++i) {
        if (flush_l2) cuda::check(cudaMemsetAsync(scratch.data(), i & 0xff, scratch.size(), nullptr), "L2 flush");
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
