// Recovery: the transactions of coordinators whose node was removed from
// the configuration (doc/replication.md "Recovery"), resolved as FaRM
// resolves them: a transaction that reached its commit point (every backup
// of every partition it wrote had its log entry) is completed, any other is
// aborted; either way every lock it held is released, so the survivors'
// transactions go on.
//
// Every surviving node runs resolve_removed() at once (the membership
// service calls it on every member of the new configuration), each on the
// records in its own memory, and they agree through `exchange`, a
// collective among the survivors (ZooKeeper, in rdtx-bench). The phases:
//
//   locks     each node's primaries: the tuples whose lock a removed node's
//             attempt holds (ProtocolDef::recovery->holder). A transaction
//             that holds no lock anywhere finished its write-back: nothing
//             to do. (Each node first freezes the removed senders' log
//             rings: what is complete in them is applied, then nothing.)
//   logs      each node's backups: the records those transactions logged
//             there (replication.hpp: for_each_frozen_record).
//   decide    (every node, the same answer from the same data) committed iff
//             every record the transaction locked or logged is in its entry
//             on every backup of its partition. Not committed, but a logged
//             record no longer locked on its primary (it was written back,
//             so the commit point was passed, yet an entry is missing): the
//             log cannot decide, and recovery fails naming it.
//   images    the first backup of a partition gives the committed images of
//             records still locked on their primary; a primary gives its
//             (old) image of each record a backup applied for a transaction
//             that did not commit.
//   installed backups undo those applied images (revert_backup_record),
//             and primaries install the committed images
//             (ProtocolDef::recovery->install), their locks still held; each
//             primary says what every record it resolved now holds.
//   verified  every backup of those records holds the same, or recovery
//             fails naming the record (a lost or wrong image is caught here,
//             before later writes of the record could hide it); then the
//             locks are released: no later write can be undone by a revert.
//
// Not resolved, each an error that ends the run: a protocol without
// recovery hooks; a removed node's lock with cluster.replicas = 1 (without a
// log, a write-back cut in the middle cannot be told from an abort); an
// inserted or erased row among the records to resolve; a removed node that
// held data (promoting a backup is not built).
//
// Thread-safety: on a thread of its own (not a worker lcore) while the
// workers run; it touches only tuples a removed node's attempt holds, and
// backup copies through the appliers' busy bit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/result.hpp"
#include "txn/database.hpp"
#include "txn/protocol.hpp"

namespace rdtx::txn {

// Every survivor's blob for one phase (this node's among them), in any
// order; `phase` names it ("locks", "logs", ...).
using RecoveryExchange =
    std::function<Result<std::vector<std::string>>(const std::string& phase, const std::string& mine)>;

struct RecoveryFigures {
  uint64_t transactions = 0;    // the removed nodes' attempts that held a lock
  uint64_t committed = 0;       // of them, past the commit point: completed
  uint64_t locks_released = 0;  // on this node's primaries (installs included)
  uint64_t installed = 0;       // committed writes completed on this node's primaries
  uint64_t reverted = 0;        // images undone on this node's backups
  // Where the time went: "scan 0.4, locks 12.0, ..." (ms per step: the
  // local work, and each exchange, which includes waiting for the slowest
  // survivor).
  std::string timing;
};

// Resolves, on this process's nodes, the transactions of the removed nodes
// (bit n of `removed`: node n). `wait_ns` bounds the wait for the log
// appliers to freeze the removed senders' rings.
// `skip_install` (tests only: fault.broken_recovery) releases the committed
// writes without installing them, which the replicas check must catch.
Result<RecoveryFigures> resolve_removed(Database& db, const ProtocolDef& p, uint64_t removed, uint64_t wait_ns,
                                        const RecoveryExchange& exchange, bool skip_install = false);

}  // namespace rdtx::txn
