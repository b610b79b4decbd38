// CUDA backend of the attention interface (kernels/attention.h) and the device helpers kvbench/replay need to time
// it: device buffers (plain cudaMalloc, never managed memory), CUDA-event timing with an L2 flush, and the
// device-to-device copy bandwidth probe that plays the role of the GPU's memory "limit". This header needs no CUDA
// headers, so plain C++ translation units (apps, tests) can include it. Design: kernels/cuda/README.md.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "attention.h"
#include "bandwidth.h"

namespace kvsim {

// True when a CUDA device can be used (driver present and new enough, at least one device). Otherwise false and,
// when why != nullptr, *why = the CUDA runtime's reason (e.g. "CUDA driver version is insufficient for CUDA
// runtime version"). Cheap after the first call (the answer is cached).
bool cuda_device_available(std::string * why = nullptr);

// CUDA attention backend on `device` (made current for the calling thread). Kernels run on the legacy default
// stream. synchronous = true: every attn_backend call returns after its kernels finish, like the CPU backend, so
// host timers measure them. synchronous = false: calls only enqueue (errors of a kernel surface at the next
// synchronising call); use this with cuda_time_ms to time kernels without the launch/sync overhead. Device memory: fa_args q/out/mask, kv_tensor data, the KQ mask dst
// and the k_shift `shift` array. Host memory: the kq_mask_stream metadata (cell pos/seq sets, tokens), copied to
// the device on every mask call as llama.cpp's set_input_kq_mask uploads its host-built mask.
// Throws std::runtime_error naming the reason when no usable device exists.
std::unique_ptr<attn_backend> make_cuda_backend(int device = 0, bool synchronous = true);

// ---- device memory ----

// Owning device buffer from cudaMalloc (no managed memory). Throws std::runtime_error on allocation failure.
class cuda_buffer {
public:
    cuda_buffer() = default;
    explicit cuda_buffer(size_t bytes);
    ~cuda_buffer();
    cuda_buffer(cuda_buffer && o) noexcept;
    cuda_buffer & operator=(cuda_buffer && o) noexcept;
    cuda_buffer(const cuda_buffer &) = delete;
    cuda_buffer & operator=(const cuda_buffer &) = delete;

    void * data() const { return ptr_; }
    size_t size() const { return bytes_; }
    // Synchronous copies of n bytes from/to host memory at byte offset off. Throw std::out_of_range past size().
    void upload(const void * host, size_t n, size_t off = 0);
    void download(void * host, size_t n, size_t off = 0) const;

private:
    void * ptr_ = nullptr;
    size_t bytes_ = 0;
};

// ---- timing ----

struct cuda_timing {
    double median_ms = 0.0;  // median over the timed launches, milliseconds
    double min_ms = 0.0;
    double max_ms = 0.0;
    int n = 0;               // timed launches
};

// Time `launch` (work enqueued on the legacy default stream, e.g. calls of an asynchronous CUDA backend) with
// CUDA events: n_warmup untimed calls, then n_rep timed calls, each preceded (outside its events) by an L2 flush
// when flush_l2: a scratch buffer of at least 2x the device's L2 is written (memset) and then read whole, so
// every timed call starts with an L2 holding no data of its own and no dirty lines to write back.
// Throws std::invalid_argument for n_rep < 1, std::runtime_error on a CUDA error.
cuda_timing cuda_time_ms(const std::function<void()> & launch, int n_warmup, int n_rep, bool flush_l2 = true);

// A clock for kernel_hooks (kernel_drive::time_ns): runs `calls` (work enqueued on the legacy default stream by an
// asynchronous backend) between two CUDA events and returns the elapsed nanoseconds, after the L2 flush above
// (outside the events) when flush_l2. Synchronises on the end event. The returned function owns its events and
// scratch; it must be called on the thread and device it was made on. Throws std::runtime_error on a CUDA error.
std::function<double(const std::function<void()> &)> cuda_event_timer(bool flush_l2 = true);

// Device-to-device copy bandwidth (cudaMemcpyAsync D2D of `bytes`, buffers >> L2, e.g. 1 GiB), median of n_rep
// after warm-up, in GB/s (1e9 B/s) counting bytes read + bytes written (2*bytes per copy, STREAM convention, as
// kernels/bandwidth.h copy_gbs); read_gbs = copy_gbs (a copy streams both directions at once, so the bytes
// moved per second is the figure to compare with fa_kv_bytes / time). Throws std::runtime_error on a CUDA error,
// std::invalid_argument for bytes < 1 MiB or n_rep < 1.
bandwidth_result cuda_copy_bandwidth(size_t bytes, int n_rep);

// Device properties used by plans and reports.
struct cuda_device_info {
    std::string name;
    int sm_count = 0;
    int cc_major = 0, cc_minor = 0;
    size_t l2_bytes = 0;
    size_t global_bytes = 0;
};
// Properties of the current device. Throws std::runtime_error without a device.
cuda_device_info cuda_current_device();

}  // namespace kvsim
