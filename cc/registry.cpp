#include "cc/registry.hpp"

#include "cc/occ/occ.hpp"
#include "cc/twopl/twopl.hpp"

namespace rdtx::cc {

const std::vector<const txn::ProtocolDef*>& protocols() {
  static const std::vector<const txn::ProtocolDef*> all = {&twopl::kNoWait, &twopl::kWaitDie, &occ::kDef};
  return all;
}

const txn::ProtocolDef* find_protocol(std::string_view name) {
  for (const txn::ProtocolDef* p : protocols())
    if (name == p->name) return p;
  return nullptr;
}

}  // namespace rdtx::cc
