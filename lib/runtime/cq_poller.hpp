// Turns completions of an rdma::CompletionQueue into resumed coroutines.
// A signaled work request carries, as wr_id, the address of the WaitGroup its
// coroutine waits on (or 0 when nobody waits); the poller drains the CQ in
// bursts and calls done(ok) on each. Error completions are also counted so
// that a worker can report them.
// Thread-safety: one worker's thread.
#pragma once

#include <cstdint>

#include "rdma/rdma.hpp"
#include "runtime/task.hpp"
#include "runtime/worker.hpp"

namespace rdtx::runtime {

class CqPoller {
 public:
  explicit CqPoller(rdma::CompletionQueue* cq) : cq_(cq) {}

  static uint64_t wr_id(WaitGroup* wg) { return reinterpret_cast<uint64_t>(wg); }

  int operator()() {
    rdma::Completion wc[kBurst];
    int n = cq_->poll(wc, kBurst);
    for (int i = 0; i < n; ++i) {
      bool ok = wc[i].status == rdma::Status::kSuccess;
      errors_ += !ok;
      if (wc[i].wr_id != 0) reinterpret_cast<WaitGroup*>(wc[i].wr_id)->done(ok);
    }
    return n;
  }
  uint64_t errors() const { return errors_; }

 private:
  static constexpr int kBurst = 32;
  rdma::CompletionQueue* cq_;
  uint64_t errors_ = 0;
};

}  // namespace rdtx::runtime

namespace rdtx::runtime {

// Posts a doorbell batch (`list`, ending at `last`) on `qp` and waits for it:
// `last` is made signaled and carries the WaitGroup; earlier requests stay
// as they are (normally unsignaled with wr_id 0: an error on one of them
// flushes `last`, so the wait still ends, with failure). The QP's send CQ
// must be polled by a CqPoller on the calling coroutine's worker.
// Returns false if posting failed or any request completed with an error.
inline Task<bool> post_and_wait(rdma::QueuePair* qp, rdma::WorkRequest* list, rdma::WorkRequest* last) {
  WaitGroup wg(1);
  last->flags |= rdma::kSignaled;
  last->wr_id = CqPoller::wr_id(&wg);
  rdma::WorkRequest* bad = nullptr;
  if (qp->post_send(list, &bad) != 0) co_return false;
  co_return co_await wg;
}

}  // namespace rdtx::runtime
