// OCC (RTX / DrTM+H). See occ.cpp for the steps.
#pragma once

#include "txn/engine.hpp"

namespace rdtx::cc::occ {
extern const txn::ProtocolDef kDef;
}
