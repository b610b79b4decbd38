// libFuzzer harness: the native op-trace reader (parse_op_trace from memory) and its writer.
// Expected outcome for bad input: kvsim::input_error. Findings: a crash, UB, any other
// exception, or a trace that does not survive write -> parse -> write unchanged.
#include "fuzz_input.h"
#include "trace/op_trace.h"
#include "core/errors.h"

#include <sstream>

namespace {

std::string written(const kvsim::op_trace & t) {
    std::ostringstream out;
    kvsim::write_op_trace(out, t);
    return out.str();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    using namespace kvsim;
    const std::optional<op_trace> parsed = fuzz::parse_ops(data, size);
    if (!parsed) return 0;
    const op_trace & t = *parsed;
    if (t.groups.empty()) fuzz::fail("parse_op_trace accepted a trace without groups");
    const std::string once = written(t);
    std::istringstream again(once);
    op_trace back;
    try {
        back = parse_op_trace(again, "fuzz-roundtrip.csv");
    } catch (const input_error & e) {
        fuzz::fail(std::string("write_op_trace output does not parse: ") + e.what());
    }
    if (back.groups.size() != t.groups.size()) fuzz::fail("round trip changed the number of groups");
    if (written(back) != once) fuzz::fail("write -> parse -> write is not a fixed point");
    return 0;
}
