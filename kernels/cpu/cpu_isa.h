// Run-time choice of the CPU kernels' instruction set (the way ggml picks its libggml-cpu-<variant>.so, but inside
// one binary): every vector kernel is compiled for each x86-64 level below under a target region (isa_target.h) of
// its own file, whatever the build's -march, and the backend calls the best one this CPU supports.
#pragma once

#include "cpu/isa_target.h"  // KVSIM_TARGET_BEGIN/END for the vector files

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

// The NEON files (*_neon.cpp) likewise are empty outside aarch64 (Advanced SIMD is part of every ARMv8-A CPU, so
// there is no run-time check for it; the dot-product extension is checked at run time, cpu_isa.cpp).
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(KVSIM_NO_ARM_LOOPS)
#define KVSIM_ARM 1
#define KVSIM_ARM_ONLY(...) __VA_ARGS__
#else
#define KVSIM_ARM 0
#define KVSIM_ARM_ONLY(...)
#endif

namespace kvsim::cpu {

// Two families, each ordered: a CPU that supports one level supports every level below it in its family (x86-64:
// avx2 < avx512; aarch64: neon < neon_dotprod), and every CPU supports scalar.
enum class cpu_isa : int {
    scalar = 0,        // any CPU: portable C++ loops
    avx2 = 1,          // x86-64: AVX2 + FMA + F16C (Haswell, Zen 1-3 and later)
    avx512 = 2,        // x86-64: AVX-512 F/BW/DQ/VL + F16C + FMA (Skylake-X, Ice Lake, Sapphire Rapids, Zen 4/5)
    neon = 3,          // aarch64: Advanced SIMD with f16 conversion (every ARMv8-A CPU)
    neon_dotprod = 4,  // aarch64: + the dot-product extension, SDOT (ARMv8.2-A+dotprod: Apple M1+, Graviton 2+)
};

// The best level this CPU supports and this build contains (x86-64: __builtin_cpu_supports; aarch64: the kernel's
// HWCAP_ASIMDDP; read once); the environment variable KVSIM_CPU_ISA=scalar|avx2|avx512|neon|neon_dotprod lowers it
// (a level this CPU lacks is ignored: never raised past what the CPU has).
cpu_isa cpu_isa_best();
// Checks that KVSIM_CPU_ISA, when set, names a level (one of cpu_isa_name's names, exactly): the
// CLIs call it first, so a typo (`AVX2`, `sclar`) is one usage_error naming the value instead of
// a run at the CPU's best level. A known level the CPU lacks stays accepted (ignored, see above); empty is as unset.
void check_cpu_isa_env();
// True when this CPU supports `isa` and the build contains its kernels.
bool cpu_isa_supported(cpu_isa isa);
// "scalar", "avx2", "avx512", "neon", "neon_dotprod".
const char * cpu_isa_name(cpu_isa isa);

}  // namespace kvsim::cpu
