// Database: the tables of a run across the cluster. Every node that holds
// data holds its partition of every table in a store::Store; every worker
// can reach every partition through the descriptors (validated once here)
// and, on its own node, through the Store itself (RPC handlers). In the
// split layout (cluster::ClusterConfig::memory_nodes) only the memory nodes
// hold partitions; a compute node's Store holds the replicated tables alone
// (its coordinators read them locally), so an owner-side handler reached
// there finds no table and refuses the request.
//
// The tuple metadata is the protocol's (meta_bytes), plus, when histories
// are recorded, one hidden word per record slot holding the id of the
// transaction that wrote the version in that slot (history_word_offset(k)).
// A protocol may ask for more record slots than the store's one record
// (TupleShape::extra_record_slots: MVCC's versions).
// Thread-safety: built and loaded on one thread before the run; read-only
// (apart from tuple contents) during it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/result.hpp"
#include "cluster/cluster.hpp"
#include "store/partitioner.hpp"
#include "store/store.hpp"
#include "store/table_descriptor.hpp"
#include "txn/types.hpp"

namespace rdtx::txn {

// What a protocol asks of every tuple: its metadata, record slots beyond the
// record itself, and how to initialise them when a tuple is inserted.
struct TupleShape {
  uint32_t meta_bytes = 0;          // protocol metadata, a multiple of 8
  uint32_t extra_record_slots = 0;  // record-sized slots after the record
  void (*init_tuple)(std::byte* tuple, const store::TupleLayout& layout) = nullptr;  // store::TableSpec::init_tuple
};

// The tuple layout of a table with `record_bytes` records for a protocol of
// this shape (+ one history word per record slot when recording, + the
// replication sequence word when the partitions have backups, replicas > 1).
// Every place that sizes tuples (the database, the scratch memory, the memory
// check of rdtx-bench) goes through here.
store::TupleLayout tuple_layout(const TupleShape& shape, bool record_history, uint32_t record_bytes,
                                uint32_t replicas = 1);

// A backup's copy of a partition holds the committed state only, no
// protocol metadata: word 0 the replication sequence of the record's last
// write, word 1 its writer id (recording; else 0), then the record.
inline constexpr uint32_t kBackupSeqOffset = 0;
inline constexpr uint32_t kBackupWriterOffset = 8;
store::TupleLayout backup_layout(uint32_t record_bytes);

// A workload's table: the same on every node.
struct TableDef {
  TableId id = 0;
  std::string name;
  uint32_t record_bytes = 0;
  uint32_t capacity_per_node = 0;
  store::Partitioner partitioner;
  // Read-only and held whole by every node (TPC-C's ITEM): the loader loads
  // all of it into every partition; transactions read the local copy
  // (Txn::replicated), never through a protocol; declaring an access or an
  // insert on it is a workload error.
  bool replicated = false;
  // The run inserts rows into it: it starts with memory for
  // capacity_per_node tuples and commits more as inserts need them
  // (store::TableSpec::grows), so the run is not capped at that number.
  bool grows = false;
  uint64_t max_capacity_per_node = 0;  // with grows: the most it may hold (0: what memory allows)
  // The lock hierarchy's partition level (2PL's intention locks, doc/txn.md
  // "Scans and the lock hierarchy"): on each owner node, the rows with keys
  // [k * parent_keys, (k + 1) * parent_keys) form partition k, the parent
  // whose one S lock covers a scan of them. 0: no partition level (records
  // are locked alone).
  uint64_t parent_keys = 0;
};

// A protocol's registered region of one worker (ProtocolDef::region_bytes)
// as the paired worker of every node reaches it: through its QPs to that
// worker, with the rkey of that worker's device context. Shipped between
// processes as bytes, like TableDescriptor.
struct RegionDescriptor {
  uint32_t node = 0;
  uint32_t worker = 0;
  uint32_t rkey = 0;
  uint32_t pad = 0;
  uint64_t addr = 0;   // remote address of byte 0
  uint64_t bytes = 0;
};
static_assert(std::is_trivially_copyable_v<RegionDescriptor>);

class Database {
 public:
  // Creates every table on every node of `c` with tuples of `shape`
  // (tuple_layout()), and, if `region_bytes` > 0, a zeroed registered region
  // of that many bytes per worker of every local node (region()); with
  // `region_per_node` one region per node instead, shared by its workers and
  // registered in each worker's context (ProtocolDef::region_per_node).
  static Result<std::unique_ptr<Database>> create(cluster::Cluster& c, const std::vector<TableDef>& tables,
                                                  const TupleShape& shape, bool record_history,
                                                  uint64_t region_bytes = 0, bool region_per_node = false);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // The protocol region of worker `worker` of `node` (every node's, once
  // exchanged), and on a local node its memory. A region per node has the
  // same memory (and address) for every worker, each with its context's keys.
  const RegionDescriptor& region(uint32_t node, uint32_t worker) const {
    return region_descs_[node * workers_per_node_ + worker];
  }
  std::byte* local_region(uint32_t node, uint32_t worker) const {
    return regions_[node * workers_per_node_ + worker].base;
  }
  // The lkey of a local region (for WRITEs whose source is the region).
  uint32_t local_region_lkey(uint32_t node, uint32_t worker) const {
    return regions_[node * workers_per_node_ + worker].mr.lkey;
  }
  uint64_t region_bytes() const { return region_bytes_; }

