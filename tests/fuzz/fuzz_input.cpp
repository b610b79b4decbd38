#include "fuzz_input.h"

#include <sstream>

#include "core/errors.h"

#include <cstdio>
#include <cstdlib>
#include <sys/mman.h>
#include <unistd.h>

namespace kvsim::fuzz {

mem_file::mem_file(const uint8_t * data, size_t size) {
    fd_ = memfd_create("kvsim-fuzz", 0);
    if (fd_ < 0) fail("memfd_create failed");
    size_t done = 0;
    while (done < size) {
        const ssize_t n = write(fd_, data + done, size - done);
        if (n <= 0) fail("write to memfd failed");
        done += (size_t) n;
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
}

mem_file::~mem_file() { close(fd_); }

void fail(const std::string & what) {
    std::fprintf(stderr, "kvsim fuzz finding: %s\n", what.c_str());
    std::abort();
}

std::optional<op_trace> parse_ops(const uint8_t * data, size_t size) {
    std::istringstream in(std::string(reinterpret_cast<const char *>(data), size));
    try {
        return parse_op_trace(in, "fuzz.csv");
    } catch (const input_error &) {
        return std::nullopt;
    }
}

}  // namespace kvsim::fuzz
