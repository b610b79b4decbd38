#include "common/bench_backend.h"

#include "cpu/cpu_backend.h"
#include "util/errors.h"

namespace kvsim {

std::unique_ptr<attn_backend> make_bench_backend(const std::string & name, int n_threads) {
    if (name == "cpu") return make_cpu_backend(n_threads);
    if (name == "cuda") {
#ifdef KVSIM_HAVE_CUDA
        // The CUDA backend (kernels/cuda/) takes device pointers; kvbench's timing loops allocate host memory.
        throw usage_error("--backend cuda: this kvbench build has no CUDA timing path yet (host buffers only)");
#else
        throw usage_error("--backend cuda: this kvbench binary was built without CUDA (configure with -DKVSIM_CUDA=ON "
                          "on a machine with nvcc)");
#endif
    }
    throw usage_error("--backend '" + name + "': expected cpu or cuda");
}

}  // namespace kvsim
