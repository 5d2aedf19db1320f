// Crash injection at a point of the commit protocol (rdtx-bench's
// fault.kill_point, doc/rdtx-bench.md "Crash injection"): once the run arms
// a point, the first coordinator of this process that reaches it with work
// to cut in two does half of it and kills the process (SIGKILL), so that
// recovery meets the cases it must decide:
//   kLog     the log stage WRITEs the entry to one backup node only: a
//            transaction short of its commit point, whose entry one backup
//            applies (recovery undoes it);
//   kCommit  the commit stage writes back one record only: a transaction
//            past its commit point, half written back (recovery completes it).
// One-sided stages only (the RPC forms have no such point yet).
// Thread-safety: armed from any thread; checked by the coordinators.
#pragma once

#include <atomic>
#include <cstdint>

namespace rdtx::txn::fault {

enum class KillPoint : uint8_t { kNone, kLog, kCommit };

// The point armed (a KillPoint), kNone while none is.
inline std::atomic<uint8_t> armed{0};
inline bool armed_at(KillPoint p) { return armed.load(std::memory_order_relaxed) == static_cast<uint8_t>(p); }
// Prints which point cut which attempt, and kills the process.
[[noreturn]] void die_at(KillPoint p, uint64_t attempt, const char* what);

}  // namespace rdtx::txn::fault
