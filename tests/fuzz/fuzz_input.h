// Shared by the libFuzzer harnesses: hand a fuzz input to a reader that only takes a path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "trace/op_trace.h"

namespace kvsim::fuzz {

// The input as a file without touching the disk: an anonymous memory file (Linux memfd_create)
// reached through /proc/self/fd/N, which fccp's io::LineReader opens like any path.
// Aborts when the memory file cannot be created or written (the harness cannot run then).
class mem_file {
public:
    mem_file(const uint8_t * data, size_t size);
    ~mem_file();
    mem_file(const mem_file &) = delete;
    mem_file & operator=(const mem_file &) = delete;

    const std::string & path() const { return path_; }

private:
    int fd_ = -1;
    std::string path_;
};

// Aborts with `what` on stderr: how a harness reports a broken invariant, so that libFuzzer
// saves the input as a crash artifact.
[[noreturn]] void fail(const std::string & what);

// The fuzz input parsed as a native op trace, or nothing when parse_op_trace refuses it (input_error).
std::optional<op_trace> parse_ops(const uint8_t * data, size_t size);

}  // namespace kvsim::fuzz
