// The workload registry (workload.hpp): filled before main() by
// RDTX_REGISTER_WORKLOAD, kept sorted by name so that every listing and
// every generated test list comes out in the same order.
#include "txn/workload.hpp"

#include <cstdlib>
#include <string>

#include <algorithm>
#include <cstring>

#include "runtime/shutdown.hpp"

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
  for (uint32_t n = 0; n < db.data_nodes(); ++n) {
    // After a stop request the check may take its grace, not longer.
    if (runtime::stop_grace_over())
      return make_error(ECANCELED, "%s: check stopped by %s", name(), runtime::shutdown_cause());
    auto part = check_node(db, n);
    if (!part.ok()) return part.error();
    sum = add_shares(sum, *part);
  }
  return check_total(sum, db.data_nodes(), committed_delta);
}

Result<void> Workload::load_replicated(store::Store& s) const {
  (void)s;
  return make_error(ENOTSUP,
                    "workload '%s' has replicated tables but cannot load them alone (Workload::load_replicated), "
                    "which a compute node needs (cluster.memory_nodes)",
                    name());
}

std::string parse_mix(const std::string& text, uint32_t* out, size_t n) {
  size_t pos = 0;
  uint32_t sum = 0;
  for (size_t k = 0; k < n; ++k) {
    const size_t end = text.find(',', pos);
    if ((k + 1 < n) != (end != std::string::npos))
      return "expected " + std::to_string(n) + " comma-separated percentages";
    const std::string item = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    char* rest = nullptr;
    const unsigned long v = std::strtoul(item.c_str(), &rest, 10);
    if (item.empty() || *rest != '\0' || v > 100) return "'" + item + "' is not a percentage";
    out[k] = static_cast<uint32_t>(v);
    sum += out[k];
    pos = end + 1;
  }
  if (sum != 100) return "the percentages sum to " + std::to_string(sum) + ", not 100";
  return "";
}

uint32_t max_declared(const Workload& w) {
  uint32_t m = 0;
  const size_t types = w.type_names().size();
  for (size_t t = 0; t < types; ++t) m = std::max(m, w.max_declared(static_cast<uint16_t>(t)));
  return m;
}

}  // namespace rdtx::txn
