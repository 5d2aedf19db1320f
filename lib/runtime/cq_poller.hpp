// Turns completions of an rdma::CompletionQueue into resumed coroutines.
// A signaled work request carries, as wr_id, the address of the WaitGroup its
// coroutine waits on (or 0 when nobody waits); the poller drains the CQ in
// bursts and calls done(ok) on each. Error completions are also counted so
// that a worker can report them.
// Thread-safety: one worker's thread.
#pragma once

#include <cstdint>

#include "rdma/rdma.hpp"
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
