#include "txn/protocol.hpp"

#include <algorithm>
#include <cstring>

#include "rpc/wire.hpp"
#include "txn/database.hpp"
#include "txn/item_batch.hpp"
#include "txn/options.hpp"

namespace rdtx::txn {

// txn::Isolation and history::Isolation name the same levels in the same order.
static_assert(static_cast<int>(Isolation::kSerializable) == static_cast<int>(history::Isolation::kSerializable) &&
              static_cast<int>(Isolation::kSnapshot) == static_cast<int>(history::Isolation::kSnapshot) &&
              static_cast<int>(Isolation::kReadCommitted) == static_cast<int>(history::Isolation::kReadCommitted) &&
              static_cast<int>(Isolation::kRepeatableRead) == static_cast<int>(history::Isolation::kRepeatableRead) &&
              static_cast<int>(Isolation::kStrictSerializable) ==
                  static_cast<int>(history::Isolation::kStrictSerializable));

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

namespace {
RegionQuery query_of(const ProtocolDef& def, const Options& o, const cluster::ClusterConfig& cc,
                     const std::vector<TableDef>& tables, uint32_t max_declared) {
  RegionQuery q;
  q.nodes = cc.nodes;
  q.workers_per_node = cc.workers_per_node;
  q.coroutines = o.coroutines;
  for (const TableDef& t : tables) {
    q.max_tuple_bytes = std::max(q.max_tuple_bytes, tuple_layout(tuple_shape(def), o.record_history, t.record_bytes).tuple_bytes());
    q.max_record_bytes = std::max(q.max_record_bytes, t.record_bytes);
    q.tuples_per_node += t.capacity_per_node;
  }
  q.tables = static_cast<uint32_t>(tables.size());
  q.max_declared = max_declared;
  q.options = &o;
  return q;
}
}  // namespace

Result<uint64_t> region_bytes(const ProtocolDef& def, const Options& o, const cluster::ClusterConfig& cc,
                              const std::vector<TableDef>& tables, uint32_t max_declared) {
  if (def.region_bytes == nullptr) return uint64_t{0};
  return def.region_bytes(query_of(def, o, cc, tables, max_declared));
}

Result<void> preflight(const ProtocolDef& def, const Options& o, const cluster::ClusterConfig& cc,
                       const std::vector<TableDef>& tables, uint32_t max_declared, int32_t self) {
  if (def.preflight == nullptr) return {};
  RegionQuery q = query_of(def, o, cc, tables, max_declared);
  q.self = self;
  return def.preflight(q);
}

Result<void> check_rpc_items_fit(const ProtocolDef& def, const Options& o, const std::vector<TableDef>& tables,
                                 uint32_t replicas, uint32_t max_msg_size) {
  bool rpc = false;
  for (int s = 0; s < static_cast<int>(Stage::kCount_); ++s) {
    const Primitive p = o.stage(static_cast<Stage>(s));
    rpc |= p == Primitive::kRpc || p == Primitive::kHybrid;
  }
  if (!rpc || max_msg_size == 0) return {};
  uint32_t largest = 0, record = 0;
  std::string table;
  for (const TableDef& t : tables) {
    const uint32_t tuple = tuple_layout(tuple_shape(def), o.record_history, t.record_bytes, replicas).tuple_bytes();
    if (tuple > largest) {
      largest = tuple;
      record = t.record_bytes;
      table = t.name;
    }
  }
  const uint64_t need = uint64_t{rpc::kDatagramOverhead} + 8 + sizeof(ItemHeader) + 8 + pad8(largest);
  if (need > max_msg_size)
    return make_error(EINVAL,
                      "an RPC message of %llu bytes (a %u-byte record of table %s in a %u-byte tuple: protocol "
                      "%s's metadata and versions, and headers) does not fit the device's %u-byte datagrams: raise "
                      "the MTU, shrink the records, or run no stage over RPC",
                      static_cast<unsigned long long>(need), record, table.c_str(), largest, def.name, max_msg_size);
  return {};
}

Isolation certified_level(const ProtocolDef& def, Isolation level, bool real_time) {
  return def.strict && real_time && level == Isolation::kSerializable && level == def.isolation
             ? Isolation::kStrictSerializable
             : level;
}

history::CheckOptions check_options(Isolation i) {
  history::CheckOptions o;
  o.isolation = static_cast<history::Isolation>(i);
  return o;
}

uint64_t count_locked(Database& db, const ProtocolDef& def) {
  uint64_t n = 0;
  for (uint32_t node = 0; node < db.nodes(); ++node)
    for (TableId t = 0; t < db.tables(); ++t) {
      if (!db.has_table(t) || !db.is_local(node)) continue;
      store::Table* tab = db.store(node).table(t);
      if (tab == nullptr) continue;  // a compute node holds no partition
      for (uint32_t i = 0; i < tab->high_water(); ++i) {
        const std::byte* tuple = tab->tuple(i);
        uint64_t state;
        std::memcpy(&state, tuple + tab->layout().state_offset(), 8);
        n += store::is_live(state) && def.lock_held(tuple);
      }
    }
  return n;
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
    case Isolation::kRepeatableRead: return "repeatable read";
    case Isolation::kStrictSerializable: return "strict serializable";
  }
  return "?";
}

}  // namespace rdtx::txn
