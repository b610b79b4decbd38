// Ctrl-C / SIGTERM as a request to stop: a signal handler that only sets a flag, which long
// loops (replay, sweeps) poll between steps so they can stop cleanly and still write complete
// output for the work that finished.
#pragma once

namespace kvsim {

// Installs the handler for SIGINT and SIGTERM: the first signal sets the flag; a repeat within
// one second is ignored (the same request delivered twice, e.g. by GNU timeout), a later one
// terminates the process the default way (the escape hatch when a step itself hangs). Idempotent: re-arms after reset_interrupt().
// Throws std::system_error when sigaction fails.
void install_interrupt_handler();

// True once SIGINT or SIGTERM arrived after install_interrupt_handler(). Async-signal-safe,
// lock-free; cheap enough to poll once per ubatch.
bool interrupted();

// The signal number that set the flag (SIGINT or SIGTERM), 0 when none. A CLI exits with
// 128 + this (EXIT_INTERRUPTED = 130 for SIGINT) after writing its partial output.
int interrupt_signal();

// Clears the flag and the signal number (tests; a second run in the same process). Does not
// reinstall the handler: call install_interrupt_handler() again for that.
void reset_interrupt();

}  // namespace kvsim
