#include "membership/lease.hpp"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rdtx::membership {

namespace {

constexpr size_t kSlot = 64;
constexpr uint64_t kReadTag = uint64_t{1} << 32;  // wr_id of a READ of a node's beat
constexpr uint32_t kMaxOutstanding = 8;  // per QP: beyond it the peer is too slow to need more

uint64_t mono_ns() { return lease_clock_ns(); }

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// What every node sends in the exchange: its region, then the address of
// its QP to each node (unused for itself).
struct WireHead {
  uint64_t addr;
  uint32_t rkey;
  uint32_t nodes;
};

}  // namespace

uint64_t lease_clock_ns() {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct LeaseAgent::Peer {
  std::unique_ptr<rdma::QueuePair> qp;
  uint64_t remote_addr = 0;  // the peer's region
  uint32_t rkey = 0;
  uint32_t outstanding = 0;  // signaled WRITEs without a completion
  // CM side.
  uint64_t seen_seq = 0;      // newest renewal seen
  uint64_t seen_at = 0;       // when it was seen (0: none yet)
  uint64_t granted_at = 0;    // when the newest grant was posted (start() before the first)
  uint64_t watched_from = 0;  // when this CM began to watch it (start(), or its switch)
  bool suspected = false;
  // Its beat, as this node last READ it (member, fenced).
  uint64_t beat = 0;
  bool beat_read = false, reading = false;
  std::atomic<uint64_t> beat_moved{0};  // when it was last seen to move (0: never)
  std::atomic<bool> revoked{false};
  std::atomic<bool> gone{false};  // forget(): no member
};

Result<std::unique_ptr<LeaseAgent>> LeaseAgent::create(rdma::Device& device, uint32_t self, uint32_t nodes, uint32_t cm,
                                                       const LeaseOptions& options, const LeaseAllGather& all_gather) {
  if (nodes == 0 || self >= nodes || cm >= nodes)
    return make_error(EINVAL, "lease: node %u, CM %u: both must be below the %u nodes", self, cm, nodes);
  if (options.lease_ns < 1'000'000)
    return make_error(EINVAL, "lease: a lease of %.3f ms is below the 1 ms the agent's clock can keep", ms(options.lease_ns));
  std::unique_ptr<LeaseAgent> a(new LeaseAgent());
  a->o_ = options;
  if (a->o_.tick_ns == 0) a->o_.tick_ns = a->o_.lease_ns / 8;
  if (a->o_.guard_ns == 0) a->o_.guard_ns = a->o_.tick_ns;
  if (a->o_.first_grant_ns == 0) a->o_.first_grant_ns = 4 * a->o_.lease_ns;
  if (a->o_.tick_ns * 2 > a->o_.lease_ns)
    return make_error(EINVAL, "lease: a tick of %.3f ms leaves no second renewal within a lease of %.3f ms",
                      ms(a->o_.tick_ns), ms(a->o_.lease_ns));
  a->self_ = self;
  a->nodes_ = nodes;
  a->cm_.store(cm, std::memory_order_relaxed);
  a->peers_ = std::vector<Peer>(nodes);
  a->stats_.resize(nodes);

  auto ctx = device.open_context();
  if (!ctx.ok()) return make_error(ctx.error().code, "lease: node %u cannot open a device context: %s", self, ctx.error().message.c_str());
  a->ctx_ = std::move(*ctx);
  const size_t bytes = kSlot * (1 + nodes);
  auto mem = a->ctx_->alloc_memory(bytes);
  if (!mem.ok()) return make_error(mem.error().code, "lease: node %u: its region of %zu bytes: %s", self, bytes, mem.error().message.c_str());
  a->mem_ = std::move(*mem);
  std::memset(a->mem_->data(), 0, a->mem_->size());
  auto mr = a->ctx_->reg_mr(a->mem_->data(), a->mem_->size(), rdma::kLocalWrite | rdma::kRemoteWrite | rdma::kRemoteRead);
  if (!mr.ok()) return make_error(mr.error().code, "lease: node %u cannot register its region: %s", self, mr.error().message.c_str());
  a->mr_ = *mr;
  auto cq = a->ctx_->create_cq(kMaxOutstanding * nodes + 16);
  if (!cq.ok()) return make_error(cq.error().code, "lease: node %u: its completion queue: %s", self, cq.error().message.c_str());
  a->cq_ = std::move(*cq);
  for (uint32_t n = 0; n < nodes; ++n) {
    if (n == self) continue;
    rdma::QpInit init;
    init.type = rdma::QpType::kRc;
    init.send_cq = a->cq_.get();
    init.max_send_wr = kMaxOutstanding;
    init.max_recv_wr = 1;
    init.max_inline = 16;
    auto qp = a->ctx_->create_qp(init);
    if (!qp.ok()) return make_error(qp.error().code, "lease: node %u: its QP to node %u: %s", self, n, qp.error().message.c_str());
    a->peers_[n].qp = std::move(*qp);
  }

  std::vector<std::byte> mine(sizeof(WireHead) + sizeof(rdma::QpAddress) * nodes);
  const WireHead head{a->mr_.remote_addr(), a->mr_.rkey, nodes};
  std::memcpy(mine.data(), &head, sizeof head);
  for (uint32_t n = 0; n < nodes; ++n) {
    if (n == self) continue;
    const rdma::QpAddress qa = a->peers_[n].qp->address();
    std::memcpy(mine.data() + sizeof head + sizeof qa * n, &qa, sizeof qa);
  }
  auto all = all_gather(mine, "lease addresses");
  if (!all.ok()) return all.error();
  if (all->size() != nodes) return make_error(EPROTO, "lease: addresses of %zu nodes, expected %u", all->size(), nodes);
  for (uint32_t n = 0; n < nodes; ++n) {
    if (n == self) continue;
    const auto& blob = (*all)[n];
    WireHead h;
    if (blob.size() != mine.size() || (std::memcpy(&h, blob.data(), sizeof h), h.nodes != nodes))
      return make_error(EPROTO, "lease: node %u sent %zu bytes of lease addresses, expected %zu for %u nodes", n,
                        blob.size(), mine.size(), nodes);
    rdma::QpAddress qa;
    std::memcpy(&qa, blob.data() + sizeof h + sizeof qa * self, sizeof qa);
    Peer& p = a->peers_[n];
    p.remote_addr = h.addr;
    p.rkey = h.rkey;
    if (auto r = p.qp->connect(qa); !r.ok())
      return make_error(r.error().code, "lease: node %u cannot connect its QP to node %u: %s", self, n, r.error().message.c_str());
  }
  return a;
}

LeaseAgent::~LeaseAgent() {
  stop();
  for (Peer& p : peers_) p.qp.reset();
  cq_.reset();
  if (mem_ && ctx_) (void)ctx_->dereg_mr(mr_);
}

void LeaseAgent::start() {
  if (thread_.joinable()) return;
  started_ns_ = mono_ns();
  valid_until_ = started_ns_ + o_.lease_ns;
  last_send_ = started_ns_;
  for (Peer& p : peers_) {
    p.granted_at = started_ns_ + o_.first_grant_ns - o_.lease_ns;
    p.watched_from = started_ns_;
  }
  acked_.store(0, std::memory_order_relaxed);
  stop_.store(false, std::memory_order_relaxed);
  thread_ = std::thread([this] { run(); });
}

void LeaseAgent::stop() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
}

