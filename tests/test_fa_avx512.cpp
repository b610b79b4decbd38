// Flash-attention decode on the AVX-512 loops (and AMX Q.K for a q8_0 K where the CPU has it): the cases of
// fa_cases.h. An executable of its own so that ctest reports it as skipped on a CPU without AVX-512
// (tests/test_skip.h) instead of counting it as passed.
#include <doctest/doctest.h>

#include "fa_cases.h"
#include "test_skip.h"

using namespace kvsim;
using namespace kvsim::fa_suite;

namespace {
constexpr const char * no_avx512 = "no AVX-512 F/BW/DQ/VL on this CPU: the AVX-512 flash-attention loops cannot run";
}

TEST_CASE("AVX-512: every KV type, head dim and GQA ratio") {
    if (!cpu::cpu_isa_supported(cpu_isa::avx512)) KVSIM_SKIP_CASE(no_avx512);
    if (!cpu::amx_int8_available()) MESSAGE("AMX-INT8 not available here: q8_0 K takes the AVX-512 FMA Q.K");
    every_type_head_dim_gqa(cpu_isa::avx512);
}

TEST_CASE("AVX-512: mixed K/V types, short prefill chunks, several streams") {
    if (!cpu::cpu_isa_supported(cpu_isa::avx512)) KVSIM_SKIP_CASE(no_avx512);
    mixed_types(cpu_isa::avx512);
}

TEST_CASE("AVX-512: multi-sequence unified stream") {
    if (!cpu::cpu_isa_supported(cpu_isa::avx512)) KVSIM_SKIP_CASE(no_avx512);
    multi_sequence(cpu_isa::avx512);
}

TEST_CASE("AVX-512: prompt chunks") {
    if (!cpu::cpu_isa_supported(cpu_isa::avx512)) KVSIM_SKIP_CASE(no_avx512);
    prompt_chunks(cpu_isa::avx512);
}

TEST_CASE("AVX-512: n_kv edge sizes") {
    if (!cpu::cpu_isa_supported(cpu_isa::avx512)) KVSIM_SKIP_CASE(no_avx512);
    n_kv_edges(cpu_isa::avx512);
}

TEST_CASE("AVX-512: SWA borders, fully masked rows, softcap and ALiBi") {
    if (!cpu::cpu_isa_supported(cpu_isa::avx512)) KVSIM_SKIP_CASE(no_avx512);
    masks_softcap_alibi(cpu_isa::avx512);
}
