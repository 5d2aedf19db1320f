// Two-phase locking with exclusive locks taken at fetch: NOWAIT (abort on
// any conflict) and WAITDIE (an older transaction waits for a younger
// holder, a younger one dies), as RCC implements them. See twopl.cpp.
// And "2pl": locks in a lock table with modes and three deadlock policies.
#pragma once

#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::twopl {
extern const txn::ProtocolDef kNoWait;
extern const txn::ProtocolDef kWaitDie;
// Strict 2PL over a sharded lock table (lock2pl.cpp, shard_service.hpp).
extern const txn::ProtocolDef kLock2pl;
}  // namespace rdtx::cc::twopl
