#include "common/bench_backend.h"

#include "cpu/cpu_backend.h"
#include "core/errors.h"

#ifdef KVSIM_HAVE_CUDA
#include "cuda_backend.h"
#include "timing/nvtx_backend.h"
#endif

namespace kvsim {

namespace {

#ifdef KVSIM_HAVE_CUDA
bench_backend make_cuda_bench() {
    std::string why;
    if (!cuda_device_available(&why)) throw usage_error("--backend cuda: " + why);
    bench_backend b;
    // asynchronous: calls only enqueue, so the events around a call time the kernels without launch and sync
    // overhead (downloads are blocking copies on the same stream, so results are still complete when read)
    // wrapped in NVTX ranges (kq_mask / attention / k_shift) for nsys and ncu --nvtx (docs/profiling.md)
    b.be = make_nvtx_backend(make_cuda_backend(0, false));
    b.device = cuda_current_device().name;
    b.clock = cuda_event_timer(true);
    b.measure_limit = [](const sweep_config & c, const std::string & host) {
        const bandwidth_result r = cuda_copy_bandwidth(c.limit_bytes, 10);
        return run_limit{c.shard.index, host, r.read_gbs, r.copy_gbs};
    };
    return b;
}
#endif

}  // namespace

bench_backend make_bench_backend(const std::string & name, int n_threads) {
    if (name == "cpu") return bench_backend{make_cpu_backend(n_threads), {}, {}, ""};
    if (name == "cuda") {
#ifdef KVSIM_HAVE_CUDA
        return make_cuda_bench();
#else
        (void) n_threads;
        throw usage_error("--backend cuda: this kvbench binary was built without CUDA (configure with -DKVSIM_CUDA=ON "
                          "on a machine with nvcc)");
#endif
    }
    throw usage_error("--backend '" + name + "': expected cpu or cuda");
}

}  // namespace kvsim
