// FaRM's commit protocol (Dragojevic et al., SOSP'15; the notes in
// papers/003_*.txt) over per-pair message logs. See farm.cpp for the steps.
#pragma once

#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::farm {
extern const txn::ProtocolDef kDef;
// Tests only, never in the registry: FaRM without validation (no VALIDATE
// of the read-only set, and the primaries lock a written record at whatever
// version they find). Not serializable: the tests run it to show that the
// history checker catches it. (Without VALIDATE alone the checker catches it
// on YCSB; SmallBank's only unwritten reads are fetched in the same round as
// the records they are checked against, so its anomalies need two commits
// inside one fetch round and did not show in 8 runs.)
extern const txn::ProtocolDef kNoValidateForTests;
}  // namespace rdtx::cc::farm
