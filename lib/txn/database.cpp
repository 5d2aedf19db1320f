#include "txn/database.hpp"

#include <algorithm>
#include <cstring>
#include <span>

namespace rdtx::txn {

store::TupleLayout tuple_layout(const TupleShape& shape, bool record_history, uint32_t record_bytes) {
  const uint32_t slots = 1 + shape.extra_record_slots;
  return store::TupleLayout{shape.meta_bytes + (record_history ? 8 * slots : 0), record_bytes, slots};
}

Result<std::unique_ptr<Database>> Database::create(cluster::Cluster& c, const std::vector<TableDef>& tables,
                                                   const TupleShape& shape, bool record_history) {
  std::unique_ptr<Database> db(new Database());
  db->protocol_meta_ = shape.meta_bytes;
  db->recording_ = record_history;
  db->workers_per_node_ = c.config().workers_per_node;
  const uint32_t wpn = db->workers_per_node_;
  TableId max_id = 0;
  for (const auto& t : tables) max_id = std::max(max_id, t.id);
  db->defs_.resize(max_id + 1);
  db->layouts_.resize(max_id + 1);
  db->descs_.resize(max_id + 1);
  // Stores of the nodes in this process; the others' are reached through
  // their descriptors (exchange_descriptors()).
  db->stores_.resize(c.nodes());
  for (uint32_t n = 0; n < c.nodes(); ++n)
    if (c.is_local(n)) db->stores_[n] = std::make_unique<store::Store>(*c.node(n).device, n, c.contexts(n));
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
    const store::TupleLayout layout = tuple_layout(shape, record_history, t.record_bytes);
    spec.meta_bytes = layout.meta_bytes;
    spec.record_bytes = t.record_bytes;
    spec.record_slots = layout.record_slots;
    spec.init_tuple = shape.init_tuple;
    spec.capacity = t.capacity_per_node;
    spec.partitioner = t.partitioner;
    db->descs_[t.id].resize(size_t{c.nodes()} * wpn);
    db->layouts_[t.id] = layout;
    for (uint32_t n = 0; n < c.nodes(); ++n) {
      if (!db->stores_[n]) continue;
      auto tab = db->stores_[n]->create_table(spec);
      if (!tab.ok()) return tab.error();
      for (uint32_t w = 0; w < wpn; ++w) {
        store::TableDescriptor d = (*tab)->descriptor(w);
        RDTX_TRY(store::validate(d));
        db->descs_[t.id][n * wpn + w] = d;
      }
      db->layouts_[t.id] = (*tab)->layout();
    }
    db->max_tuple_bytes_ = std::max(db->max_tuple_bytes_, db->layouts_[t.id].tuple_bytes());
  }
  return db;
}

Result<void> Database::exchange_descriptors(const cluster::AllGather& all_gather) {
  // Mine: the descriptor of every table of every local node, per worker.
  const uint32_t wpn = workers_per_node_;
  std::vector<store::TableDescriptor> mine;
  for (uint32_t n = 0; n < nodes(); ++n)
    if (stores_[n])
      for (TableId t = 0; t < tables(); ++t)
        if (has_table(t))
          for (uint32_t w = 0; w < wpn; ++w) mine.push_back(descs_[t][n * wpn + w]);
  auto all = all_gather(std::as_bytes(std::span(mine)), "table descriptors");
  if (!all.ok()) return all.error();
  for (uint32_t from = 0; from < all->size(); ++from) {
    const auto& blob = (*all)[from];
    if (blob.size() % sizeof(store::TableDescriptor) != 0)
      return make_error(EPROTO, "node %u sent %zu bytes of table descriptors, not a whole number", from, blob.size());
    for (size_t off = 0; off < blob.size(); off += sizeof(store::TableDescriptor)) {
      store::TableDescriptor d;
      std::memcpy(&d, blob.data() + off, sizeof d);
      if (d.node_id >= nodes() || !has_table(d.table_id) || d.context >= wpn)
        return make_error(EPROTO, "node %u sent a descriptor of table %u on node %u for worker %u: no such table, "
                          "node or worker", from, d.table_id, d.node_id, d.context);
      if (auto v = store::validate(d); !v.ok())
        return make_error(EPROTO, "node %u sent a bad descriptor of table '%s': %s", from, defs_[d.table_id].name.c_str(),
                          v.error().message.c_str());
      const store::TupleLayout& l = layouts_[d.table_id];
      if (d.meta_bytes != l.meta_bytes || d.record_bytes != l.record_bytes || d.record_slots != l.record_slots)
        return make_error(EPROTO,
                          "node %u has table '%s' with %u+%ux%u bytes per tuple, this node %u+%ux%u "
                          "(different protocol or history.record?)",
                          from, defs_[d.table_id].name.c_str(), d.meta_bytes, d.record_slots, d.record_bytes,
                          l.meta_bytes, l.record_slots, l.record_bytes);
      if (!stores_[d.node_id]) descs_[d.table_id][d.node_id * wpn + d.context] = d;
    }
  }
  for (TableId t = 0; t < tables(); ++t)
    if (has_table(t))
      for (uint32_t n = 0; n < nodes(); ++n)
        for (uint32_t w = 0; w < wpn; ++w)
          if (descs_[t][n * wpn + w].capacity == 0)
            return make_error(EPROTO, "no descriptor of table '%s' on node %u for worker %u arrived",
                              defs_[t].name.c_str(), n, w);
  return {};
}

}  // namespace rdtx::txn
