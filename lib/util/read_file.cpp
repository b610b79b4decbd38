#include "util/read_file.h"

#include "core/errors.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kvsim {

namespace {
// Closes the descriptor on every path out of read_small_file.
struct fd_guard {
    int fd;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

// A descriptor for reading `path`. O_NONBLOCK on open only: opening a FIFO that no process writes blocks in open()
// forever (as `cat fifo` does); with O_NONBLOCK open returns at once, and a FIFO without a writer then reads as
// empty. Reads block again, so `<(cat f)` (a pipe whose writer starts later) is read whole.
int open_for_reading(const std::string & path, const std::string & what) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw input_error(path, 0, "", fmt::format("cannot open the {}: {}", what, std::strerror(errno)));
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        const int err = errno;
        ::close(fd);
        throw input_error(path, 0, "", fmt::format("cannot read the {}: {}", what, std::strerror(err)));
    }
    return fd;
}
}  // namespace

std::string read_small_file(const std::string & path, const std::string & what, size_t max_bytes) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw input_error(path, 0, "", "is a directory, not a " + what);
    const fd_guard f{open_for_reading(path, what)};
    const bool fifo = ::fstat(f.fd, &st) == 0 && S_ISFIFO(st.st_mode);
    std::string text;
    char buf[1 << 16];
    // in chunks, so a device without end (/dev/zero) stops at the cap instead of filling memory
    for (;;) {
        const ssize_t n = ::read(f.fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw input_error(path, 0, "", fmt::format("cannot read the {}: {}", what, std::strerror(errno)));
        if (n == 0) break;
        text.append(buf, (size_t) n);
        if (text.size() > max_bytes) {
            throw input_error(path, 0, "", fmt::format("larger than {} MiB: not a {}", max_bytes >> 20, what));
        }
    }
    if (text.empty() && fifo) throw input_error(path, 0, "", fmt::format("empty: a FIFO or pipe that no process wrote (not a {})", what));
    return text;
}

}  // namespace kvsim
