#include "txn/protocol.hpp"

#include <algorithm>
#include <cstring>

namespace rdtx::txn {

namespace {
std::vector<const ProtocolDef*>& registry() {
  static std::vector<const ProtocolDef*> r;
  return r;
}
constexpr AbortReasonName kEngineReasons[kEngineAbortReasons] = {
    {"none", "none"},
    {"not_found", "key not found"},
    {"network", "network error"},
    {"workload", "workload abort"},
};
}  // namespace

bool lock_word0_held(const std::byte* meta) {
  uint64_t w;
  std::memcpy(&w, meta, 8);
  return w != 0;
}

std::vector<AbortReasonName> abort_reason_names(const ProtocolDef& def) {
  std::vector<AbortReasonName> v(std::begin(kEngineReasons), std::end(kEngineReasons));
  v.insert(v.end(), def.abort_reasons.begin(), def.abort_reasons.end());
  return v;
}

void register_protocol(const ProtocolDef* def) {
  auto& r = registry();
  r.insert(std::upper_bound(r.begin(), r.end(), def,
                            [](const ProtocolDef* a, const ProtocolDef* b) { return std::strcmp(a->name, b->name) < 0; }),
           def);
}

const std::vector<const ProtocolDef*>& protocols() { return registry(); }

const ProtocolDef* find_protocol(std::string_view name) {
  for (const ProtocolDef* p : registry())
    if (name == p->name) return p;
  return nullptr;
}

const char* to_string(Isolation i) {
  switch (i) {
    case Isolation::kSerializable: return "serializable";
    case Isolation::kSnapshot: return "snapshot isolation";
    case Isolation::kReadCommitted: return "read committed";
  }
  return "?";
}

}  // namespace rdtx::txn
