#include "cpu/cpu_isa.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>

namespace kvsim::cpu {

namespace {
cpu_isa detect() {
#if KVSIM_X86 && defined(__GNUC__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    return avx512 ? cpu_isa::avx512 : avx2 ? cpu_isa::avx2 : cpu_isa::scalar;
#else
    return cpu_isa::scalar;
#endif
}

cpu_isa from_env(cpu_isa hw) {
    const char * e = std::getenv("KVSIM_CPU_ISA");
    if (!e) return hw;
    for (cpu_isa i : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512}) {
        if (std::strcmp(e, cpu_isa_name(i)) == 0) return i < hw ? i : hw;
    }
    return hw;
}
}  // namespace

bool cpu_isa_supported(cpu_isa isa) {
    static const cpu_isa hw = detect();
    return isa <= hw;
}

cpu_isa cpu_isa_best() {
    static const cpu_isa best = from_env(cpu_isa_supported(cpu_isa::avx512) ? cpu_isa::avx512
                                         : cpu_isa_supported(cpu_isa::avx2) ? cpu_isa::avx2
                                                                            : cpu_isa::scalar);
    return best;
}

const char * cpu_isa_name(cpu_isa isa) {
    switch (isa) {
        case cpu_isa::avx2: return "avx2";
        case cpu_isa::avx512: return "avx512";
        default: return "scalar";
    }
}

}  // namespace kvsim::cpu
