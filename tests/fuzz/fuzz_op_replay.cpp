// libFuzzer harness: the op interpreter. Parse an op trace from memory, then replay it through
// small contexts of the kvoracle test models (n_ctx 256; 2 and 4 sequences; unified and
// per-sequence streams; one n_ubatch small enough to split; one SWA model) with a cell dumper
// attached. Expected outcomes: input_error (bad trace, or an op llama.cpp aborts on) and
// usage_error. Findings: a crash, UB, any other exception, a hang (libFuzzer -timeout).
#include "fuzz_input.h"
#include "kv/context.h"
#include "replay/op_replay.h"
#include "report/dump_cells.h"
#include "trace/op_trace.h"
#include "core/errors.h"

#include <array>
#include <sstream>

namespace {

struct replay_config {
    const char * model;
    uint32_t n_seq_max;
    bool kv_unified;
    uint32_t n_ubatch;
};

constexpr std::array<replay_config, 5> k_configs = {{
    {"tiny-llama", 2, true, 256},
    {"tiny-llama", 2, false, 256},
    {"tiny-llama", 4, true, 64},
    {"tiny-llama", 4, false, 32},
    {"tiny-gemma3-swa", 3, false, 64},
}};

void replay_once(const kvsim::op_trace & t, const replay_config & c) {
    using namespace kvsim;
    context_params p;
    p.n_ctx = 256;
    p.n_seq_max = c.n_seq_max;
    p.kv_unified = c.kv_unified;
    p.n_ubatch = c.n_ubatch;
    context ctx(model_preset(c.model), p);
    std::ostringstream sink;
    cell_dumper dump(sink);
    dump.config(ctx);
    try {
        replay_ops(t, ctx, &dump, nullptr);
    } catch (const input_error &) {
    } catch (const usage_error &) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace kvsim;
    const std::optional<op_trace> parsed = fuzz::parse_ops(data, size);
    if (!parsed) return 0;
    const op_trace & t = *parsed;
    for (const auto & c : k_configs) replay_once(t, c);
    return 0;
}
