#include "util/interrupt.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <ctime>
#include <initializer_list>
#include <system_error>

namespace kvsim {

namespace {

// Only lock-free atomics may be touched from a signal handler (C++17 [support.signal]).
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);

int64_t now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);   // async-signal-safe
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// First signal: set the flag. A second one within a second is the same request delivered twice
// (GNU timeout signals the command and then its process group; a terminal may repeat) and is
// ignored; a later one gets the default action, so a second Ctrl-C still ends a hung step.
void on_interrupt(int sig) {
    const int64_t t = now_ns();
    if (g_signal.load(std::memory_order_relaxed) == 0) {
        g_first_ns.store(t, std::memory_order_relaxed);
        g_signal.store(sig, std::memory_order_relaxed);
        return;
    }
    if (t - g_first_ns.load(std::memory_order_relaxed) < 1000000000) return;
    signal(sig, SIG_DFL);
    raise(sig);
}

}  // namespace

void install_interrupt_handler() {
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    // the handler itself restores the default action for a second request (see on_interrupt);
    // no SA_RESTART so a blocking read returns EINTR and the caller gets to poll interrupted()
    sa.sa_flags = 0;
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) {
        if (sigaction(sig, &sa, nullptr) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
    }
}

bool interrupted() { return g_signal.load(std::memory_order_relaxed) != 0; }

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

void ignore_sigpipe() {
    struct sigaction sa = {};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPIPE, &sa, nullptr) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
}

void reset_interrupt() { g_signal.store(0, std::memory_order_relaxed); }

}  // namespace kvsim
