// Backend factory of kvbench: the one place that knows which attention backends this binary was built with.
#pragma once

#include <memory>
#include <string>

#include "attention.h"

namespace kvsim {

// "cpu" -> cpu_backend(n_threads). "cuda" -> throws usage_error: this binary has no CUDA backend (built without
// KVSIM_HAVE_CUDA), or no CUDA device / no CUDA bench path yet. Anything else: usage_error listing the choices.
std::unique_ptr<attn_backend> make_bench_backend(const std::string & name, int n_threads);

}  // namespace kvsim