  // Per-node state a protocol's workers share (CALVIN's lock manager),
  // found by name: the slot is created empty on first use. Every
  // ProtocolDef::create runs on the thread that builds the run, one worker
  // after the other, before any coordinator (lib/run/runner.cpp), so the
  // first worker of a node to be created fills it and the others find it;
  // what the object does between threads afterwards is its own business.
  std::shared_ptr<void>& node_state(uint32_t node, const std::string& name);

  // Multi-process: the descriptors of the other processes' partitions, in
  // exchange for this process's (every process calls it once after create()).
  Result<void> exchange_descriptors(const cluster::AllGather& all_gather);

  uint32_t nodes() const { return static_cast<uint32_t>(stores_.size()); }
  // Nodes that hold a partition (nodes [0, data_nodes())): every node, or
  // the memory nodes of the split layout. Partitioners map keys to them.
  uint32_t data_nodes() const { return data_nodes_; }
  bool holds_data(uint32_t n) const { return n < data_nodes_; }
  // Whether node n runs coordinators (every node, or the compute nodes).
  bool coordinates(uint32_t n) const { return !split_ || n >= data_nodes_; }
  bool split() const { return split_; }
  // Whether node n's store is in this process (store(n) is valid; a
  // compute node's holds the replicated tables only).
  bool is_local(uint32_t n) const { return stores_[n] != nullptr; }
  store::Store& store(uint32_t node) { return *stores_[node]; }
  const store::Store& store(uint32_t node) const { return *stores_[node]; }
  // The table's partition on `node` as worker `worker` (an index among its
  // node's workers) reaches it: through its QPs to that node's worker of the
  // same index, hence with the rkey of that worker's device context.
  const store::TableDescriptor& descriptor(uint32_t node, TableId t, uint32_t worker) const {
    return descs_[t][node * workers_per_node_ + worker];
  }
  uint32_t workers_per_node() const { return workers_per_node_; }
  const TableDef& def(TableId t) const { return defs_[t]; }
  bool has_table(TableId t) const { return t < defs_.size() && !defs_[t].name.empty(); }
  uint32_t tables() const { return static_cast<uint32_t>(defs_.size()); }
  uint32_t owner(TableId t, Key k) const { return defs_[t].partitioner.node_of(k); }
  const store::TupleLayout& layout(TableId t) const { return layouts_[t]; }
  uint32_t tuple_bytes(TableId t) const { return layouts_[t].tuple_bytes(); }
  uint32_t max_tuple_bytes() const { return max_tuple_bytes_; }
  bool recording() const { return recording_; }
  // Bytes of the protocol's words at the start of every tuple
  // (ProtocolDef::meta_bytes), before the hidden words.
  uint32_t protocol_meta_bytes() const { return protocol_meta_; }
  // Offset of the hidden writer-id word of record slot `slot` (recording
  // only): slot 0 is the record (every protocol's), slots 1.. the extra ones.
  uint32_t history_word_offset(uint32_t slot = 0) const { return protocol_meta_ + 8 * slot; }

  // Replication (doc/replication.md): copies of every partition, the
  // primary's on its own node, backups on the next replicas - 1 nodes that
  // hold data (backup_node()).
  uint32_t replicas() const { return replicas_; }
  // Offset in a primary tuple of the replication sequence word (replicas >
  // 1 only): bumped by the log stage in the coordinator's copy of each
  // written record, written to the primary by the protocol's write-back
  // (which covers every hidden word), compared by the backups' appliers.
  uint32_t replication_word_offset() const { return replication_word_; }
  // Node `node`'s copy of partition `partition` as its backup (nullptr: not
  // a backup of it, or not in this process).
  store::Store* backup(uint32_t node, uint32_t partition) const;
  // Every backup copy held in this process: (holder node, partition, store).
  struct BackupCopy {
    uint32_t node;
    uint32_t partition;
    store::Store* store;
  };
  std::vector<BackupCopy> backups() const;

 private:
  Database() = default;
  std::vector<std::unique_ptr<store::Store>> stores_;
  uint32_t data_nodes_ = 0;
  bool split_ = false;
  // [node][k - 1]: node's copy of partition (node - k) mod data_nodes, k = 1..replicas-1.
  std::vector<std::vector<std::unique_ptr<store::Store>>> backups_;
  uint32_t replicas_ = 1;
  uint32_t replication_word_ = 0;
  std::vector<TableDef> defs_;                            // by table id
  std::vector<store::TupleLayout> layouts_;               // by table id
  std::vector<std::vector<store::TableDescriptor>> descs_;  // [table][node * workers_per_node + worker]
  uint32_t workers_per_node_ = 1;
  uint32_t protocol_meta_ = 0;
  uint32_t max_tuple_bytes_ = 0;
  bool recording_ = false;
  struct Region {
    std::unique_ptr<rdma::DeviceMemory> mem;  // a region per node: worker 0's holds it
    std::byte* base = nullptr;
    rdma::Device* context = nullptr;
    rdma::MemoryRegion mr;
  };
  uint64_t region_bytes_ = 0;
  std::vector<Region> regions_;                  // [node * workers_per_node + worker], local nodes
  std::vector<RegionDescriptor> region_descs_;   // [node * workers_per_node + worker]
  std::vector<std::pair<std::string, std::shared_ptr<void>>> node_states_;  // name@node
};

}  // namespace rdtx::txn
