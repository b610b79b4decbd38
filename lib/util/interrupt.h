// Ctrl-C / SIGTERM / SIGHUP (terminal closed) as a request to stop: a signal handler that only sets a flag, which long
// loops (replay, sweeps) poll between steps so they can stop cleanly and still write complete
// output for the work that finished.
// One handler for both CLIs (kvsim replay, kvbench sweep).
#pragma once

#include <atomic>

namespace kvsim {

// Installs the handler for SIGINT, SIGTERM and SIGHUP: the first signal sets the flag (and writes
// `first_message`, when given, to stderr: a string literal, written from the handler); a repeat within
// one second is ignored (the same request delivered twice, e.g. by GNU timeout), a later one
// terminates the process the default way (the escape hatch when a step itself hangs). Idempotent: re-arms after reset_interrupt().
// Throws std::system_error when sigaction fails.
void install_interrupt_handler(const char * first_message = nullptr);

// True once SIGINT, SIGTERM or SIGHUP arrived after install_interrupt_handler(). Async-signal-safe,
// lock-free; cheap enough to poll once per ubatch.
bool interrupted();

// The same flag as an atomic, for loops that take one to poll (the kvbench sweep's hooks.stop).
const std::atomic<bool> * interrupt_flag();

// The signal number that set the flag (SIGINT, SIGTERM or SIGHUP), 0 when none. A CLI exits with
// 128 + this (EXIT_INTERRUPTED = 130 for SIGINT) after writing its partial output.
int interrupt_signal();

// Clears the flag and the signal number (tests; a second run in the same process). Does not
// reinstall the handler: call install_interrupt_handler() again for that.
void reset_interrupt();

// Ignores SIGPIPE for the whole process: a write to a closed pipe (`kvsim ... --emit-ops
// /dev/stdout | head`) then fails with EPIPE and goes through the normal error path, which
// removes the temporary files, instead of killing the process with them left behind.
// Throws std::system_error when sigaction fails.
void ignore_sigpipe();

}  // namespace kvsim
