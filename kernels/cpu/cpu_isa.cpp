#include "cpu/cpu_isa.h"

#include "core/errors.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>

#if KVSIM_X86 && defined(__GNUC__)
#include <cpuid.h>
#endif
#if KVSIM_ARM && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace kvsim::cpu {

namespace {
#if KVSIM_X86 && defined(__GNUC__)
// CPUID leaf 1, ECX bit 29: clang 14's __builtin_cpu_supports does not know "f16c" (GCC's does).
bool has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

cpu_isa detect() {
#if KVSIM_X86 && defined(__GNUC__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    return avx512 ? cpu_isa::avx512 : avx2 ? cpu_isa::avx2 : cpu_isa::scalar;
#elif KVSIM_ARM && defined(__linux__) && defined(HWCAP_ASIMDDP)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) ? cpu_isa::neon_dotprod : cpu_isa::neon;
#elif KVSIM_ARM && defined(__ARM_FEATURE_DOTPROD)
    return cpu_isa::neon_dotprod;  // no run-time check here (not Linux): the build's -march promised it
#elif KVSIM_ARM
    return cpu_isa::neon;
#else
    return cpu_isa::scalar;
#endif
}

// The level KVSIM_CPU_ISA names (exactly one of cpu_isa_name's names); nullopt when unset, empty or no level.
std::optional<cpu_isa> env_level(const char * e) {
    if (!e || !*e) return std::nullopt;   // empty: as unset (KVSIM_CPU_ISA=$UNSET_VAR)
    for (cpu_isa i : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512, cpu_isa::neon, cpu_isa::neon_dotprod}) {
        if (std::strcmp(e, cpu_isa_name(i)) == 0) return i;
    }
    return std::nullopt;
}

cpu_isa from_env(cpu_isa hw) {
    const std::optional<cpu_isa> i = env_level(std::getenv("KVSIM_CPU_ISA"));
    return i && cpu_isa_supported(*i) ? *i : hw;
}
}  // namespace

void check_cpu_isa_env() {
    const char * e = std::getenv("KVSIM_CPU_ISA");
    if (!e || !*e || env_level(e)) return;
    throw usage_error(std::string("KVSIM_CPU_ISA='") + e + "' is not a level: scalar, avx2, avx512, neon or neon_dotprod");
}

bool cpu_isa_supported(cpu_isa isa) {
    static const cpu_isa hw = detect();
    if (isa == cpu_isa::scalar) return true;
    const bool same_family = (isa >= cpu_isa::neon) == (hw >= cpu_isa::neon);
    return same_family && isa <= hw;
}

cpu_isa cpu_isa_best() {
    static const cpu_isa best = [] {
        for (cpu_isa i : {cpu_isa::avx512, cpu_isa::avx2, cpu_isa::neon_dotprod, cpu_isa::neon}) {
            if (cpu_isa_supported(i)) return from_env(i);
        }
        return from_env(cpu_isa::scalar);
    }();
    return best;
}

const char * cpu_isa_name(cpu_isa isa) {
    switch (isa) {
        case cpu_isa::avx2: return "avx2";
        case cpu_isa::avx512: return "avx512";
        case cpu_isa::neon: return "neon";
        case cpu_isa::neon_dotprod: return "neon_dotprod";
        default: return "scalar";
    }
}

}  // namespace kvsim::cpu
