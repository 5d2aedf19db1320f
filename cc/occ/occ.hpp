// OCC (RTX / DrTM+H). See occ.cpp for the steps.
#pragma once

#include "txn/engine.hpp"

namespace rdtx::cc::occ {
extern const txn::ProtocolDef kDef;
// Tests only, never in the registry: OCC with its validation removed (the
// read set is not validated, read-write records are locked without checking
// their version). Not serializable: the stress suite runs it to show that
// the history checker catches a broken protocol.
extern const txn::ProtocolDef kUnvalidatedForTests;
}
