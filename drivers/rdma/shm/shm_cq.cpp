#include "shm_cq.hpp"

#include <algorithm>
#include <bit>

#include "env/tsc.hpp"
#include "node.hpp"
#include "shm_qp.hpp"

namespace rdtx::rdma::shm {

CqCore::CqCore(const Node* node, uint32_t pd, uint32_t depth, bool timed)
    : node_(node),
      pd_(pd),
      depth_(depth),
      timed_(timed),
      mask_(std::bit_ceil(depth) - 1),
      ring_(std::make_unique<Entry[]>(mask_ + 1)) {}

int CqCore::poll(Completion* out, int max) {
  if (max <= 0) return 0;
  if (timed_) {
    uint64_t now = env::tsc();
    for (ShmQp* qp : send_qps_) qp->progress(now);
    // A stopped process polls nothing: its completions and received
    // messages wait until it resumes.
    if (node_->paused(now)) return 0;
  }
  int n = 0;
  while (n < max && head_ != tail_) {
    const Entry& e = ring_[head_++ & mask_];
    out[n++] = e.c;
    e.qp->retire(e.seq);
  }
  for (ShmQp* qp : recv_qps_) {
    if (n == max) break;
    n += qp->harvest(out + n, max - n);
  }
  return n;
}

Result<void> CqCore::attach(ShmQp* qp, uint32_t send_entries, bool recv) {
  if (send_entries > 0) {
    if (reserved_ + send_entries > depth_)
      return make_error(ENOSPC,
                        "CQ of depth %u is too small: its QPs may have %llu send completions outstanding, a QP with "
                        "max_send_wr %u needs %llu",
                        depth_, static_cast<unsigned long long>(reserved_), send_entries,
                        static_cast<unsigned long long>(reserved_ + send_entries));
    reserved_ += send_entries;
    send_qps_.push_back(qp);
  }
  if (recv) recv_qps_.push_back(qp);
  return {};
}

void CqCore::detach(ShmQp* qp, uint32_t send_entries, bool recv) {
  if (send_entries > 0) {
    reserved_ -= send_entries;
    std::erase(send_qps_, qp);
    // Keep the other QPs' completions, in order, and drop this one's: its
    // slots must not outlive its reservation.
    uint64_t keep = head_;
    for (uint64_t i = head_; i != tail_; ++i) {
      if (ring_[i & mask_].qp != qp) ring_[keep++ & mask_] = ring_[i & mask_];
    }
    tail_ = keep;
  }
  if (recv) std::erase(recv_qps_, qp);
}

}  // namespace rdtx::rdma::shm
