// Bootstrap: the out-of-band TCP channel through which the processes of a
// multi-process run (one process per node, possibly on different machines)
// find each other, exchange connection data (QP addresses, rkeys), agree on
// the configuration, synchronise, gather results and notice dead peers.
//
// Topology: a star through node 0. Every node listens on its own listed port
// (so that a port in use, or two processes started as the same node on one
// host, fail at once); the other nodes connect to node 0, retrying until
// connect_timeout_ms, and send a hello (node id, cluster size, a fingerprint
// of the node list, the run id). connect() returns once every node has
// joined, on every node. Collectives go through node 0: each node sends its
// contribution, node 0 checks that everybody is in the same operation (kind,
// name and sequence number) and answers everybody. Messages are framed
// (magic, version, type, sender, length) and validated on arrival;
// doc/bootstrap.md describes the wire format, the timeouts and every error.
//
// Errors name the node id and host:port involved. Any error from a
// collective, or a failure seen by the monitor, is fatal for the Bootstrap:
// node 0 forwards it to every other node, later calls return the same error,
// and failed() turns true. A run that hits one should stop.
//
// Liveness: start_monitor() starts a thread that exchanges heartbeats; a
// peer that closes its connection (process died) or stays silent longer
// than peer_dead_ms (process stopped or hung, network down) makes failed()
// true on every surviving node within about peer_dead_ms + heartbeat_ms
// (node 0 forwards the failures it sees). A node that calls stop_monitor()
// tells its peers so, after which its exit is not a failure; destroying a
// Bootstrap without stop_monitor() while peers monitor is reported by them as
// a failure, which is what an exit on an error path should look like.
// Call start_monitor() right after a barrier, so that all nodes start
// monitoring at about the same time, and end the monitored phase with a
// barrier before stop_monitor().
//
// Signals: whenever it does I/O (the monitor thread, a collective, node 0
// waiting for joiners) the Bootstrap polls options.stop_signal. Once that
// reports a signal, the run fails on every node with "bootstrap: node N
// (host:port) stopped by SIGTERM": a node other than 0 sends node 0 a stop
// notice, and node 0 forwards the failure to all, as with any failure.
//
// Exclusion: a membership service that removed node n from the run and
// resolved its transactions lets the run go on without it: every survivor
// calls exclude(n). Node 0 decides every collective (its wait is the one
// that matters): it stops waiting for n, answers with n's slot empty, and
// drops whatever n sends later. A node other than 0 only records n; it has
// no connection to n and waits for node 0 alone, so the survivors may call
// exclude(n) in any order and at different times without disagreeing
// (doc/bootstrap.md, "Excluding a node").
//
// Thread-safety: connect(), the collectives, start_monitor() and
// stop_monitor() are called from one thread at a time (the owner).
// failed(), failure(), exclude() and excluded() may be called from any
// thread (exclude() also while the owner waits in a collective). The collectives
// also work while the monitor runs (its thread then does the socket I/O).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.hpp"