void LeaseAgent::run() {
  if (o_.realtime) {
    sched_param sp{};
    sp.sched_priority = 1;
    realtime_.store(::pthread_setschedparam(::pthread_self(), SCHED_FIFO, &sp) == 0, std::memory_order_relaxed);
  }
  uint64_t next = mono_ns();
  while (!stop_.load(std::memory_order_acquire)) {
    if (const uint64_t f = freeze_ns_.exchange(0, std::memory_order_acq_rel); f != 0) {
      // In steps, so that stop() need not wait for the whole freeze.
      const uint64_t until = mono_ns() + f;
      while (!stop_.load(std::memory_order_acquire) && mono_ns() < until) ::usleep(1000);
    }
    tick(mono_ns());
    next += o_.tick_ns;
    const uint64_t now = mono_ns();
    if (next < now) next = now;  // behind (stopped, descheduled): no burst of ticks to catch up
    timespec ts{static_cast<time_t>(next / 1'000'000'000ull), static_cast<long>(next % 1'000'000'000ull)};
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
  }
}

uint64_t LeaseAgent::word(size_t slot, int i) const {
  const auto* w = reinterpret_cast<const uint64_t*>(static_cast<const std::byte*>(mem_->data()) + slot * kSlot) + i;
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

uint64_t LeaseAgent::announced() const { return word(0, 1); }

uint64_t LeaseAgent::acknowledged(uint32_t n) const {
  if (n == self_) return announced_out_.load(std::memory_order_acquire);
  return n < nodes_ ? word(1 + n, 1) : 0;
}

void LeaseAgent::revoke(uint32_t n) {
  if (n < nodes_) peers_[n].revoked.store(true, std::memory_order_release);
}

void LeaseAgent::forget(uint32_t n) {
  if (n >= nodes_) return;
  peers_[n].revoked.store(true, std::memory_order_release);
  peers_[n].gone.store(true, std::memory_order_release);
}

void LeaseAgent::post_write(uint32_t to, size_t slot, uint64_t w0, uint64_t w1) {
  Peer& p = peers_[to];
  if (p.outstanding >= kMaxOutstanding) return;
  uint64_t payload[2] = {w0, w1};
  rdma::WorkRequest wr;
  wr.wr_id = to;
  wr.opcode = rdma::Opcode::kWrite;
  wr.flags = rdma::kSignaled | rdma::kInline;
  wr.local = payload;
  wr.length = sizeof payload;
  wr.remote_addr = p.remote_addr + slot * kSlot;
  wr.rkey = p.rkey;
  rdma::WorkRequest* bad = nullptr;
  if (const int rc = p.qp->post_send(&wr, &bad); rc != 0) {
    verb_errors_.fetch_add(1, std::memory_order_relaxed);
    char buf[96];
    std::snprintf(buf, sizeof buf, "posting a WRITE to node %u failed (%s)", to, std::strerror(-rc));
    last_error_ = buf;
    return;
  }
  ++p.outstanding;
}

void LeaseAgent::reap() {
  rdma::Completion wc[16];
  for (int n; (n = cq_->poll(wc, 16)) > 0;)
    for (int i = 0; i < n; ++i) {
      const uint32_t to = static_cast<uint32_t>(wc[i].wr_id);
      if (to < nodes_ && peers_[to].outstanding > 0) --peers_[to].outstanding;
      if ((wc[i].wr_id & kReadTag) != 0 && to < nodes_) {
        Peer& p = peers_[to];
        p.reading = false;
        // Its beat landed in word 4 of slot 1 + to: moved, or not.
        if (wc[i].status == rdma::Status::kSuccess) {
          const uint64_t b = word(1 + to, 4);
          if (p.beat_read && b != p.beat) p.beat_moved.store(lease_clock_ns(), std::memory_order_release);
          p.beat = b;
          p.beat_read = true;
        }
      }
      if (wc[i].status != rdma::Status::kSuccess) {
        verb_errors_.fetch_add(1, std::memory_order_relaxed);
        last_error_ = std::string("a WRITE to node ") + std::to_string(to) + " completed with " + rdma::to_string(wc[i].status);
      }
    }
}

void LeaseAgent::tick(uint64_t now) {
  // The beat others READ when they wonder whether this node still runs.
  __atomic_store_n(reinterpret_cast<uint64_t*>(mem_->data()) + 2, ++beat_, __ATOMIC_RELEASE);
  reap();
  if (const uint32_t n = switch_to_.exchange(kNoSwitch, std::memory_order_acq_rel); n != kNoSwitch && n < nodes_)
    apply_switch(now, n);
  if (is_cm())
    cm_tick(now);
  else
    member_tick(now);
}

void LeaseAgent::fence(uint64_t now, std::string why) {
  if (o_.on_fence) o_.on_fence();
  {
    std::lock_guard lk(mu_);
    fence_reason_ = std::move(why);
  }
  lease_end_.store(valid_until_, std::memory_order_release);
  fenced_at_.store(now, std::memory_order_release);
  fenced_.store(true, std::memory_order_release);
}

std::string LeaseAgent::fence_reason() const {
  std::lock_guard lk(mu_);
  return fence_reason_;
}

void LeaseAgent::apply_switch(uint64_t now, uint32_t n) {
  cm_.store(n, std::memory_order_release);
  if (n == self_) {
    // Every member gets first_grant_ns to renew with its new CM; renewals
    // already in the slots are not new.
    for (uint32_t p = 0; p < nodes_; ++p) {
      if (p == self_) continue;
      Peer& peer = peers_[p];
      peer.seen_seq = word(1 + p, 0);
      peer.seen_at = 0;
      peer.granted_at = now + o_.first_grant_ns - o_.lease_ns;
      peer.watched_from = now;
      peer.suspected = false;
    }
    return;
  }
  // A member of the new CM: its lease starts again, with the new CM's grants.
  // Renewals keep their numbers; grants of the old CM are not the new one's.
  granted_ = seq_;
  valid_until_ = now + o_.first_grant_ns;
  probing_since_.store(0, std::memory_order_release);
  fenced_.store(false, std::memory_order_release);
}

uint64_t LeaseAgent::cm_silent_ns() const {
  const uint64_t since = probing_since_.load(std::memory_order_acquire);
  if (since == 0) return 0;
  const uint64_t moved = peers_[cm()].beat_moved.load(std::memory_order_acquire);
  return lease_clock_ns() - std::max(since, moved);
}

uint32_t LeaseAgent::live_nodes(uint64_t within_ns) const {
  const uint64_t now = lease_clock_ns();
  uint32_t live = 1;  // itself
  for (uint32_t n = 0; n < nodes_; ++n) {
    if (n == self_) continue;
    const uint64_t moved = peers_[n].beat_moved.load(std::memory_order_acquire);
    live += moved != 0 && now - moved <= within_ns;
  }
  return live;
}

// READs of every node's beat (slot 0 word 2 there) into word 4 of its slot
// here, one at a time per node.
void LeaseAgent::probe(uint64_t now) {
  if (probing_since_.load(std::memory_order_relaxed) == 0) probing_since_.store(now, std::memory_order_release);
  for (uint32_t n = 0; n < nodes_; ++n) {
    if (n == self_) continue;
    Peer& p = peers_[n];
    if (p.reading || p.outstanding >= kMaxOutstanding) continue;
    rdma::WorkRequest wr;
    wr.wr_id = kReadTag | n;
    wr.opcode = rdma::Opcode::kRead;
    wr.flags = rdma::kSignaled;
    wr.local = static_cast<std::byte*>(mem_->data()) + (1 + n) * kSlot + 4 * sizeof(uint64_t);
    wr.length = sizeof(uint64_t);
    wr.lkey = mr_.lkey;
    wr.remote_addr = p.remote_addr + 2 * sizeof(uint64_t);
    wr.rkey = p.rkey;
    rdma::WorkRequest* bad = nullptr;
    if (p.qp->post_send(&wr, &bad) == 0) {
      ++p.outstanding;
      p.reading = true;
    }
  }
}

void LeaseAgent::member_tick(uint64_t now) {
  if (fenced_.load(std::memory_order_relaxed)) return probe(now);
  // The newest grant: the lease runs from the sending of the renewal it answers.
  const uint64_t g = word(0, 0);
  if (g > granted_ && g <= seq_ && seq_ - g < kRing) {
    granted_ = g;
    valid_until_ = std::max(valid_until_, sent_at_[g % kRing] + o_.lease_ns);
  }
  // Fenced a tick early, when the next check would come after the lease's
  // end, and a quarter tick earlier still: a timer wakes a little late.
  if (now + o_.tick_ns + o_.tick_ns / 4 >= valid_until_) {
    char buf[320];
    if (granted_ == 0)
      std::snprintf(buf, sizeof buf, "node %u's lease ends: no grant from its CM, node %u, in the %.1f ms since the lease began (lease %.1f ms)",
                    self_, cm(), ms(now - started_ns_), ms(o_.lease_ns));
    else
      std::snprintf(buf, sizeof buf, "node %u's lease ends: the newest grant from its CM, node %u, answers a renewal sent %.1f ms ago (lease %.1f ms)",
                    self_, cm(), ms(now - sent_at_[granted_ % kRing]), ms(o_.lease_ns));
    std::string why = buf;
    if (!last_error_.empty()) why += "; last fabric error: " + last_error_;
    fence(now, std::move(why));
    return;
  }
  // Renewal seq_ + 1.
  const uint64_t gap = now - last_send_;
  if (gap > max_send_gap_.load(std::memory_order_relaxed)) max_send_gap_.store(gap, std::memory_order_relaxed);
  last_send_ = now;
  ++seq_;
  sent_at_[seq_ % kRing] = now;
  post_write(cm_.load(std::memory_order_relaxed), 1 + self_, seq_, acked_.load(std::memory_order_acquire));
  sent_.fetch_add(1, std::memory_order_relaxed);
}

void LeaseAgent::cm_tick(uint64_t now) {
  const uint64_t config = announced_out_.load(std::memory_order_acquire);
  for (uint32_t n = 0; n < nodes_; ++n) {
    if (n == self_) continue;
    Peer& p = peers_[n];
    if (p.suspected || p.gone.load(std::memory_order_acquire)) continue;
    const uint64_t s = word(1 + n, 0);
    if (s != p.seen_seq) {
      std::lock_guard lk(mu_);
      RenewalStats& st = stats_[n];
      const uint64_t gap = now - (p.seen_at != 0 ? p.seen_at : p.watched_from);
      if (p.seen_at != 0 && gap > o_.lease_ns / 2) ++st.late;
      st.max_gap_ns = std::max(st.max_gap_ns, gap);
      ++st.renewals;
      p.seen_seq = s;
      p.seen_at = now;
    }
    if (p.revoked.load(std::memory_order_acquire)) {
      // No more grants: its lease lapses within a lease of the last one.
    } else if (p.seen_at == now) {
      // Granted now: the member's lease ends before now + lease.
      p.granted_at = now;
      post_write(n, 0, p.seen_seq, config);
      continue;
    }
    if (now > p.granted_at + o_.lease_ns + o_.guard_ns) {
      p.suspected = true;
      p.revoked.store(true, std::memory_order_release);
      std::lock_guard lk(mu_);
      suspicions_.push_back({n, now, now - p.granted_at, stats_[n].renewals});
    }
  }
}

std::vector<Suspicion> LeaseAgent::take_suspicions() {
  std::lock_guard lk(mu_);
  std::vector<Suspicion> out;
  out.swap(suspicions_);
  return out;
}

RenewalStats LeaseAgent::renewal_stats(uint32_t n) const {
  std::lock_guard lk(mu_);
  return n < stats_.size() ? stats_[n] : RenewalStats{};
}

}  // namespace rdtx::membership
