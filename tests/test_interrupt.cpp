// util/interrupt: the SIGINT/SIGTERM flag that replay and kvbench poll to stop cleanly.
#include "util/interrupt.h"

#include <doctest/doctest.h>

#include <csignal>
#include <initializer_list>

namespace {

// The handler currently installed for `sig` (queried, not changed).
void (*current_handler(int sig))(int) {
    struct sigaction sa = {};
    REQUIRE(sigaction(sig, nullptr, &sa) == 0);
    return sa.sa_handler;
}

}  // namespace

TEST_CASE("interrupt: no flag before a signal") {
    kvsim::reset_interrupt();
    kvsim::install_interrupt_handler();
    CHECK_FALSE(kvsim::interrupted());
    CHECK(kvsim::interrupt_signal() == 0);
    CHECK((current_handler(SIGINT) != SIG_DFL));
    CHECK((current_handler(SIGTERM) != SIG_DFL));
}

TEST_CASE("interrupt: SIGINT and SIGTERM set the flag; a repeat within a second is the same request") {
    for (const int sig : {SIGINT, SIGTERM}) {
        CAPTURE(sig);
        kvsim::reset_interrupt();
        kvsim::install_interrupt_handler();
        REQUIRE(std::raise(sig) == 0);
        CHECK(kvsim::interrupted());
        CHECK(kvsim::interrupt_signal() == sig);
        // the same signal again at once (GNU timeout delivers it twice) must not terminate; a
        // later one would (not raised here: it would end the test)
        REQUIRE(std::raise(sig) == 0);
        CHECK(kvsim::interrupted());
        CHECK((current_handler(sig) != SIG_DFL));
        kvsim::reset_interrupt();
        CHECK_FALSE(kvsim::interrupted());
        CHECK(kvsim::interrupt_signal() == 0);
    }
    kvsim::install_interrupt_handler();
    CHECK((current_handler(SIGINT) != SIG_DFL));
    CHECK((current_handler(SIGTERM) != SIG_DFL));
}
