// One-sided verbs of a coordinator, batched: OneSidedBatch collects typed
// requests (read, write, cas, faa; a lock's release) per node and posts them
// with one doorbell per QP and one wait, numbering each QP's posts in the
// worker's QpAck (engine.hpp); PendingCommit is a commit left in flight for
// passive acknowledgement (txn.options.passive_ack, unsignaled_commit).
// Every coordinator posts its one-sided verbs through here (services that
// post outside a coordinator build their own request).
//
// Thread-safety: everything here belongs to the worker's thread.
#pragma once

#include <coroutine>
#include <cstdint>

#include "rdma/rdma.hpp"
#include "runtime/task.hpp"
#include "runtime/worker.hpp"
#include "txn/txn.hpp"

namespace rdtx::txn {

class Coordinator;

// Where a one-sided request goes: an address in memory `node` registered,
// with the rkey this worker's QP to `node` uses (a table's descriptor, a
// region's descriptor).
struct Remote {
  uint32_t node;
  uint64_t addr;
  uint32_t rkey;
};

// A commit (or release) of one scratch bank left in flight with
// passive_ack: signaled, its WaitGroup; unsignaled, the post number of its
// requests on each node's QP.
struct PendingCommit {
  runtime::WaitGroup wg;
  uint32_t nodes = 0;                // entries of node[] used
  uint32_t node[kMaxNodes] = {};
  uint64_t ticket[kMaxNodes] = {};   // by node: its post number (0: none)
  bool in_flight() const { return wg.remaining() > 0 || wg.failed() || nodes > 0; }
  void add(uint32_t nd, uint64_t post) {
    if (ticket[nd] == 0) node[nodes++] = nd;
    ticket[nd] = post;
  }
};

// Collects one-sided work requests per node for one doorbell per QP and one
// wait (DESIGN: doorbell batching, outstanding requests). With the options
// off, it posts one request per doorbell, or waits node by node.
//
// One per coordinator (Coordinator::onesided()), reused by every stage: a
// batch is hundreds of work requests, which neither belong in coroutine
// frames nor should be zeroed per use.
class OneSidedBatch {
 public:
  static constexpr uint32_t kMaxWrs = 4 * Txn::kMaxAccesses;
  // Requests one coordinator has in flight on one QP at most: a batch with
  // more for a node is posted in chunks of this many, each awaited before
  // the next (TPC-C's Stock-Level and Delivery; SmallBank and YCSB never
  // reach it). Two banks' passive commits fit (the runner sizes QPs with
  // 2 x this x coroutines).
  static constexpr uint32_t kMaxInFlightPerNode = 128;
  explicit OneSidedBatch(Coordinator& c);
  void reset() { n_ = 0; }
  // Typed requests, each appended to its node's list. `local` is where a
  // READ's data or an atomic's old value lands, or what a WRITE sends:
  // registered memory of the coordinator's scratch unless `lkey` names
  // another region. Each returns its request (nullptr when the batch is
  // full), whose flags may still be added to.
  rdma::WorkRequest* read(Remote from, void* local, uint32_t length, uint32_t flags = 0, uint32_t lkey = 0) {
    return add(from, rdma::Opcode::kRead, local, length, flags, lkey);
  }
  rdma::WorkRequest* write(Remote to, const void* local, uint32_t length, uint32_t flags = 0, uint32_t lkey = 0) {
    return add(to, rdma::Opcode::kWrite, const_cast<void*>(local), length, flags, lkey);
  }
  // Compare-and-swap of the 8-byte word at `at`: its old value lands in `old`.
  rdma::WorkRequest* cas(Remote at, void* old, uint64_t compare, uint64_t swap, uint32_t flags = 0,
                         uint32_t lkey = 0) {
    rdma::WorkRequest* wr = add(at, rdma::Opcode::kCompareSwap, old, 8, flags, lkey);
    if (wr != nullptr) {
      wr->compare_add = compare;
      wr->swap = swap;
    }
    return wr;
  }
  // Fetch-and-add of `delta` to the 8-byte word at `at`: its old value lands in `old`.
  rdma::WorkRequest* faa(Remote at, void* old, uint64_t delta, uint32_t flags = 0, uint32_t lkey = 0) {
    rdma::WorkRequest* wr = add(at, rdma::Opcode::kFetchAdd, old, 8, flags, lkey);
    if (wr != nullptr) wr->compare_add = delta;
    return wr;
  }
  // An inline 8-byte WRITE of 0 to the lock word (metadata word 0) of the
  // access's tuple: how every protocol releases a lock one-sided. False when full.
  bool add_unlock(const Access& a);
  // A shared holder's release (txn.options.read_locks = shared): FAA -1 on
  // the lock word, its old value landing in `result` (registered scratch of
  // the access: c.extra(i)). False when full.
  bool add_read_unlock(const Access& a, std::byte* result);
  bool empty() const { return n_ == 0; }
  // Whether post_only() can post it all at once (no node's list is longer
  // than kMaxInFlightPerNode); else execute() it.
  bool fits_in_flight() const;
  // Posts everything added now; co_await the result for the completions:
  // true if every request succeeded. No coroutine frame of its own, as
  // every stage of every attempt goes through here (with
  // txn.options.outstanding_requests off, node by node: then a task).
  class Execution;
  Execution execute();
  // Posts everything and returns without waiting (passive
  // acknowledgement), recorded in `p`: `p.wg` on each node's last request,
  // or with txn.options.unsignaled_commit every request unsignaled and its
  // post number per node; whoever reuses the memory the requests read from
  // settles `p` first (Coordinator::settle_pending_commit). False if a post
  // failed.
  bool post_only(PendingCommit& p);