namespace rdtx::cluster {

struct NodeAddress {
  uint32_t id = 0;
  std::string host;   // IPv4 or IPv6 literal, or a name resolved with getaddrinfo
  uint16_t port = 0;  // TCP port this node listens on (node 0: where the others connect)
};

struct BootstrapOptions {
  uint32_t self = 0;               // this process's node id
  std::vector<NodeAddress> nodes;  // every node of the run, ids 0..n-1 (any order)
  // Optional, part of the run token: nodes whose run ids differ refuse each
  // other. Launchers that start several runs on the same ports (sweeps) pass
  // a value unique to each run, so that a straggler of an earlier run is
  // refused rather than taken for a node of this one.
  std::string run_id;
  uint64_t connect_timeout_ms = 30000;  // how long to wait for every peer to appear
  uint64_t op_timeout_ms = 10000;       // each collective (all_gather, gather, barrier, agree)
  uint64_t heartbeat_ms = 200;          // heartbeat period while monitoring
  uint64_t peer_dead_ms = 2000;         // silence after which a peer is declared dead (>= 2 heartbeats)
  // false: a peer whose connection ends or falls silent while monitored is
  // logged and dropped, not a failure of the run; a membership service
  // (leases, doc/membership.md) judges it. A collective on node 0 that
  // needs it waits for the service's exclude() until op_timeout_ms, and
  // fails naming it if none came.
  bool lost_peer_fatal = true;
  // Polled (under the Bootstrap's lock, so it must be quick and must not
  // call back) whenever the Bootstrap does I/O: the number of the signal
  // that asked this process to stop, 0 while none did. Empty: the one
  // rdtx's signal handlers record, runtime::shutdown_signal().
  std::function<int()> stop_signal;
};

class Bootstrap {
 public:
  // Listens on this node's port and connects the run: node 0 accepts the
  // others, the others connect to node 0. Returns once every node has joined.
  // Errors: invalid options (EINVAL); the port in use (EADDRINUSE); a node
  // that does not appear within connect_timeout_ms (ETIMEDOUT); a node with
  // another cluster size, node list, run id, an out-of-range or duplicate id
  // (EINVAL, reported on node 0 and on the nodes already connected).
  // Connections to node 0 that do not speak this protocol (port scanners,
  // garbage, another protocol version) or say hello with another run token
  // (another cluster size, node list or run id) are dropped with a warning
  // and do not stop the run; the last one dropped is named in a later
  // timeout error. A node refused so fails at once (EINVAL) with node 0's
  // reason. A signal (stop_signal) while connecting fails with ECANCELED.
  static Result<std::unique_ptr<Bootstrap>> connect(BootstrapOptions options);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  uint32_t self() const;
  uint32_t nodes() const;
  const NodeAddress& address(uint32_t node) const;
  // This run's token (doc/bootstrap.md, "The run token").
  uint64_t run_token() const;

  // Every node contributes a blob (any size, empty included); every node
  // receives all blobs indexed by node id. `what` names the exchange in
  // errors and must be the same on every node.
  Result<std::vector<std::vector<std::byte>>> all_gather(std::span<const std::byte> mine, std::string_view what);
  // Node 0 receives every node's blob indexed by node id; the others get an
  // empty vector once node 0 has them all.
  Result<std::vector<std::vector<std::byte>>> gather(std::span<const std::byte> mine, std::string_view what);
  // Returns once every node has entered the barrier of this name.
  Result<void> barrier(std::string_view what);
  // Configuration agreement: each node passes its resolved config as
  // ordered (key, value-as-text) pairs. Node 0 compares every node's pairs
  // with its own; if any node differs, every node gets the same error (EINVAL)
  // naming the first differing node and key and both values, e.g.
  // "bootstrap: config mismatch: node 2 has txn.coroutines = 8, node 0 has 4",
  // or "node 2 has no txn.x, node 0 has txn.x = 1" for a key on one side only.
  Result<void> agree(const std::vector<std::pair<std::string, std::string>>& config);

  // Collective errors: a node not reaching the operation within op_timeout_ms
  // (ETIMEDOUT), closing its connection during it (ECONNRESET), being in
  // another operation (EPROTO), an invalid message (EPROTO), stopped by a
  // signal (ECANCELED); each names the
  // node, its address and the operation, e.g. "bootstrap: node 1
  // (127.0.0.1:7001) closed the connection during barrier 'loaded'".

  // Leaves node `node` out of the run from now on (any thread, also while
  // the owner waits in a collective and while the monitor runs). On node 0:
  // no collective waits for it (one waiting now re-evaluates and completes
  // once the others have contributed), its slot in every result is an empty
  // blob, nothing more is sent to it, and what it sends is dropped (logged
  // once); its connection ending or its silence is no failure. On another
  // node it is recorded (excluded()): that node waits for node 0 alone,
  // whose results carry the slots node 0 left empty. Excluding a node twice
  // is no error. Errors (EINVAL): node 0 (every collective goes through it:
  // losing it ends the run), this node itself, an id out of range.
  Result<void> exclude(uint32_t node);
  // The excluded nodes: bit n set for node n (nodes 0..63; exclude()
  // refuses higher ids). Lock-free.
  uint64_t excluded() const;

  // Starts the heartbeat thread (no-op if running or already failed).
  void start_monitor();
  // Stops it, and tells the peers that this node leaves the monitored phase.
  void stop_monitor();
  // True once a peer was lost, a node was stopped by a signal, or the run was
  // aborted; lock-free.
  bool failed() const;
  // Why (the node and its address); empty while !failed().
  std::string failure() const;

 private:
  struct Impl;
  explicit Bootstrap(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdtx::cluster
