#include "txn/workload.hpp"

namespace rdtx::txn {

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
