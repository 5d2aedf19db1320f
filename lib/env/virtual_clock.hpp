// Virtual time: the clock a thread reads through env::tsc() while it
// emulates many workers on one CPU, each as if it had a CPU of its own
// (runtime::VirtualLoop, doc/runtime.md "Virtual time").
//
// The scheduler runs one worker pass at a time from that worker's clock
// (run_from()); during the pass the clock advances by what the pass costs:
//   kMeasured  the pass's real CPU time, read from the hardware counter.
//              Time the thread spent off the CPU must not count (on a
//              shared machine a preempted pass would stall its worker by a
//              whole time slice): where glibc registered rseq, the clock
//              arms the thread's rseq cpu_id_start with a value no CPU has;
//              the kernel rewrites it whenever it preempts, signals or
//              migrates the thread, and the first clock read after that
//              counts the pass only up to the read before it (what ran
//              between that read and the preemption is lost: under a
//              microsecond, reads being that frequent). A pass counts at
//              most max_pass_ns (a stall the detection missed);
//   kModel     a deterministic cost from what the pass does (CostModel:
//              per pass, per unit of poller work, per coroutine resumed),
//              charged as it does it (Worker::poll_once(clock)).
// In both, time a CPU would spend busy-waiting (a doorbell's MMIO, a
// workload's computation) is added with env::spend_ticks(), not spun.
// The clock runs at kHz = 1 GHz whatever the hardware's rate: a tick is a
// nanosecond, so that modelled costs and latencies convert exactly and a
// run does not depend on the TSC rate of the machine (determinism).
//
// Thread-safety: a clock belongs to the thread that installed it (Scope);
// other threads keep reading the hardware counter.
#pragma once

#include <cstdint>

#include "env/tsc.hpp"

namespace rdtx::env {

enum class VirtualCost : uint8_t { kMeasured, kModel };
const char* to_string(VirtualCost c);

// What one worker pass costs under VirtualCost::kModel, in ns. The defaults
// are fitted to the busy time of measured runs of SmallBank at 8 coroutines
// (OCC one-sided and RPC, NOWAIT RPC, WAITDIE one-sided; 2 nodes, 2 us
// latency) on the 2-core development VM, the idle pass to its measured
// cost; doc/runtime.md "Virtual time" says how far they are from measured
// figures there and for other workloads.
struct CostModel {
  uint64_t pass_ns = 85;    // every pass: the pollers' fixed cost (an idle pass costs this alone)
  uint64_t work_ns = 450;   // each unit of work a poller reports (a completion, a message handled)
  uint64_t resume_ns = 50;  // each coroutine resumed (a transaction step: most of its cost is in the work unit)
};

enum class CostUnit : uint8_t { kPass, kWork, kResume };

// The state tsc() reads is the base (detail::VirtualNow), so that the
// thread's clock pointer serves both.
class VirtualClock : private detail::VirtualNow {
 public:
  static constexpr uint64_t kHz = 1'000'000'000;

  // `start`: the clock's first reading (not 0: 0 means "no time" to
  // several callers). max_pass_ns: kMeasured's cap on one pass. A clock
  // belongs to the thread that makes it (its rseq area).
  VirtualClock(VirtualCost cost, const CostModel& model, uint64_t start, uint64_t max_pass_ns);
  // Gives the rseq word back its CPU number.
  ~VirtualClock();
  VirtualClock(const VirtualClock&) = delete;
  VirtualClock& operator=(const VirtualClock&) = delete;

  VirtualCost cost() const { return cost_; }
  const CostModel& model() const { return model_; }

  // Now: where the pass started, plus what was charged or spent since,
  // plus (kMeasured) the real time since, at most the cap.
  using detail::VirtualNow::now;
  // Starts a pass (or the scheduler's time between passes) at `t`. A
  // preemption between passes costs nobody: the word is armed again.
  void run_from(uint64_t t) {
    at = t;
    mark = hw_tsc();
    last = 0;
    if (preempt_word != nullptr) *preempt_word = kArmed;
  }
  // Time spent without running (spend_ticks()).
  void advance(uint64_t ticks) {
    at += ticks;
    spent_ += ticks;
  }
  // Ticks advance() added so far.
  uint64_t spent() const { return spent_; }
  // kModel: adds n units' cost; kMeasured: nothing (the counter sees it).
  // Both count them (units()): what a measured run did, to fit a model to.
  void charge(CostUnit u, uint64_t n) {
    units_[static_cast<int>(u)] += n;
    if (cost_ == VirtualCost::kModel) at += unit_[static_cast<int>(u)] * n;
  }
  // Units charged so far, by CostUnit.
  uint64_t units(CostUnit u) const { return units_[static_cast<int>(u)]; }
  // kMeasured: whether the real time measured since run_from() (or since
  // a preemption was seen) exceeds the cap.
  bool capped() const {
    return measured && static_cast<double>(hw_tsc() - mark) * ns_per_hw_tick > static_cast<double>(max_pass);
  }
  // kMeasured: whether preemptions are detected (rseq registered), and how
  // many were, within passes.
  bool detects_preemption() const { return preempt_word != nullptr; }
  uint64_t preemptions_seen() const { return preemptions; }

  // Installs a clock as this thread's for the scope (env::tsc(),
  // env::tsc_hz()); restores the previous one (nullptr: real time) after.
  class Scope {
   public:
    explicit Scope(VirtualClock* c) : prev_(detail::t_virtual_clock) { detail::t_virtual_clock = c; }
    ~Scope() { detail::t_virtual_clock = prev_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    detail::VirtualNow* prev_;
  };

 private:
  friend VirtualClock* virtual_clock();

  const VirtualCost cost_;
  const CostModel model_;
  const uint64_t unit_[3];
  uint64_t units_[3] = {};
  uint64_t spent_ = 0;
};

// This thread's virtual clock, or nullptr (real time).
inline VirtualClock* virtual_clock() { return static_cast<VirtualClock*>(detail::t_virtual_clock); }

}  // namespace rdtx::env
