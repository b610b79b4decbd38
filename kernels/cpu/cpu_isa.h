// Run-time choice of the CPU kernels' instruction set (the way ggml picks its libggml-cpu-<variant>.so, but inside
// one binary): every vector kernel is compiled for each x86-64 level below under a `#pragma GCC target` region of
// its own file, whatever the build's -march, and the backend calls the best one this CPU supports.
#pragma once

// The vector files (*_avx2.cpp, *_avx512.cpp) are empty outside x86-64; their calls are wrapped in this macro so
// that other architectures compile and link with the scalar loops only (cpu_isa_supported() is false there).
// KVSIM_NO_X86_LOOPS builds an x86-64 binary as other architectures get it (scalar only), to test that path.
#if defined(__x86_64__) && !defined(KVSIM_NO_X86_LOOPS)
#define KVSIM_X86 1
#define KVSIM_X86_ONLY(...) __VA_ARGS__
#else
#define KVSIM_X86 0
#define KVSIM_X86_ONLY(...)
#endif

namespace kvsim::cpu {

// Ordered: a CPU that supports one level supports every level below it.
enum class cpu_isa : int {
    scalar = 0,  // any x86-64 / other architecture: portable C++ loops
    avx2 = 1,    // AVX2 + FMA + F16C (Haswell, Zen 1-3 and later)
    avx512 = 2,  // AVX-512 F/BW/DQ/VL + F16C + FMA (Skylake-X, Ice Lake, Sapphire Rapids, Zen 4/5)
};

// The best level this CPU supports and this build contains (__builtin_cpu_supports, read once); the environment
// variable KVSIM_CPU_ISA=scalar|avx2|avx512 lowers it (never raises it past what the CPU has).
cpu_isa cpu_isa_best();
// True when this CPU supports `isa` and the build contains its kernels.
bool cpu_isa_supported(cpu_isa isa);
// "scalar", "avx2", "avx512".
const char * cpu_isa_name(cpu_isa isa);

}  // namespace kvsim::cpu
