#include "store/partitioner.hpp"

#include <cinttypes>
#include <cstdio>

namespace rdtx::store {

namespace {
Result<void> check_nodes(const char* kind, uint32_t nodes) {
  if (nodes == 0) return make_error(EINVAL, "%s partitioner: nodes must be at least 1", kind);
  return {};
}
}  // namespace

Result<Partitioner> Partitioner::range(uint32_t nodes, uint64_t key_space) {
  RDTX_TRY(check_nodes("range", nodes));
  if (key_space == 0) return make_error(EINVAL, "range partitioner: key_space must be at least 1");
  uint64_t per_node = key_space / nodes + (key_space % nodes != 0);
  return Partitioner(Kind::kRange, nodes, per_node, nullptr, nullptr);
}

Result<Partitioner> Partitioner::hash(uint32_t nodes) {
  RDTX_TRY(check_nodes("hash", nodes));
  return Partitioner(Kind::kHash, nodes, 0, nullptr, nullptr);
}

Result<Partitioner> Partitioner::modulo(uint32_t nodes) {
  RDTX_TRY(check_nodes("modulo", nodes));
  return Partitioner(Kind::kModulo, nodes, 0, nullptr, nullptr);
}

Result<Partitioner> Partitioner::custom(uint32_t nodes, PartitionFn fn, uint64_t arg, const char* name) {
  const char* shown = name ? name : "custom";
  if (nodes == 0) return make_error(EINVAL, "custom partitioner '%s': nodes must be at least 1", shown);
  if (fn == nullptr) return make_error(EINVAL, "custom partitioner '%s': function is null", shown);
  return Partitioner(Kind::kCustom, nodes, arg, fn, shown);
}

std::string Partitioner::describe() const {
  char buf[160];
  switch (kind_) {
    case Kind::kRange:
      std::snprintf(buf, sizeof buf, "range(%u nodes, %" PRIu64 " keys/node)", nodes_, param_);
      break;
    case Kind::kHash:
      std::snprintf(buf, sizeof buf, "hash(%u nodes)", nodes_);
      break;
    case Kind::kModulo:
      std::snprintf(buf, sizeof buf, "modulo(%u nodes)", nodes_);
      break;
    case Kind::kCustom:
      std::snprintf(buf, sizeof buf, "custom %s(%u nodes, arg %" PRIu64 ")", name_, nodes_, param_);
      break;
  }
  return buf;
}

}  // namespace rdtx::store
