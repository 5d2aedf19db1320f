// OneSidedBatch (onesided_batch.hpp): linking a batch's requests per node,
// posting them (one doorbell per QP, or one per request), waiting, chunking
// what exceeds a QP's share, and recording each QP's posts (QpAck).
#include "txn/onesided_batch.hpp"

#include <algorithm>

#include "runtime/cq_poller.hpp"
#include "txn/coordinator.hpp"

namespace rdtx::txn {

OneSidedBatch::OneSidedBatch(Coordinator& c) : c_(c) {}

void OneSidedBatch::link_per_node() {
  // Only the cluster's nodes are cleared: this runs several times per transaction.
  for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd) head[nd] = tail[nd] = nullptr;
  for (uint32_t i = 0; i < n_; ++i) {
    uint32_t nd = node_of_[i];
    count(wrs_[i]);
    wrs_[i].next = nullptr;
    wrs_[i].lkey = wrs_[i].lkey ? wrs_[i].lkey : c_.lkey();
    if (tail[nd]) tail[nd]->next = &wrs_[i];
    else head[nd] = &wrs_[i];
    tail[nd] = &wrs_[i];
  }
}

void OneSidedBatch::count(const rdma::WorkRequest& wr) {
  switch (wr.opcode) {
    case rdma::Opcode::kRead: c_.count_verb(stats::Verb::kRead, wr.length); break;
    case rdma::Opcode::kWrite: c_.count_verb(stats::Verb::kWrite, wr.length); break;
    case rdma::Opcode::kCompareSwap: c_.count_verb(stats::Verb::kCas, 8); break;
    case rdma::Opcode::kFetchAdd: c_.count_verb(stats::Verb::kFaa, 8); break;
    default: c_.count_verb(stats::Verb::kSend, wr.length); break;
  }
}

bool OneSidedBatch::add_unlock(const Access& a) {
  static const uint64_t kZero = 0;  // inline: copied at post time
  return write({a.node, a.tuple_addr, c_.descriptor(a.node, a.table).rkey}, &kZero, 8, rdma::kInline) != nullptr;
}

bool OneSidedBatch::add_read_unlock(const Access& a, std::byte* result) {
  // -1: while shared holders count, no exclusive bit can be set.
  return faa({a.node, a.tuple_addr, c_.descriptor(a.node, a.table).rkey}, result, ~uint64_t{0}) != nullptr;
}

bool OneSidedBatch::post_node(uint32_t nd, runtime::WaitGroup& wg, bool doorbell, bool signaled) {
  if (signaled) {
    tail[nd]->flags |= rdma::kSignaled;
    tail[nd]->wr_id = runtime::CqPoller::wr_id(&wg);
    wg.add(1);
  }
  rdma::QueuePair* qp = c_.engine().ctx().qp_to(nd, c_.index());
  QpAck& ack = c_.engine().qp_ack(nd, c_.index());
  post_no[nd] = ++ack.posted;
  rdma::WorkRequest* bad = nullptr;
  if (doorbell) {
    c_.count_doorbell();
    if (qp->post_send(head[nd], &bad) == 0) return true;
  } else {
    // One doorbell per request: the cost doorbell batching saves.
    rdma::WorkRequest* r = head[nd];
    while (r != nullptr) {
      rdma::WorkRequest* next = r->next;
      r->next = nullptr;
      c_.count_doorbell();
      if (qp->post_send(r, &bad) != 0) break;
      r = next;
    }
    if (r == nullptr) return true;
  }
  if (signaled) wg.done(false);
  ack.failed = ack.posted;  // part of it may be posted: in doubt
  return false;
}

bool OneSidedBatch::fits_in_flight() const {
  uint32_t per_node[kMaxNodes] = {};
  for (uint32_t i = 0; i < n_; ++i)
    if (++per_node[node_of_[i]] > kMaxInFlightPerNode) return false;
  return true;
}

