// Worker: one (node, thread) pair's scheduler. It owns the coroutines of its
// coordinators, a ready queue, pollers (CQs, RPC endpoints, timers), and the
// FramePool their frames come from. A Loop runs one or more workers on one
// lcore; all of a worker's code runs on that lcore's thread, so nothing in a
// worker is locked. Workers never share mutable state.
//
// Awaitables find the worker they run on through Worker::current(), which the
// loop sets while it runs a worker (as SPDK's spdk_get_thread()).
// Thread-safety: none; one thread at a time, and one thread for its lifetime
// once tasks run.
#pragma once

#include <coroutine>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/frame_pool.hpp"
#include "runtime/task.hpp"

namespace rdtx::env {
class VirtualClock;
}

namespace rdtx::runtime {

class Worker;

namespace detail {
struct DetachedPromise;
}

// A coroutine waiting for a condition on memory another node or thread
// writes (a flag, a counter, a slot a one-sided WRITE fills): the worker
// checks it once per pass (poll_until()).
struct Watch {
  bool (*check)(Watch*);
  std::coroutine_handle<> h;
};

// A poller returns how much work it did (0 = idle), so the loop can tell busy
// from idle time.
using Poller = std::function<int()>;
// A registered poller's handle, for unregister_poller (0: none).
using PollerId = uint64_t;

class Worker {
 public:
  explicit Worker(std::string name);
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Destroys tasks still suspended (after a drain that timed out).
  ~Worker();

  const std::string& name() const { return name_; }

  // Starts `task` on this worker's next pass; the worker owns it until it
  // finishes. Its frame (and those it awaits) come from this worker's pool.
  void spawn(Task<void> task);
  // Makes a suspended coroutine of this worker runnable on the next pass.
  void schedule(std::coroutine_handle<> h) { ready_.push_back(h); }
  // The same for a coroutine that only polls for something another node or
  // thread must do (poll_wait()): resuming it is not counted as work, so a
  // loop whose coroutines all wait can idle (and give the CPU to the peer
  // they wait for, under run.idle = yield or sleep).
  void schedule_polling(std::coroutine_handle<> h) { polling_.push_back(h); }
  // Counts work done in this pass that no poller or resumption counted: a
  // coroutine resumed by poll_wait() that found what it polled for and went
  // on (computed, planned, executed). Without it such a pass counts as idle
  // (LoopStats, the idle policy) however long it ran.
  void note_work(int n = 1) { noted_work_ += n; }
  // Resumes w's coroutine on the first pass whose check of w is true; that
  // pass counts as work (something landed), the passes before do not.
  void watch(Watch* w) { watching_.push_back(w); }
  void add_poller(Poller p) { (void)register_poller("", std::move(p)); }
  // A named poller (as SPDK's spdk_poller_register_named), run every pass,
  // or at most once per period_ns when it is not 0. Control path only.
  PollerId register_poller(std::string name, Poller p, uint64_t period_ns = 0);
  // Removes a poller (safe from inside any poller of this worker: it stops
  // being called from the next pass on).
  void unregister_poller(PollerId id);
  // The names of the registered pollers, in order (for reports and tests).
  std::vector<std::string> poller_names() const;
  // Schedules h once the TSC reaches deadline (checked every pass).
  void schedule_at(uint64_t deadline_tsc, std::coroutine_handle<> h);
  size_t pending_timers() const { return timers_.size(); }

  // One pass: every poller once, then every coroutine that was ready at the
  // start of the pass. Returns the work done (pollers' sum + resumed tasks).
  int poll_once();
  // The same in virtual time (VirtualLoop): the pass also charges `clock`
  // the modelled cost of what it does (env::CostModel; counted only, with
  // the measured cost).
  int poll_once(env::VirtualClock& clock);

  size_t live_tasks() const { return live_; }
  // Cooperative stop: closed-loop coordinators check stopping() between
  // transactions and return.
  void request_stop() { stopping_ = true; }
  bool stopping() const { return stopping_; }

  FramePool& frames() { return pool_; }

  static Worker* current();

  // Makes `w` the current worker (and its pool the current frame pool) for the
  // scope; restores the previous one on exit.
  class Scope {
   public:
    explicit Scope(Worker* w);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    Worker* prev_;
    FramePool* prev_pool_;
  };

 private:
  friend struct detail::DetachedPromise;

  template <typename Charge>
  int poll(Charge& charge);

