// The protocols rdtx can run, by the name `txn.protocol` uses.
#pragma once

#include <string_view>
#include <vector>

#include "txn/engine.hpp"

namespace rdtx::cc {

const std::vector<const txn::ProtocolDef*>& protocols();
// nullptr if no protocol has this name.
const txn::ProtocolDef* find_protocol(std::string_view name);

}  // namespace rdtx::cc
