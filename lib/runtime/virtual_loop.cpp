#include "runtime/virtual_loop.hpp"

#include <algorithm>

namespace rdtx::runtime {

void VirtualLoop::add_worker(Worker* w) {
  const uint64_t t = now();
  const auto i = static_cast<uint32_t>(workers_.size());
  workers_.push_back(w);
  clocks_.push_back(t);
  stats_.emplace_back();
  heap_.push({t, i});
}

int VirtualLoop::step() {
  const auto [t, i] = heap_.top();
  heap_.pop();
  clock_.run_from(t);
  const int work = workers_[i]->poll_once(clock_);
  if (clock_.capped()) ++capped_;
  // A pass costs at least a tick, so that time always moves: a worker that
  // polls for what another must write cannot hold the others back.
  const uint64_t end = std::max(clock_.now(), t + 1);
  LoopStats& s = stats_[i];
  ++s.passes;
  s.idle_passes += work == 0;
  (work > 0 ? s.busy_tsc : s.idle_tsc) += end - t;
  clocks_[i] = end;
  heap_.push({end, i});
  clock_.run_from(heap_.top().first);
  return work;
}

}  // namespace rdtx::runtime
