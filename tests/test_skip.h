// Honest skips for doctest executables under ctest. A test case that cannot check anything on this machine (no
// CUDA device, no AVX-512, a missing tool) calls KVSIM_SKIP_CASE("why") instead of returning silently: the reason
// is printed as "SKIPPED: why", and tests/doctest_main.cpp's main exits with code 77 when EVERY test case that ran
// was skipped (and none failed). Every test in CMakeLists.txt has SKIP_RETURN_CODE 77, so ctest then reports the
// executable as "Not Run (Skipped)" and `make test` counts it among the skipped, not the passed.
// A partial skip (some cases skipped, others ran) exits 0 and prints how many were skipped: ctest's unit is the
// executable, so put cases that skip together (e.g. AVX-512-only kernels) in an executable of their own when
// ctest should show them as skipped.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace kvsim::test {

// ctest's SKIP_RETURN_CODE for every test (the automake convention).
inline constexpr int skip_exit_code = 77;

// Test cases started and skips recorded in this process (one shared instance: inline function statics).
struct skip_state {
    int cases_started = 0;
    std::vector<std::string> reasons;  // one per skipped case
};
inline skip_state & skips() {
    static skip_state s;
    return s;
}

// Records that the running test case is skipped, with its reason (KVSIM_SKIP_CASE prints it and returns).
inline void record_skip(const std::string & why) { skips().reasons.push_back(why); }

// The process exit code from doctest's result: doctest_rc when something failed; skip_exit_code when every case
// that ran was skipped; otherwise 0 (a note names the skipped cases' reasons).
int exit_code(int doctest_rc);

}  // namespace kvsim::test

// Skip the rest of the running test case: KVSIM_SKIP_CASE("no CUDA device: " + why);
#define KVSIM_SKIP_CASE(why)                          \
    do {                                              \
        const std::string kvsim_skip_why_ = (why);    \
        MESSAGE("SKIPPED: " << kvsim_skip_why_);      \
        ::kvsim::test::record_skip(kvsim_skip_why_);  \
        return;                                       \
    } while (0)
