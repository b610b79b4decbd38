// libFuzzer harness: one request-trace reader (Azure CSV, BurstGPT CSV or Mooncake JSONL,
// chosen at build time by KVSIM_FUZZ_FORMAT) on an in-memory file, then format detection.
// Expected outcome for bad input: kvsim::input_error. Findings: a crash, UB, any other
// exception, or an accepted trace that breaks request_trace's documented invariants.
#include "fuzz_input.h"
#include "trace/request_trace.h"
#include "core/errors.h"

#include <cmath>

#ifndef KVSIM_FUZZ_FORMAT
#error "KVSIM_FUZZ_FORMAT must name a request_format (azure, burstgpt, mooncake)"
#endif

namespace {

// request_trace's contract (trace/request_trace.h): first arrival 0, arrivals finite and
// non-decreasing, n_prompt > 0, n_gen >= 0, lines increasing.
void check_invariants(const kvsim::request_trace & t) {
    using kvsim::fuzz::fail;
    if (t.requests.empty()) fail("accepted a trace without requests");
    if (t.requests.front().arrival_s != 0.0) fail("first arrival is not 0");
    for (size_t i = 0; i < t.requests.size(); ++i) {
        const auto & r = t.requests[i];
        if (!std::isfinite(r.arrival_s)) fail("non-finite arrival");
        if (r.n_prompt <= 0) fail("n_prompt <= 0 accepted");
        if (r.n_gen < 0) fail("n_gen < 0 accepted");
        if (i > 0 && r.arrival_s < t.requests[i - 1].arrival_s) fail("arrivals decrease");
        if (i > 0 && r.line <= t.requests[i - 1].line) fail("line numbers do not increase");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace kvsim;
    const fuzz::mem_file f(data, size);
    try {
        const request_trace t = read_request_trace(f.path(), request_format::KVSIM_FUZZ_FORMAT);
        check_invariants(t);
    } catch (const input_error &) {
    }
    // auto-detection reads the same bytes through the detector as `kvsim replay` does
    try {
        const request_trace t = read_request_trace(f.path());
        check_invariants(t);
    } catch (const input_error &) {
    }
    return 0;
}
