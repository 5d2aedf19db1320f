// What the node processes of a multi-process run exchange after it: the
// byte encoding of a worker's figures (WorkerStats), and the exchange itself
// (every node learns the cluster's checks; node 0 gathers every worker's
// figures). Internal to lib/run; the encoding is the bootstrap's wire codec
// (cluster/wire_codec.hpp: big-endian, every length checked when decoding).
// Thread-safety: plain functions; exchange_results() runs on the thread
// that runs the run.
#pragma once

#include "base/result.hpp"
#include "cluster/bootstrap.hpp"
#include "cluster/wire_codec.hpp"
#include "run/runner.hpp"

namespace rdtx::run {

// A worker's figures: the number of counters and every kWorkerCounters
// value (raw bits, table order), then abort counts, per-type counts and
// latencies, phase times and verb counts.
void put_worker_stats(cluster::WireWriter& w, const txn::WorkerStats& s);
// False if the bytes are short, or were written by a build with another
// counter table.
bool get_worker_stats(cluster::WireReader& r, txn::WorkerStats* s);

// After the run of node boot.self(): every node learns the cluster's checks
// (each node's share of the invariant sum, committed deltas and locks left,
// all_gather) into res.invariants and res.locks_left, and node 0 gathers
// every worker's figures into res (per_worker, total, RPC and cache
// counters). Errors: the bootstrap's, or EPROTO naming a node that sent
// malformed bytes.
// Nodes removed during the run (Bootstrap::exclude()) are left out: their
// slots are empty (node 0 decides); res.removed lists them, the figures are
// the survivors', and the checks are made over the survivors. A removed
// node that held data fails the invariants and replicas (EIO, naming it);
// a removed coordinator's committed deltas are not known, so an invariant
// sum that does not match is not checked (ENODATA, RunResult::removed).
Result<void> exchange_results(cluster::Bootstrap& boot, txn::Database& db, const txn::Workload& wl, RunResult& res);

}  // namespace rdtx::run
