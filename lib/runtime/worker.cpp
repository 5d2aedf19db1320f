#include "runtime/worker.hpp"

#include <algorithm>
#include <cassert>
#include <functional>

#include "env/tsc.hpp"
#include "env/virtual_clock.hpp"

namespace rdtx::runtime {

namespace {
thread_local Worker* t_worker = nullptr;
}

namespace detail {

// The frame of a spawned task: owns the Task, links itself into its worker's
// list of live tasks, and frees itself when the task finishes.
struct DetachedPromise : PromiseBase {
  Worker* worker = nullptr;
  DetachedPromise* prev = nullptr;
  DetachedPromise* next = nullptr;

  struct Handle {
    std::coroutine_handle<DetachedPromise> h;
  };
  Handle get_return_object() { return {std::coroutine_handle<DetachedPromise>::from_promise(*this)}; }
  std::suspend_never final_suspend() noexcept { return {}; }
  void return_void() {}

  void link(Worker* w) {
    worker = w;
    next = w->tasks_;
    if (next) next->prev = this;
    w->tasks_ = this;
    ++w->live_;
  }
  ~DetachedPromise() {
    if (worker == nullptr) return;
    if (prev) prev->next = next;
    else worker->tasks_ = next;
    if (next) next->prev = prev;
    --worker->live_;
  }
};

}  // namespace detail

}  // namespace rdtx::runtime

template <typename... Args>
struct std::coroutine_traits<rdtx::runtime::detail::DetachedPromise::Handle, Args...> {
  using promise_type = rdtx::runtime::detail::DetachedPromise;
};

