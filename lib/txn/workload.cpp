// The workload registry (workload.hpp): filled before main() by
// RDTX_REGISTER_WORKLOAD, kept sorted by name so that every listing and
// every generated test list comes out in the same order.
#include "txn/workload.hpp"

#include <algorithm>
#include <cstring>

namespace rdtx::txn {

namespace {
std::vector<const WorkloadDef*>& registry() {
  static std::vector<const WorkloadDef*> r;
  return r;
}
}  // namespace

void register_workload(const WorkloadDef* def) {
  auto& r = registry();
  r.insert(std::upper_bound(r.begin(), r.end(), def,
                            [](const WorkloadDef* a, const WorkloadDef* b) { return std::strcmp(a->name, b->name) < 0; }),
           def);
}

const std::vector<const WorkloadDef*>& workloads() { return registry(); }

const WorkloadDef* find_workload(std::string_view name) {
  for (const WorkloadDef* w : registry())
    if (name == w->name) return w;
  return nullptr;
}

Result<void> Workload::check(Database& db, int64_t committed_delta) const {
  int64_t sum = 0;
  for (uint32_t n = 0; n < db.nodes(); ++n) {
    auto part = check_node(db, n);
    if (!part.ok()) return part.error();
    sum += *part;
  }
  return check_total(sum, db.nodes(), committed_delta);
}

}  // namespace rdtx::txn
