#include "util/read_file.h"

#include "core/errors.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

namespace kvsim {

std::string read_small_file(const std::string & path, const std::string & what, size_t max_bytes) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw input_error(path, 0, "", "is a directory, not a " + what);
    std::ifstream in(path, std::ios::binary);
    if (!in) throw input_error(path, 0, "", "cannot open the " + what);
    std::string text;
    char buf[1 << 16];
    // in chunks, so a device without end (/dev/zero) stops at the cap instead of filling memory
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        text.append(buf, (size_t) in.gcount());
        if (text.size() > max_bytes) {
            throw input_error(path, 0, "", fmt::format("larger than {} MiB: not a {}", max_bytes >> 20, what));
        }
    }
    if (in.bad()) throw input_error(path, 0, "", "cannot read the " + what);
    return text;
}

}  // namespace kvsim
