#include "cpu/cpu_backend.h"

namespace kvsim {

cpu_backend::cpu_backend(int n_threads) : pool_(n_threads) {}

std::unique_ptr<attn_backend> make_cpu_backend(int n_threads) { return std::make_unique<cpu_backend>(n_threads); }

}  // namespace kvsim
