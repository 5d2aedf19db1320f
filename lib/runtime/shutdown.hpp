// Process-wide stop request: set by SIGINT/SIGTERM (a second signal exits at
// once with 128+signal) or by request_shutdown(). Loops poll it each pass;
// long loops outside them (loading tables, checking a run) poll it every
// few thousand iterations, so that a signal ends any phase within about a
// second (doc/rdtx-bench.md "Signals").
// This is the one piece of global state the runtime keeps, because signal
// handlers can reach nothing else.
// Thread-safety: all functions are async-signal-safe and thread-safe.
#pragma once

#include <cstdint>

namespace rdtx::runtime {

void install_signal_handlers();
void request_shutdown();
bool shutdown_requested();
// The signal that requested the shutdown (SIGINT, SIGTERM), 0 if none did
// (no request, or request_shutdown()).
int shutdown_signal();
// What asked to stop, for messages ("stopped by SIGTERM during loading"):
// "SIGINT", "SIGTERM", or "a stop request" (request_shutdown(); a peer's
// failure in process mode, say).
const char* shutdown_cause();
// Clears a previous request (tests that run several loops in one process).
void reset_shutdown();

// A stop request after which nothing is served: loops stop at once, without
// the drain in which they keep answering the other nodes. A node whose lease
// lapsed (doc/membership.md "Fencing") must not serve anybody any more.
void request_halt();
bool halt_requested();

// The work that completes a run after a stop request (its drain, its
// checks, the report) may take this long from the request; checks still
// going then give up (stop_grace_over()), so that a run stops within about
// a second however large its tables or history.
inline constexpr uint64_t kStopGraceNs = 300'000'000;
// True once a stop was requested kStopGraceNs ago or more. Reads the
// monotonic clock: for loops outside the hot path (a check per thousands
// of iterations).
bool stop_grace_over();

}  // namespace rdtx::runtime
