#include "util/interrupt.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <initializer_list>
#include <system_error>

#include <unistd.h>

namespace kvsim {

namespace {

// Only lock-free atomics may be touched from a signal handler (C++17 [support.signal]).
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free);

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

// the message of the first signal: set before the handler is installed, read-only afterwards
const char * g_message = nullptr;
size_t g_message_len = 0;

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
        g_stop.store(true, std::memory_order_relaxed);
        if (g_message) {
            const ssize_t n = ::write(STDERR_FILENO, g_message, g_message_len);   // async-signal-safe
            (void) n;
        }
        return;
    }
    if (t - g_first_ns.load(std::memory_order_relaxed) < 1000000000) return;
    signal(sig, SIG_DFL);
    raise(sig);
}

}  // namespace

void install_interrupt_handler(const char * first_message) {
    g_message = first_message;
    g_message_len = first_message ? std::strlen(first_message) : 0;
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

const std::atomic<bool> * interrupt_flag() { return &g_stop; }

int interrupt_signal() { return g_signal.load(std::memory_order_relaxed); }

void ignore_sigpipe() {
    struct sigaction sa = {};
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPIPE, &sa, nullptr) != 0) throw std::system_error(errno, std::generic_category(), "sigaction");
}

void reset_interrupt() {
    g_signal.store(0, std::memory_order_relaxed);
    g_stop.store(false, std::memory_order_relaxed);
}

}  // namespace kvsim
