// The peer monitor: while it runs, a thread owns the sockets (step() with
// monitor = true), sends a heartbeat to every monitoring peer each
// heartbeat_ms, and declares a peer dead when its connection ends or it is
// silent longer than peer_dead_ms (doc/bootstrap.md, "Liveness"). And stop
// signals: a node that a signal stops tells the run so, rather than leaving
// its peers to find it gone or late (doc/bootstrap.md, "Signals"). And
// excluded nodes, which the monitor and the collectives leave out
// (doc/bootstrap.md, "Excluding a node").
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "cluster/bootstrap_impl.hpp"

namespace rdtx::cluster {

using namespace detail;

void Bootstrap::Impl::monitor_tick_locked() {
  int64_t now = now_ms();
  if (now >= next_heartbeat) {
    const std::byte on{1};
    for (Peer& p : peers)
      if (p.armed) queue_locked(p, kHeartbeat, {&on, 1});
    next_heartbeat = now + static_cast<int64_t>(o.heartbeat_ms);
  }
  for (Peer& p : peers) {
    if (p.fd < 0 || !p.armed || now - p.last_rx <= static_cast<int64_t>(o.peer_dead_ms)) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  " has been silent for %.1f s (peer_dead_ms = %llu): process stopped or hung, or the network is down",
                  static_cast<double>(now - p.last_rx) / 1000.0, static_cast<unsigned long long>(o.peer_dead_ms));
    Error e{ETIMEDOUT, "bootstrap: " + who(p.id) + buf};
    close_locked(p, "was silent too long");
    if (o.lost_peer_fatal) {
      fail_locked(std::move(e));
    } else {
      p.left_to_membership = true;
      RDTX_LOG(log(), Warning, "%s (left to the membership service)", e.message.c_str());
    }
  }
}

Error Bootstrap::Impl::stopped_error(uint32_t node, int signal) const {
  return Error{ECANCELED, "bootstrap: " + who(node) + " stopped by " + signal_name(signal)};
}

void Bootstrap::Impl::check_stop_locked() {
  if (stop_seen || failed.load(std::memory_order_relaxed)) return;
  const int sig = o.stop_signal();
  if (sig <= 0) return;
  stop_seen = true;
  // Node 0 forwards the failure to everybody (fail_locked); a joiner has
  // only node 0 to tell. Its notice goes out with the next flush: a
  // collective's, or the destructor's.
  if (o.self != 0) queue_locked(peers[0], kStop, encode_stop(std::min(sig, kMaxSignal)));
  fail_locked(stopped_error(o.self, sig));
}

void Bootstrap::start_monitor() {
  Impl& m = *impl_;
  {
    std::unique_lock lk(m.mu);
    if (m.io_running || m.failed.load(std::memory_order_relaxed)) return;
    const int64_t now = now_ms();
    const std::byte on{1};
    for (Peer& p : m.peers) {
      if (!p.joined || p.excluded) continue;
      if (p.fd < 0 && !p.said_off) {
        Error e{ECONNRESET, "bootstrap: " + m.who(p.id) + " " + p.gone + " before the monitor started"};
        lk.unlock();
        m.fail(std::move(e));
        return;
      }
      p.last_rx = now;
      m.queue_locked(p, kHeartbeat, {&on, 1});
    }
    m.next_heartbeat = now + static_cast<int64_t>(m.o.heartbeat_ms);
    m.io_stop.store(false, std::memory_order_relaxed);
    m.io_running = true;
  }
  m.io = std::thread([&m] {
    while (!m.io_stop.load(std::memory_order_acquire)) m.step(now_ms() + m.tick_ms, true);
  });
}

void Bootstrap::stop_monitor() {
  Impl& m = *impl_;
  if (!m.io.joinable()) return;
  m.stop_io();
  {
    std::lock_guard lk(m.mu);
    const std::byte off{0};
    for (Peer& p : m.peers)
      if (p.joined) m.queue_locked(p, kHeartbeat, {&off, 1});
  }
  m.flush(m.short_deadline());
}

Result<void> Bootstrap::exclude(uint32_t node) {
  Impl& m = *impl_;
  if (node >= m.n)
    return make_error(EINVAL, "bootstrap: cannot exclude node %u: out of range for %u nodes (0..%u)", node, m.n,
                      m.n - 1);
  if (node == 0)
    return Error{EINVAL, "bootstrap: cannot exclude " + m.who(0) +
                             ": every collective goes through node 0, so losing it ends the run"};
  if (node == m.o.self)
    return Error{EINVAL, "bootstrap: " + m.who(node) +
                             " cannot exclude itself: a node removed from the run stops, and the others exclude it"};
  if (node >= 64)
    return Error{EINVAL, "bootstrap: cannot exclude " + m.who(node) + ": excluded() holds nodes 0..63 only"};
  std::lock_guard lk(m.mu);
  Peer& p = m.peers[node];
  if (p.excluded) return {};
  p.excluded = true;
  // Nothing more is awaited from it: no heartbeats, no contribution (one
  // that arrived for a collective not yet entered no longer counts), and
  // nothing is sent to it (a frame half sent stays half sent: the node is
  // out of the run). Its socket stays open and is read, so that what it
  // still sends is dropped here rather than blocking it; only the I/O
  // thread closes sockets (bootstrap_impl.hpp).
  p.armed = false;
  p.inbox.clear();
  p.out.clear();
  p.out_off = 0;
  m.excluded_mask.fetch_or(uint64_t{1} << node, std::memory_order_release);
  RDTX_LOG(log(), Info, "bootstrap: %s excluded from the run%s", m.who(node).c_str(),
           m.o.self == 0 ? ": no collective waits for it any more" : "");
  // A collective waiting for it re-evaluates: on the monitor's notification
  // while it runs, else the owner's poll() returns (step()).
  char c = 0;
  (void)!::write(m.wake[1], &c, 1);
  m.cv.notify_all();
  return {};
}

uint64_t Bootstrap::excluded() const { return impl_->excluded_mask.load(std::memory_order_acquire); }

}  // namespace rdtx::cluster
