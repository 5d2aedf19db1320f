// Two-phase locking with exclusive locks taken at fetch: NOWAIT (abort on
// any conflict) and WAITDIE (an older transaction waits for a younger
// holder, a younger one dies), as RCC implements them. See twopl.cpp.
#pragma once

#include "txn/engine.hpp"

namespace rdtx::cc::twopl {
extern const txn::ProtocolDef kNoWait;
extern const txn::ProtocolDef kWaitDie;
}  // namespace rdtx::cc::twopl
