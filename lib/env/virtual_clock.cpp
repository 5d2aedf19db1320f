#include "env/virtual_clock.hpp"

namespace rdtx::env {

const char* to_string(VirtualCost c) { return c == VirtualCost::kModel ? "model" : "measured"; }

VirtualClock::VirtualClock(VirtualCost cost, const CostModel& model, uint64_t start, uint64_t max_pass_ns)
    : cost_(cost), model_(model), unit_{model.pass_ns, model.work_ns, model.resume_ns} {
  at = start;
  mark = hw_tsc();
  measured = cost == VirtualCost::kMeasured;
  max_pass = max_pass_ns;
  ns_per_hw_tick = 1e9 / static_cast<double>(hw_tsc_hz());
}

}  // namespace rdtx::env