namespace rdtx::runtime {

namespace {
detail::DetachedPromise::Handle run_detached(Task<void> task) { co_await std::move(task); }
}  // namespace

Worker::Worker(std::string name) : name_(std::move(name)) {
  ready_.reserve(64);
  running_.reserve(64);
  polling_.reserve(64);
  polling_now_.reserve(64);
  watching_.reserve(64);
  watching_now_.reserve(64);
  timers_.reserve(64);
}

void Worker::schedule_at(uint64_t deadline_tsc, std::coroutine_handle<> h) {
  timers_.push_back({deadline_tsc, h});
  std::push_heap(timers_.begin(), timers_.end(), std::greater<>{});
}

int Worker::fire_timers() {
  if (timers_.empty()) return 0;
  uint64_t now = env::tsc();
  int n = 0;
  while (!timers_.empty() && timers_.front().deadline <= now) {
    std::pop_heap(timers_.begin(), timers_.end(), std::greater<>{});
    schedule(timers_.back().h);
    timers_.pop_back();
    ++n;
  }
  return n;
}

void SleepFor::await_suspend(std::coroutine_handle<> h) const {
  Worker::current()->schedule_at(env::tsc() + env::ns_to_tsc(ns), h);
}

Worker::~Worker() {
  Scope scope(this);
  while (tasks_ != nullptr) {
    auto h = std::coroutine_handle<detail::DetachedPromise>::from_promise(*tasks_);
    h.destroy();  // unlinks itself
  }
}

Worker* Worker::current() { return t_worker; }

Worker::Scope::Scope(Worker* w) : prev_(t_worker), prev_pool_(FramePool::current()) {
  t_worker = w;
  FramePool::set_current(w ? &w->pool_ : nullptr);
}
Worker::Scope::~Scope() {
  t_worker = prev_;
  FramePool::set_current(prev_pool_);
}

void Worker::spawn(Task<void> task) {
  Scope scope(this);
  auto h = run_detached(std::move(task)).h;
  h.promise().link(this);
  schedule(h);
}

namespace {
// What a pass charges to a virtual clock: nothing in real time (poll_once(),
// compiled without the charges), or the modelled cost of what it does
// (poll_once(clock)).
//
// Under a virtual clock a pass also ends early, leaving the coroutines it
// has not resumed yet for the next one, once it has run kMaxVirtualPassNs:
// the scheduler runs the worker with the smallest clock, so the workers'
// clocks spread by up to the longest pass, and what a worker posts at the
// end of a long pass reserves the RNIC model's calendars that far ahead of
// the others. The calendars cover at least 1 ms (shm's nic_model.hpp); a
// request older than that is unaccounted and fails the run. CALVIN's
// passes ran 10 coroutines' executions of 60-311 us back to back.
constexpr uint64_t kMaxVirtualPassNs = 500'000;  // at 1 GHz: ticks
static_assert(env::VirtualClock::kHz == 1'000'000'000);
struct NoCharge {
  void operator()(env::CostUnit, uint64_t = 1) const {}
  bool pass_full() const { return false; }
};
struct ChargeTo {
  env::VirtualClock* clock;
  uint64_t start;
  void operator()(env::CostUnit u, uint64_t n = 1) const { clock->charge(u, n); }
  bool pass_full() const { return clock->now() - start >= kMaxVirtualPassNs; }
};

// Resumes `now` (the coroutines taken from `queue` for this pass) in order,
// until the pass is full; puts the rest back at the front of `queue`, ahead
// of what this pass scheduled. Returns how many it resumed.
template <typename Charge>
size_t resume_all(Charge& charge, std::vector<std::coroutine_handle<>>& now,
                  std::vector<std::coroutine_handle<>>& queue) {
  size_t i = 0;
  for (; i < now.size(); ++i) {
    if (i > 0 && charge.pass_full()) {
      queue.insert(queue.begin(), now.begin() + static_cast<std::ptrdiff_t>(i), now.end());
      break;
    }
    charge(env::CostUnit::kResume);
    now[i].resume();
  }
  now.clear();
  return i;
}
}  // namespace

int Worker::poll_once() {
  NoCharge charge;
  return poll(charge);
}
int Worker::poll_once(env::VirtualClock& clock) {
  ChargeTo charge{&clock, clock.now()};
  return poll(charge);
}

// Under a virtual clock the pass charges what it does as it does it: its
// fixed cost first, each poller's work after the poller, each coroutine
// before it runs, so that what a coroutine posts is stamped after the CPU
// time that led to it.
template <typename Charge>
int Worker::poll(Charge& charge) {
  Scope scope(this);
  charge(env::CostUnit::kPass);
  int work = 0;
  if (pollers_changed_) {
    std::erase_if(pollers_, [](const NamedPoller& p) { return p.removed; });
    pollers_changed_ = false;
  }
  for (size_t i = 0; i < pollers_.size(); ++i) {
    NamedPoller& p = pollers_[i];
    if (p.removed) continue;
    if (p.period_tsc != 0) {
      const uint64_t now = env::tsc();
      if (now < p.next_tsc) continue;
      p.next_tsc = now + p.period_tsc;
    }
    const int w = pollers_[i].fn();
    if (w > 0) charge(env::CostUnit::kWork, static_cast<uint64_t>(w));
    work += w;
  }
  work += fire_timers();
  check_watches();  // what it schedules counts below, as resumed work
  if (!ready_.empty()) {
    running_.swap(ready_);
    work += static_cast<int>(resume_all(charge, running_, ready_));
  }
  if (!polling_.empty()) {
    polling_now_.swap(polling_);
    resume_all(charge, polling_now_, polling_);
  }
  work += noted_work_;
  noted_work_ = 0;
  return work;
}

void Worker::check_watches() {
  if (watching_.empty()) return;
  watching_now_.swap(watching_);
  for (Watch* w : watching_now_) {
    if (w->check(w)) {
      schedule(w->h);  // resumed in this pass, with the ready coroutines
    } else {
      watching_.push_back(w);
    }
  }
  watching_now_.clear();
}

PollerId Worker::register_poller(std::string name, Poller p, uint64_t period_ns) {
  const PollerId id = next_poller_++;
  pollers_.push_back({id, std::move(name), std::move(p), period_ns ? env::ns_to_tsc(period_ns) : 0, 0, false});
  return id;
}

void Worker::unregister_poller(PollerId id) {
  for (auto& p : pollers_)
    if (p.id == id) {
      p.removed = true;  // erased before the next pass: we may be inside it
      pollers_changed_ = true;
    }
}

std::vector<std::string> Worker::poller_names() const {
  std::vector<std::string> v;
  for (const auto& p : pollers_)
    if (!p.removed) v.push_back(p.name);
  return v;
}

}  // namespace rdtx::runtime
