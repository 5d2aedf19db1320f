// Process-wide stop request: set by SIGINT/SIGTERM (a second signal exits at
// once with 128+signal) or by request_shutdown(). Loops poll it each pass.
// This is the one piece of global state the runtime keeps, because signal
// handlers can reach nothing else.
// Thread-safety: all functions are async-signal-safe and thread-safe.
#pragma once

namespace rdtx::runtime {

void install_signal_handlers();
void request_shutdown();
bool shutdown_requested();
// The signal that requested the shutdown (SIGINT, SIGTERM), 0 if none did
// (no request, or request_shutdown()).
int shutdown_signal();
// Clears a previous request (tests that run several loops in one process).
void reset_shutdown();

}  // namespace rdtx::runtime
