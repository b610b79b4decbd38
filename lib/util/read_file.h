// Reading a small input file (a device profile, llama-bench results) whole, with a size cap: such files are a few
// KiB, and reading /dev/zero or /dev/urandom without a cap grows until memory runs out.
#pragma once

#include <cstddef>
#include <string>

namespace kvsim {

// Largest input read_small_file accepts: far above any device profile or llama-bench result set (a few KiB).
inline constexpr size_t k_max_small_file_bytes = (size_t) 64 << 20;

// The whole content of `path`; `what` names the file's role in errors ("device profile"). Pipes and FIFOs
// (`<(cat f)`) are read like files; a FIFO without a writer is refused as empty instead of blocking in open().
// Errors: input_error(path, 0, "", why) when the path is a directory, cannot be opened or read, or holds more
// than max_bytes.
std::string read_small_file(const std::string & path, const std::string & what, size_t max_bytes = k_max_small_file_bytes);

}  // namespace kvsim
