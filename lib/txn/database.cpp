#include "txn/database.hpp"

#include <algorithm>

namespace rdtx::txn {

Result<std::unique_ptr<Database>> Database::create(cluster::Cluster& c, const std::vector<TableDef>& tables,
                                                   uint32_t protocol_meta, bool record_history) {
  std::unique_ptr<Database> db(new Database());
  db->protocol_meta_ = protocol_meta;
  db->recording_ = record_history;
  const uint32_t meta = protocol_meta + (record_history ? 8 : 0);
  TableId max_id = 0;
  for (const auto& t : tables) max_id = std::max(max_id, t.id);
  db->defs_.resize(max_id + 1);
  db->layouts_.resize(max_id + 1);
  db->descs_.resize(max_id + 1);
  for (uint32_t n = 0; n < c.nodes(); ++n) db->stores_.push_back(std::make_unique<store::Store>(*c.node(n).device, n));
  for (const auto& t : tables) {
    if (!db->defs_[t.id].name.empty())
      return make_error(EEXIST, "table id %u is used by both '%s' and '%s'", t.id, db->defs_[t.id].name.c_str(),
                        t.name.c_str());
    if (t.partitioner.nodes() != c.nodes())
      return make_error(EINVAL, "table '%s': partitioner is for %u nodes, the cluster has %u", t.name.c_str(),
                        t.partitioner.nodes(), c.nodes());
    db->defs_[t.id] = t;
    store::TableSpec spec;
    spec.id = t.id;
    spec.name = t.name;
    spec.meta_bytes = meta;
    spec.record_bytes = t.record_bytes;
    spec.capacity = t.capacity_per_node;
    spec.partitioner = t.partitioner;
    for (uint32_t n = 0; n < c.nodes(); ++n) {
      auto tab = db->stores_[n]->create_table(spec);
      if (!tab.ok()) return tab.error();
      store::TableDescriptor d = (*tab)->descriptor();
      RDTX_TRY(store::validate(d));
      db->descs_[t.id].push_back(d);
      db->layouts_[t.id] = (*tab)->layout();
    }
    db->max_tuple_bytes_ = std::max(db->max_tuple_bytes_, db->layouts_[t.id].tuple_bytes());
  }
  return db;
}

}  // namespace rdtx::txn
