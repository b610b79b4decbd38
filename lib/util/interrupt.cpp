#include "util/interrupt.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <initializer_list>
#include <system_error>

namespace kvsim {

namespace {

// Only lock-free atomics may be touched from a signal handler (C++17 [support.signal]).
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

void on_interrupt(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void install_interrupt_handler() {
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    // SA_RESETHAND: the second signal gets the default action (terminate); no SA_RESTART so a
    // blocking read returns EINTR and the caller gets to poll interrupted().
    sa.sa_flags = SA_RESETHAND;
    for (const int sig : {SIGINT, SIGTERM}) {
        if (sigaction(sig, &sa, nullptr) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
    }
}

bool interrupted() { return g_signal.load(std::memory_order_relaxed) != 0; }

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

void reset_interrupt() { g_signal.store(0, std::memory_order_relaxed); }

}  // namespace kvsim