OneSidedBatch::Execution OneSidedBatch::execute() {
  const Options& o = c_.engine().options();
  wg_.reset(0);
  posted_ok_ = true;
  if (n_ == 0) return Execution(this);
  if (!o.outstanding_requests) return Execution(execute_chunked(true));
  if (n_ > kMaxInFlightPerNode && !fits_in_flight()) return Execution(execute_chunked(false));
  link_per_node();
  for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd)
    if (head[nd]) {
      if (post_node(nd, wg_, o.doorbell_batching)) c_.engine().qp_ack(nd, c_.index()).awaited = post_no[nd];
      else posted_ok_ = false;
    }
  return Execution(this);
}

bool OneSidedBatch::complete(bool waited) {
  if (waited) c_.count_round_trip();
  const bool ok = posted_ok_ && !wg_.failed();
  if (n_ != 0)
    for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd) {
      if (!head[nd]) continue;
      QpAck& ack = c_.engine().qp_ack(nd, c_.index());
      if (ok) {
        // Every post before this one on the QP has completed too.
        ack.confirmed = std::max(ack.confirmed, post_no[nd]);
      } else {
        // A failed verb leaves its QP in the error state: bring it back;
        // what was posted on it unconfirmed is in doubt.
        ack.failed = ack.posted;
        (void)c_.engine().ctx().reconnect(nd, c_.index());
      }
    }
  n_ = 0;
  return ok;
}

runtime::Task<bool> OneSidedBatch::execute_chunked(bool serial) {
  const bool doorbell = c_.engine().options().doorbell_batching;
  const uint32_t nodes = c_.db().nodes();
  link_per_node();
  rdma::WorkRequest* next[kMaxNodes];     // each node's requests not posted yet
  rdma::WorkRequest* first[kMaxNodes];    // head[] as linked (complete() reads it)
  for (uint32_t nd = 0; nd < nodes; ++nd) next[nd] = first[nd] = head[nd];
  for (uint32_t from = 0; from < nodes;) {
    // One chunk of every node's list (of one node's, when serial), in flight together.
    wg_.reset(0);
    bool posted = false;
    const uint32_t to = serial ? from + 1 : nodes;
    for (uint32_t nd = from; nd < to; ++nd) {
      if (next[nd] == nullptr) continue;
      rdma::WorkRequest* last = next[nd];
      for (uint32_t k = 1; k < kMaxInFlightPerNode && last->next != nullptr; ++k) last = last->next;
      rdma::WorkRequest* rest = last->next;
      last->next = nullptr;
      head[nd] = next[nd];
      tail[nd] = last;
      next[nd] = rest;
      if (post_node(nd, wg_, doorbell)) {
        posted = true;
        c_.engine().qp_ack(nd, c_.index()).awaited = post_no[nd];
      } else {
        posted_ok_ = false;
      }
    }
    if (posted) {
      posted_ok_ &= co_await wg_.wait();
      c_.count_round_trip();
    }
    bool left = false;
    for (uint32_t nd = from; nd < to; ++nd) left |= next[nd] != nullptr;
    if (!left) from = to;  // serial: the next node
  }
  for (uint32_t nd = 0; nd < nodes; ++nd) head[nd] = first[nd];
  wg_.reset(0);
  co_return complete(false);
}

bool OneSidedBatch::post_only(PendingCommit& p) {
  if (n_ == 0) return true;
  if (!fits_in_flight()) return false;  // callers check fits_in_flight() first
  link_per_node();
  const bool signaled = !c_.engine().options().unsignaled_commit;
  bool ok = true;
  for (uint32_t nd = 0; nd < c_.db().nodes(); ++nd) {
    if (!head[nd]) continue;
    if (!post_node(nd, p.wg, true, signaled)) ok = false;
    else if (!signaled) p.add(nd, post_no[nd]);
  }
  n_ = 0;
  return ok;
}

}  // namespace rdtx::txn