 private:
  // A request for `at.node`, appended to its list (nullptr when full).
  rdma::WorkRequest* add(Remote at, rdma::Opcode op, void* local, uint32_t length, uint32_t flags, uint32_t lkey) {
    if (n_ == kMaxWrs) return nullptr;
    rdma::WorkRequest& wr = wrs_[n_];
    wr = rdma::WorkRequest{};
    wr.opcode = op;
    wr.flags = flags;
    wr.local = local;
    wr.length = length;
    wr.lkey = lkey;
    wr.remote_addr = at.addr;
    wr.rkey = at.rkey;
    node_of_[n_++] = at.node;
    return &wr;
  }
  Coordinator& c_;
  rdma::WorkRequest wrs_[kMaxWrs];
  uint32_t node_of_[kMaxWrs];
  uint32_t n_ = 0;
  // Each node's requests linked in the order they were added (and counted).
  void link_per_node();
  void count(const rdma::WorkRequest& wr);
  // Posts node `nd`'s list, `wg` on its last request (signaled; or none
  // unsignaled), its post number in post_no[nd]. False if the post failed
  // (its share of `wg` is then done, failed).
  bool post_node(uint32_t nd, runtime::WaitGroup& wg, bool doorbell, bool signaled = true);
  // After the completions of execute(): the round trip counted (if one was
  // waited for), failed QPs reconnected, the batch emptied.
  bool complete(bool waited);
  // Posts in chunks of kMaxInFlightPerNode per node, each awaited; node by
  // node when `serial` (txn.options.outstanding_requests off).
  runtime::Task<bool> execute_chunked(bool serial);
  rdma::WorkRequest* head[kMaxNodes];
  rdma::WorkRequest* tail[kMaxNodes];
  uint64_t post_no[kMaxNodes];  // each node's last post (QpAck::posted)
  runtime::WaitGroup wg_;  // execute()'s completions
  bool posted_ok_ = true;
};

// What execute() returns: the completions of the requests it posted (or,
// node by node, the task that posts and waits).
class OneSidedBatch::Execution {
 public:
  explicit Execution(OneSidedBatch* b) : b_(b) {}
  explicit Execution(runtime::Task<bool> serial) : serial_(std::move(serial)) {}
  bool await_ready() noexcept {
    if (b_ == nullptr) return false;  // the task starts when awaited
    waited_ = b_->wg_.remaining() > 0;
    return !waited_;
  }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> h) noexcept {
    if (b_ == nullptr) return std::move(serial_).operator co_await().await_suspend(h);
    b_->wg_.await_suspend(h);
    return std::noop_coroutine();
  }
  bool await_resume() {
    if (b_ == nullptr) return std::move(serial_).operator co_await().await_resume();
    return b_->complete(waited_);
  }

 private:
  OneSidedBatch* b_ = nullptr;  // nullptr: serial_
  runtime::Task<bool> serial_;
  bool waited_ = false;
};

}  // namespace rdtx::txn
