// The terminal report is output too: written to a full disk (`> /dev/full`), a closed descriptor (`>&-`) or a pipe
// whose reader left, it is lost, and the command must not exit 0 (coreutils behave so). SIGPIPE is ignored
// (util/interrupt.h), so such writes fail with an errno instead of killing the process.
#pragma once

#include "replay/replay_options.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <poll.h>
#include <string>
#include <unistd.h>

namespace kvsim {

// rc as the command returned it, or EXIT_FAILURE_INTERNAL (an I/O failure, not bad input) when it succeeded but
// standard output could not take the report; the reason goes to standard error. A command that failed has said why.
inline int stdout_status(const char * prog, int rc) {
    if (rc != EXIT_OK) return rc;
    errno = 0;
    std::cout.flush();
    const bool flushed = std::fflush(stdout) == 0;
    int err = errno;
    if (flushed && std::cout.good() && !std::ferror(stdout)) return rc;
    // a write that failed earlier (std::endl flushes) left no errno here: a closed descriptor still says EBADF
    if (err == 0 && ::write(STDOUT_FILENO, "", 0) < 0) err = errno;
    // nor a pipe whose reader left (a zero-length write succeeds there), which poll reports as POLLERR
    pollfd p{STDOUT_FILENO, POLLOUT, 0};
    if (err == 0 && ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR)) err = EPIPE;
    std::cerr << prog << ": error: cannot write standard output" << (err != 0 ? std::string(": ") + std::strerror(err) : std::string())
              << '\n';
    return EXIT_FAILURE_INTERNAL;
}

}  // namespace kvsim
