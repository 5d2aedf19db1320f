// Replication (doc/replication.md): primary-backup copies of every
// partition, the engine's log stage, and the backups' log appliers.
//
//   placement   partition p (node p's data) has its primary on node p and
//               its f = replicas - 1 backups on nodes p+1 .. p+f (mod N),
//               N the nodes that hold data (the memory nodes of the split
//               layout: compute nodes hold no copy)
//   log stage   after validate, before commit: for each backup node, one
//               redo entry with the written records it backs up (record,
//               writer id, replication sequence); the transaction is
//               committed once every backup has it (DrTM+H's commit point),
//               then the protocol's commit stage writes the primaries
//   log ring    per (sending node, sending worker) on the receiving worker
//               of the same index (txn.log_ring_kb each), in registered
//               memory: one-sided form: the sender WRITEs its entries in;
//               RPC form: the `log.append` handler copies them in
//   applier     a per-node service: applies the entries of its rings in
//               place into the node's backup copies (lazily, every
//               kApplyPeriodNs) and frees their space; a full ring refuses
//               an append and the sender waits and retries (counted)
//   proof       after the run, a digest of every copy of every partition;
//               each backup's must equal its primary's
//
// A record image is complete, and each carries its replication sequence
// (bumped by every logged write of the record under its lock), so a backup
// applies an image iff it is newer than its copy's: entries of different
// rings may be applied in any order and still converge to the primary.
//
// Thread-safety: the log stage and the rings belong to a worker's thread;
// appliers of different workers of a node may write the same backup tuple,
// which a busy bit in its sequence word serialises (no lock is held across
// anything but the copy of one record).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "txn/database.hpp"
#include "txn/protocol.hpp"
#include "txn/service.hpp"

namespace rdtx::txn {

class WorkerEngine;

// Where a worker's log rings are, as the senders of every node reach them
// (one-sided logging): its registered log region, exchanged by the runner.
struct LogRegionDesc {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint32_t senders = 0;  // rings in it: one per node (its worker of this index sends)
  uint32_t node = 0;
  uint32_t worker = 0;
  uint64_t ring_bytes = 0;  // per ring (txn.log_ring_kb)
};

// A worker's log regions: its own (set by its applier at start) and those
// of the workers of the same index on every node, which the runner hands
// out once every engine has started (indexed by node).
struct LogRegions {
  LogRegionDesc own;
  std::vector<LogRegionDesc> peers;
  const LogRegionDesc& peer(uint32_t node) const { return peers[node]; }
};

// Backup k (1 .. replicas - 1) of partition p, among `data_nodes` nodes
// that hold data (Database::data_nodes()).
inline uint32_t backup_node(uint32_t partition, uint32_t k, uint32_t data_nodes) {
  return (partition + k) % data_nodes;
}

// "partition 0: primary node 0, backups 1, 2; ..." for the report
// (`data_nodes` partitions).
std::string placement_text(uint32_t data_nodes, uint32_t replicas);

// A digest of one copy of one table's partition: order-independent (a sum
// of per-tuple hashes of key, replication sequence, writer id and record).
struct ReplicaDigest {
  uint32_t partition = 0;
  uint32_t holder = 0;  // the node holding this copy (partition: the primary's)
  uint32_t table = 0;
  uint32_t pad = 0;
  uint64_t tuples = 0;
  uint64_t sum = 0;
};
// The digests of every copy this process holds (primaries and backups);
// empty with replicas = 1.
std::vector<ReplicaDigest> replica_digests(const Database& db);
// Compares each backup's digest with its primary's, given every copy's
// digest (of every process); an error names the first copy that differs or
// is missing.
Result<void> compare_replicas(const Database& db, const std::vector<ReplicaDigest>& all);

// The engine's log stage and its owner side, created by WorkerEngine when
// cluster.replicas > 1: registers the `log.append` handler, adds the
// worker's applier service, and returns the stage module for Stage::kLog
// (nullptr with txn.pipeline.log = off).
Result<std::unique_ptr<StageModule>> create_log_stage(WorkerEngine& e);

// Recovery (recovery.hpp) of the transactions of coordinators whose node
// was removed. Every logged record names its transaction (its writer
// field: the attempt id, whether or not histories are recorded).
//
// The appliers freeze the rings of removed senders (Service::
// freeze_senders): what is complete in them is applied, then nothing (an
// entry begun and never completed is no log error then).
// A record of an entry in a frozen ring.
struct LoggedRecord {
  uint64_t txn;  // the attempt id of the transaction that logged it
  TableId table;
  Key key;
  uint64_t seq;  // its replication sequence (0: an inserted row; logged_row_change())
  std::span<const std::byte> record;
};
// fn(record) for every record of the entries still in node `node`'s frozen
// rings (each ring remembers the positions of a ring's worth of its last
// entries; one overwritten by a later lap is not found). After the
// appliers' senders_frozen().
void for_each_frozen_record(Database& db, uint32_t node, const std::function<void(const LoggedRecord&)>& fn);
// An inserted or erased row (a logged sequence 0, or the erased flag).
bool logged_row_change(uint64_t seq);
// Node `node`'s backup copy of (table, key): its sequence (with the erased
// flag) and record, read consistently beside the appliers. False if the
// node holds no such copy.
bool read_backup_record(Database& db, uint32_t node, TableId table, Key key, uint64_t* seq,
                        std::vector<std::byte>* record);
// Undoes an applied image on node `node`'s backup copy of (table, key): if
// its sequence is `expect_seq`, the copy takes (seq, writer, record), the
// primary's; otherwise it is left alone. Safe beside the appliers.
Result<void> revert_backup_record(Database& db, uint32_t node, TableId table, Key key, uint64_t expect_seq,
                                  uint64_t seq, uint64_t writer, std::span<const std::byte> record);

// How long entries may wait in a ring before the applier applies them.
inline constexpr uint64_t kApplyPeriodNs = 50'000;

}  // namespace rdtx::txn
