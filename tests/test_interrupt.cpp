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

TEST_CASE("interrupt: SIGINT and SIGTERM set the flag; the second signal gets the default action") {
    for (const int sig : {SIGINT, SIGTERM}) {
        CAPTURE(sig);
        kvsim::reset_interrupt();
        kvsim::install_interrupt_handler();
        REQUIRE(std::raise(sig) == 0);
        CHECK(kvsim::interrupted());
        CHECK(kvsim::interrupt_signal() == sig);
        // SA_RESETHAND: a second Ctrl-C would terminate (not raised here: it would end the test)
        CHECK((current_handler(sig) == SIG_DFL));
        kvsim::reset_interrupt();
        CHECK_FALSE(kvsim::interrupted());
        CHECK(kvsim::interrupt_signal() == 0);
    }
    kvsim::install_interrupt_handler();
    CHECK((current_handler(SIGINT) != SIG_DFL));
    CHECK((current_handler(SIGTERM) != SIG_DFL));
}
