// SUNDIAL (RCC section 4.5; Yu et al., VLDB 2018). See sundial.cpp for the
// steps, the metadata and the consistency argument.
#pragma once

#include "txn/coordinator.hpp"
#include "txn/stages/toolkit.hpp"

namespace rdtx::cc::sundial {
extern const txn::ProtocolDef kDef;
// Tests only, never listed: SUNDIAL that never renews a lease (it accepts a
// read whose lease ended before the commit timestamp). Not serializable: the
// tests show the history checker catches it.
extern const txn::ProtocolDef kUnrenewedForTests;
}  // namespace rdtx::cc::sundial