  std::string name_;
  FramePool pool_;  // declared first among the task state: destroyed last
  struct NamedPoller {
    PollerId id;
    std::string name;
    Poller fn;
    uint64_t period_tsc;
    uint64_t next_tsc;
    bool removed;
  };
  std::vector<NamedPoller> pollers_;
  PollerId next_poller_ = 1;
  bool pollers_changed_ = false;
  std::vector<std::coroutine_handle<>> ready_;
  std::vector<std::coroutine_handle<>> running_;
  std::vector<std::coroutine_handle<>> polling_;  // schedule_polling(): resumed, not counted
  std::vector<std::coroutine_handle<>> polling_now_;
  int noted_work_ = 0;  // note_work() in this pass
  std::vector<Watch*> watching_;  // watch(): checked every pass
  std::vector<Watch*> watching_now_;
  void check_watches();
  struct Timer {
    uint64_t deadline;
    std::coroutine_handle<> h;
    bool operator>(const Timer& o) const { return deadline > o.deadline; }
  };
  std::vector<Timer> timers_;  // min-heap on deadline
  int fire_timers();
  detail::DetachedPromise* tasks_ = nullptr;  // intrusive list of live tasks
  size_t live_ = 0;
  bool stopping_ = false;
};

// Reschedules the calling coroutine behind the other ready coroutines of its
// worker: lets other coordinators run during a local computation.
struct Yield {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { Worker::current()->schedule(h); }
  void await_resume() const noexcept {}
};
inline Yield yield() { return {}; }

// As yield(), for a coroutine polling for what another node or thread must
// do (a message, a flag): the pass that resumes it does not count it as work
// (Worker::schedule_polling), so the loop's idle policy applies while every
// coroutine merely waits.
struct PollWait {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) const { Worker::current()->schedule_polling(h); }
  void await_resume() const noexcept {}
};
inline PollWait poll_wait() { return {}; }
// The current worker's note_work() (nothing outside a worker).
inline void note_work(int n = 1) {
  if (Worker* w = Worker::current()) w->note_work(n);
}

// Suspends until done() is true, checked by the worker once per pass without
// resuming the coroutine: for what lands silently in memory (a vote counter
// other nodes add to, a reply slot their WRITEs fill). Unlike a poll_wait()
// loop, the pass that finds it done counts as work, so the loop's idle
// policy does not run between the landing and the resumption, while the
// passes that find nothing still let it give the CPU away. done() must be
// cheap and must include the caller's deadline if it has one.
template <typename Done>
struct PollUntil : Watch {
  Done done;
  explicit PollUntil(Done d) : Watch{&PollUntil::check_done, {}}, done(std::move(d)) {}
  static bool check_done(Watch* w) { return static_cast<PollUntil*>(w)->done(); }
  bool await_ready() { return done(); }
  void await_suspend(std::coroutine_handle<> coro) {
    h = coro;
    Worker::current()->watch(this);
  }
  void await_resume() const noexcept {}
};
template <typename Done>
PollUntil<Done> poll_until(Done done) {
  return PollUntil<Done>(std::move(done));
}

// Suspends the calling coroutine for at least `ns` nanoseconds without
// blocking the thread: other coroutines and pollers run meanwhile.
struct SleepFor {
  uint64_t ns;
  bool await_ready() const noexcept { return ns == 0; }
  void await_suspend(std::coroutine_handle<> h) const;
  void await_resume() const noexcept {}
};
inline SleepFor sleep_for(uint64_t ns) { return {ns}; }

// A counter a coroutine waits on until it reaches zero: one wait for a batch
// of completions (verbs of a doorbell batch, replies of several RPCs). The
// completer calls done(); the waiter is scheduled on its worker, not resumed
// inside the completer, so pollers finish their burst first.
class WaitGroup {
 public:
  WaitGroup() = default;
  explicit WaitGroup(int count) : remaining_(count) {}
  WaitGroup(const WaitGroup&) = delete;
  WaitGroup& operator=(const WaitGroup&) = delete;

  void add(int n = 1) { remaining_ += n; }
  // ok=false records a failure; the wait still ends when the count does.
  void done(bool ok = true) {
    failed_ |= !ok;
    if (--remaining_ == 0 && waiter_) {
      owner_->schedule(waiter_);
      waiter_ = {};
    }
  }
  int remaining() const { return remaining_; }
  bool failed() const { return failed_; }
  void reset(int count) {
    remaining_ = count;
    failed_ = false;
  }

  bool await_ready() const noexcept { return remaining_ <= 0; }
  void await_suspend(std::coroutine_handle<> h) noexcept {
    waiter_ = h;
    owner_ = Worker::current();
  }
  // True if every completion succeeded.
  bool await_resume() const noexcept { return !failed_; }

  // An awaiter by reference, for code that returns a group it owns to the
  // coroutine that waits (a WaitGroup itself cannot be copied).
  struct Ref {
    WaitGroup* wg;
    bool await_ready() const noexcept { return wg->await_ready(); }
    void await_suspend(std::coroutine_handle<> h) noexcept { wg->await_suspend(h); }
    bool await_resume() const noexcept { return wg->await_resume(); }
  };
  Ref wait() { return Ref{this}; }

 private:
  int remaining_ = 0;
  bool failed_ = false;
  std::coroutine_handle<> waiter_;
  Worker* owner_ = nullptr;
};

}  // namespace rdtx::runtime
