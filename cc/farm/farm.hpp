// FaRM's commit protocol (Dragojevic et al., SOSP'15; the notes in
// papers/003_*.txt) over per-pair message logs. See farm.cpp for the steps.
#pragma once

#include "txn/engine.hpp"

namespace rdtx::cc::farm {
extern const txn::ProtocolDef kDef;
// Tests only, never in the registry: FaRM without VALIDATE (the read-only
// set is never re-read). Not serializable: the tests run it to show that the
// history checker catches it.
extern const txn::ProtocolDef kNoValidateForTests;
}  // namespace rdtx::cc::farm
