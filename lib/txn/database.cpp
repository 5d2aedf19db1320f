#include "txn/database.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

namespace rdtx::txn {

store::TupleLayout tuple_layout(const TupleShape& shape, bool record_history, uint32_t record_bytes,
                                uint32_t replicas) {
  const uint32_t slots = 1 + shape.extra_record_slots;
  return store::TupleLayout{shape.meta_bytes + (record_history ? 8 * slots : 0) + (replicas > 1 ? 8 : 0),
                            record_bytes, slots};
}

store::TupleLayout backup_layout(uint32_t record_bytes) { return store::TupleLayout{16, record_bytes, 1}; }

store::Store* Database::backup(uint32_t node, uint32_t partition) const {
  if (node >= backups_.size()) return nullptr;
  if (node >= data_nodes_ || partition >= data_nodes_) return nullptr;
  const uint32_t k = (node + data_nodes_ - partition) % data_nodes_;
  if (k == 0 || k > backups_[node].size()) return nullptr;
  return backups_[node][k - 1].get();
}

std::vector<Database::BackupCopy> Database::backups() const {
  std::vector<BackupCopy> v;
  for (uint32_t n = 0; n < backups_.size(); ++n)
    for (uint32_t k = 1; k <= backups_[n].size(); ++k)
      if (backups_[n][k - 1]) v.push_back({n, (n + data_nodes_ - k) % data_nodes_, backups_[n][k - 1].get()});
  return v;
}

Result<std::unique_ptr<Database>> Database::create(cluster::Cluster& c, const std::vector<TableDef>& tables,
                                                   const TupleShape& shape, bool record_history,
                                                   uint64_t region_bytes, bool region_per_node) {
  std::unique_ptr<Database> db(new Database());
  db->protocol_meta_ = shape.meta_bytes;
  db->recording_ = record_history;
  db->workers_per_node_ = c.config().workers_per_node;
  db->replicas_ = c.config().replicas;
  db->data_nodes_ = c.config().data_nodes();
  db->split_ = c.config().split();
  if (db->data_nodes_ == 0 || db->data_nodes_ > c.nodes() || db->replicas_ > db->data_nodes_)
    return make_error(EINVAL,
                      "cluster: %u node(s), %u of them holding data (cluster.memory_nodes = %u), cannot hold %u "
                      "cop(ies) of each partition (cluster.replicas)",
                      c.nodes(), db->data_nodes_, c.config().memory_nodes, db->replicas_);
  db->replication_word_ = shape.meta_bytes + (record_history ? 8 * (1 + shape.extra_record_slots) : 0);
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
  // Backup copies: plain tables (backup_layout), written only by the node's
  // own log appliers, so registered with the node's device alone. Only
  // nodes that hold data back partitions up.
  db->backups_.resize(c.nodes());
  for (uint32_t n = 0; n < c.nodes(); ++n)
    if (c.is_local(n) && db->holds_data(n))
      for (uint32_t k = 1; k < db->replicas_; ++k)
        db->backups_[n].push_back(std::make_unique<store::Store>(*c.node(n).device, n));
  for (const auto& t : tables) {
    if (!db->defs_[t.id].name.empty())
      return make_error(EEXIST, "table id %u is used by both '%s' and '%s'", t.id, db->defs_[t.id].name.c_str(),
                        t.name.c_str());
    if (t.partitioner.nodes() != db->data_nodes_)
      return make_error(EINVAL, "table '%s': partitioner is for %u nodes, the cluster has %u that hold data%s",
                        t.name.c_str(), t.partitioner.nodes(), db->data_nodes_,
                        db->split_ ? " (cluster.memory_nodes; the workload must be made for them)" : "");
    db->defs_[t.id] = t;
    store::TableSpec spec;
    spec.id = t.id;
    spec.name = t.name;
    const store::TupleLayout layout = tuple_layout(shape, record_history, t.record_bytes, db->replicas_);
    spec.meta_bytes = layout.meta_bytes;
    spec.record_bytes = t.record_bytes;
    spec.record_slots = layout.record_slots;
    spec.init_tuple = shape.init_tuple;
    spec.capacity = t.capacity_per_node;
    spec.grows = t.grows;
    spec.max_capacity = t.max_capacity_per_node;
    spec.partitioner = t.partitioner;
    db->descs_[t.id].resize(size_t{c.nodes()} * wpn);
    db->layouts_[t.id] = layout;
    for (uint32_t n = 0; n < c.nodes(); ++n) {
      // A compute node holds no partition; the replicated (read-only,
      // whole) tables it holds, for its coordinators to read locally.
      if (!db->stores_[n] || (!db->holds_data(n) && !t.replicated)) continue;
      auto tab = db->stores_[n]->create_table(spec);
      if (!tab.ok()) return tab.error();
      for (uint32_t w = 0; w < wpn; ++w) {
        store::TableDescriptor d = (*tab)->descriptor(w);
        RDTX_TRY(store::validate(d));
        db->descs_[t.id][n * wpn + w] = d;
      }
      db->layouts_[t.id] = (*tab)->layout();
      store::TableSpec bspec = spec;
      const store::TupleLayout bl = backup_layout(t.record_bytes);
      bspec.meta_bytes = bl.meta_bytes;
      bspec.record_slots = bl.record_slots;
      bspec.init_tuple = nullptr;
      for (auto& b : db->backups_[n]) {
        auto btab = b->create_table(bspec);
        if (!btab.ok())
          return make_error(btab.error().code, "backup copy of table '%s' on node %u: %s", t.name.c_str(), n,
                            btab.error().message.c_str());
      }
    }
    db->max_tuple_bytes_ = std::max(db->max_tuple_bytes_, db->layouts_[t.id].tuple_bytes());
  }
  // The protocol's regions: one allocation per worker, registered in that
  // worker's context only (its peers' QPs reach that context); or one per
  // node, registered in every worker's context.
  db->region_bytes_ = region_bytes;
  db->regions_.resize(size_t{c.nodes()} * wpn);
  db->region_descs_.resize(size_t{c.nodes()} * wpn);
  if (region_bytes > 0)
    for (uint32_t n = 0; n < c.nodes(); ++n) {
      if (!c.is_local(n)) continue;
      const std::vector<rdma::Device*> ctxs = c.contexts(n);
      for (uint32_t w = 0; w < wpn; ++w) {
        Region& r = db->regions_[n * wpn + w];
        r.context = w < ctxs.size() ? ctxs[w] : c.node(n).device.get();
        if (region_per_node && w > 0) {
          r.base = db->regions_[n * wpn].base;
        } else {
          auto mem = c.node(n).device->alloc_memory(region_bytes);
          if (!mem.ok())
            return make_error(mem.error().code, "protocol region of node %u worker %u (%llu bytes): %s", n, w,
                              static_cast<unsigned long long>(region_bytes), mem.error().message.c_str());
          r.mem = std::move(*mem);
          r.base = static_cast<std::byte*>(r.mem->data());
          std::memset(r.base, 0, region_bytes);
        }
        auto mr = r.context->reg_mr(r.base, region_bytes, rdma::kAccessAll);
        if (!mr.ok())
          return make_error(mr.error().code, "protocol region of node %u worker %u: %s", n, w,
                            mr.error().message.c_str());
        r.mr = *mr;
        db->region_descs_[n * wpn + w] = {n, w, mr->rkey, 0, mr->remote_addr(0), region_bytes};
      }
    }
  return db;
}

Database::~Database() {
  for (Region& r : regions_)
    if (r.base != nullptr && r.context != nullptr) (void)r.context->dereg_mr(r.mr);
}

std::shared_ptr<void>& Database::node_state(uint32_t node, const std::string& name) {
  const std::string key = name + "@" + std::to_string(node);
  for (auto& [k, v] : node_states_)
    if (k == key) return v;
  node_states_.emplace_back(key, nullptr);
  return node_states_.back().second;
}

Result<void> Database::exchange_descriptors(const cluster::AllGather& all_gather) {
  // Mine: the descriptor of every table of every local node, per worker.
  const uint32_t wpn = workers_per_node_;
  std::vector<store::TableDescriptor> mine;
  // (A compute node's tables, replicated ones alone, are read locally only.)
  for (uint32_t n = 0; n < nodes(); ++n)
    if (stores_[n] && holds_data(n))
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
      if (d.node_id >= nodes() || !holds_data(d.node_id) || !has_table(d.table_id) || d.context >= wpn)
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
      for (uint32_t n = 0; n < data_nodes_; ++n)
        for (uint32_t w = 0; w < wpn; ++w)
          if (descs_[t][n * wpn + w].capacity == 0)
            return make_error(EPROTO, "no descriptor of table '%s' on node %u for worker %u arrived",
                              defs_[t].name.c_str(), n, w);
  if (region_bytes_ == 0) return {};
  // The protocol regions, the same way.
  std::vector<RegionDescriptor> regs;
  for (uint32_t n = 0; n < nodes(); ++n)
    if (stores_[n])
      for (uint32_t w = 0; w < wpn; ++w) regs.push_back(region_descs_[n * wpn + w]);
  auto rall = all_gather(std::as_bytes(std::span(regs)), "protocol regions");
  if (!rall.ok()) return rall.error();
  for (uint32_t from = 0; from < rall->size(); ++from) {
    const auto& blob = (*rall)[from];
    if (blob.size() % sizeof(RegionDescriptor) != 0)
      return make_error(EPROTO, "node %u sent %zu bytes of region descriptors, not a whole number", from, blob.size());
    for (size_t off = 0; off < blob.size(); off += sizeof(RegionDescriptor)) {
      RegionDescriptor d;
      std::memcpy(&d, blob.data() + off, sizeof d);
      if (d.node >= nodes() || d.worker >= wpn || d.bytes != region_bytes_ || d.addr == 0)
        return make_error(EPROTO, "node %u sent a region of node %u worker %u with %llu bytes (expected %llu)", from,
                          d.node, d.worker, static_cast<unsigned long long>(d.bytes),
                          static_cast<unsigned long long>(region_bytes_));
      if (!stores_[d.node]) region_descs_[d.node * wpn + d.worker] = d;
    }
  }
  for (uint32_t n = 0; n < nodes(); ++n)
    for (uint32_t w = 0; w < wpn; ++w)
      if (region_descs_[n * wpn + w].addr == 0)
        return make_error(EPROTO, "no protocol region of node %u worker %u arrived", n, w);
  return {};
}

}  // namespace rdtx::txn
