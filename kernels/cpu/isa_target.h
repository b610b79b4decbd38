// Target regions that GCC and clang both honour. Every function defined between KVSIM_TARGET_BEGIN("features")
// and KVSIM_TARGET_END is compiled for those features whatever the build's -march. GCC takes
// `#pragma GCC target`; clang ignores that pragma (a warning, then every intrinsic fails to inline), and takes
// `#pragma clang attribute push(__attribute__((target(...))), apply_to = function)` instead. Open the region after
// every #include of the file, so no inline function of a header is compiled for the wider instruction set and then
// picked by the linker for code that runs on other CPUs.
//
// KVSIM_FP_CONTRACT_OFF: no a*b+c fused into one FMA in the rest of the file, where the result must equal
// llama.cpp's bit for bit (ggml builds those loops without contraction). GCC: `#pragma GCC optimize`; clang:
// `#pragma clang fp contract(off)` (file scope).
#pragma once

#define KVSIM_PRAGMA(x) _Pragma(#x)

#if defined(__clang__)
#define KVSIM_TARGET_BEGIN(features) \
    KVSIM_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define KVSIM_TARGET_END KVSIM_PRAGMA(clang attribute pop)
#define KVSIM_FP_CONTRACT_OFF KVSIM_PRAGMA(clang fp contract(off))
#else
#define KVSIM_TARGET_BEGIN(features) KVSIM_PRAGMA(GCC push_options) KVSIM_PRAGMA(GCC target(features))
#define KVSIM_TARGET_END KVSIM_PRAGMA(GCC pop_options)
#define KVSIM_FP_CONTRACT_OFF KVSIM_PRAGMA(GCC optimize("fp-contract=off"))
#endif
