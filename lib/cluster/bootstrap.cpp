// The connection core of the bootstrap channel: queueing and sending frames,
// reading and dispatching them, one round of I/O (step), waiting, and the
// fatal failure every other part reports through. See bootstrap_impl.hpp for
// the file layout and the locking.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cluster/bootstrap_impl.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::cluster {

namespace detail {

const env::LogType& log() {
  static const env::LogType type("rdtx.bootstrap");
  return type;
}

std::string seconds(uint64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(ms) / 1000.0);
  return buf;
}

std::string host_port(const std::string& host, uint16_t port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

int read_raw(Peer& p, size_t burst) {
  size_t total = 0;
  while (total < burst) {
    const size_t old = p.in.size(), chunk = std::min(kReadChunk, burst - total);
    p.in.resize(old + chunk);
    ssize_t r = ::recv(p.fd, p.in.data() + old, chunk, 0);
    const int err = errno;
    p.in.resize(old + static_cast<size_t>(std::max<ssize_t>(r, 0)));
    if (r > 0) {
      total += static_cast<size_t>(r);
      p.last_rx = now_ms();
      continue;
    }
    if (r == 0) return -1;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return 0;
    return err;
  }
  return 0;
}

std::string lost_text(int err) {
  return err < 0 ? "closed the connection" : std::string("reset the connection (") + std::strerror(err) + ")";
}

}  // namespace detail

using namespace detail;

Bootstrap::Impl::Impl(BootstrapOptions opts) : o(std::move(opts)) {
  n = static_cast<uint32_t>(o.nodes.size());
  fp = fingerprint(o.nodes);
  token = detail::run_token(n, fp, o.run_id);
  if (!o.stop_signal) o.stop_signal = runtime::shutdown_signal;
  tick_ms = static_cast<int64_t>(std::clamp<uint64_t>(std::min(o.heartbeat_ms, o.peer_dead_ms / 4), 1, 100));
  peers.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    peers[i].id = i;
    peers[i].addr = host_port(o.nodes[i].host, o.nodes[i].port);
  }
}

Bootstrap::Impl::~Impl() {
  stop_io();
  for (Peer& p : peers)
    if (p.fd >= 0) ::close(p.fd);
  if (listen_fd >= 0) ::close(listen_fd);
  for (int fd : wake)
    if (fd >= 0) ::close(fd);
}

void Bootstrap::Impl::wake_io() {
  char c = 0;
  if (io_running) (void)!::write(wake[1], &c, 1);
}

void Bootstrap::Impl::queue_locked(Peer& p, uint16_t type, std::span<const std::byte> payload) {
  // An excluded node is owed nothing (and need not read what it was owed).
  if (p.fd < 0 || p.excluded) return;
  p.out.push_back(make_frame(type, o.self, payload));
  wake_io();
}

void Bootstrap::Impl::fail_locked(Error e) {
  if (failed.load(std::memory_order_relaxed)) return;
  failure = std::move(e);
  failed.store(true, std::memory_order_release);
  RDTX_LOG(log(), Error, "%s", failure.message.c_str());
  if (o.self == 0) {
    auto payload = encode_abort(failure);
    for (Peer& p : peers)
      if (p.joined) queue_locked(p, kAbort, payload);
  }
  cv.notify_all();
}

// Only the thread that runs step() closes connections (bootstrap_impl.hpp).
void Bootstrap::Impl::close_locked(Peer& p, std::string why) {
  if (p.fd >= 0) ::close(p.fd);
  p.fd = -1;
  p.gone = std::move(why);
  p.out.clear();
  p.out_off = 0;
  p.armed = false;
}

void Bootstrap::Impl::lost_locked(Peer& p, std::string why, bool monitor) {
  close_locked(p, why);
  if (p.excluded) {
    RDTX_LOG(log(), Info, "bootstrap: %s %s (excluded from the run)", who(p.id).c_str(), why.c_str());
  } else if (monitor && !p.said_off && o.lost_peer_fatal) {
    fail_locked(Error{ECONNRESET, "bootstrap: " + who(p.id) + " " + why + " while monitored (process died?)"});
  } else if (monitor && !p.said_off) {
    p.left_to_membership = true;
    RDTX_LOG(log(), Warning, "bootstrap: %s %s while monitored (left to the membership service)", who(p.id).c_str(),
             why.c_str());
  } else {
    RDTX_LOG(log(), Info, "bootstrap: %s %s", who(p.id).c_str(), why.c_str());
  }
}

void Bootstrap::Impl::bad_message_locked(Peer& p, const std::string& why) {
  Error e{EPROTO, "bootstrap: " + who(p.id) + " sent an invalid message: " + why};
  close_locked(p, "sent an invalid message");
  // An excluded node's stream is nothing this run reads any more.
  if (p.excluded)
    RDTX_LOG(log(), Warning, "%s (excluded from the run: connection closed, no failure)", e.message.c_str());
  else
    fail_locked(std::move(e));
}

void Bootstrap::Impl::dispatch_locked(Peer& p, Frame f) {
  // Late messages of an excluded node (a contribution to a collective that
  // no longer counts it, a heartbeat, a stop notice) are read and dropped.
  if (p.excluded) {
    if (!p.drop_logged)
      RDTX_LOG(log(), Warning, "bootstrap: dropped a message (type %u) from %s, which was excluded from the run; "
               "later ones are dropped silently", unsigned{f.type}, who(p.id).c_str());
    p.drop_logged = true;
    return;
  }
  if (f.from != p.id) return bad_message_locked(p, "a message from node " + std::to_string(f.from));
  switch (f.type) {
    case kHeartbeat: {
      if (f.payload.size() != 1)
        return bad_message_locked(p, "a heartbeat of " + std::to_string(f.payload.size()) + " bytes");
      bool on = f.payload[0] != std::byte{0};
      p.armed = on;
      p.said_off = !on;
      return;
    }
    case kAbort: {
      if (o.self == 0) break;
      auto e = decode_abort(f.payload);
      if (!e) break;
      fail_locked(std::move(*e));
      return;
    }
    case kContrib:
      if (o.self != 0) break;
      p.inbox.push_back(std::move(f));
      return;
    case kStop: {
      if (o.self != 0) break;
      auto sig = decode_stop(f.payload);
      if (!sig) return bad_message_locked(p, "a stop notice of " + std::to_string(f.payload.size()) + " bytes");
      // It exits next: that is no further failure.
      p.said_off = true;
      fail_locked(stopped_error(p.id, *sig));
      return;
    }
    case kWelcome:
    case kResult:
      if (o.self == 0) break;
      p.inbox.push_back(std::move(f));
      return;
    default:
      break;
  }
  bad_message_locked(p, "an unexpected message of type " + std::to_string(f.type));
}

void Bootstrap::Impl::parse_locked(Peer& p) {
  size_t off = 0;
  Frame f;
  std::string why;
  while (p.fd >= 0) {
    int r = take_frame(p.in, off, kMaxPayload, f, why);
    if (r == 0) break;
    if (r < 0) return bad_message_locked(p, why);
    dispatch_locked(p, std::move(f));
  }
  if (p.fd < 0)
    p.in.clear();
  else
    p.in.erase(p.in.begin(), p.in.begin() + static_cast<ptrdiff_t>(off));
}

void Bootstrap::Impl::read_locked(Peer& p, bool monitor) {
  int err = read_raw(p);
  // Frames that arrived before an EOF count: an abort, a heartbeat "off".
  parse_locked(p);
  if (err != 0 && p.fd >= 0) lost_locked(p, lost_text(err), monitor);
}

void Bootstrap::Impl::write_locked(Peer& p, bool monitor) {
  while (!p.out.empty()) {
    const auto& b = p.out.front();
    ssize_t r = ::send(p.fd, b.data() + p.out_off, b.size() - p.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) {
      p.out_off += static_cast<size_t>(r);
      if (p.out_off == b.size()) {
        p.out.pop_front();
        p.out_off = 0;
      }
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    return lost_locked(p, lost_text(errno == EPIPE ? -1 : errno), monitor);
  }
}

void Bootstrap::Impl::step(int64_t deadline, bool monitor) {
  std::vector<pollfd> pfds;
  std::vector<uint32_t> ids;
  {
    std::lock_guard lk(mu);
    pfds.push_back({wake[0], POLLIN, 0});
    ids.push_back(kNoNode);
    for (Peer& p : peers) {
      if (p.fd < 0) continue;
      pfds.push_back({p.fd, static_cast<short>(POLLIN | (p.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(p.id);
    }
  }
  int64_t wait = std::clamp<int64_t>(deadline - now_ms(), 0, monitor ? tick_ms : 1000);
  if (::poll(pfds.data(), pfds.size(), static_cast<int>(wait)) < 0 && errno != EINTR) {
    std::lock_guard lk(mu);
    fail_locked(Error{errno, std::string("bootstrap: poll failed: ") + std::strerror(errno)});
    return;
  }
  std::lock_guard lk(mu);
  check_stop_locked();
  if (pfds[0].revents) {
    char buf[64];
    while (::read(wake[0], buf, sizeof buf) > 0) {
    }
  }
  for (size_t i = 1; i < pfds.size(); ++i) {
    Peer& p = peers[ids[i]];
    if (p.fd != pfds[i].fd) continue;
    if (pfds[i].revents & (POLLIN | POLLHUP | POLLERR)) read_locked(p, monitor);
    if (p.fd >= 0 && !p.out.empty()) write_locked(p, monitor);
  }
  if (monitor) monitor_tick_locked();
  cv.notify_all();
}

bool Bootstrap::Impl::flush(int64_t deadline) {
  return wait_until(
      [&] {
        for (const Peer& p : peers)
          if (p.fd >= 0 && !p.out.empty()) return false;
        return true;
      },
      deadline);
}

Error Bootstrap::Impl::fail(Error e) {
  {
    std::lock_guard lk(mu);
    fail_locked(std::move(e));
  }
  flush(short_deadline());
  std::lock_guard lk(mu);
  return failure;
}

void Bootstrap::Impl::stop_io() {
  if (!io.joinable()) return;
  io_stop.store(true, std::memory_order_release);
  {
    std::lock_guard lk(mu);
    wake_io();
  }
  io.join();
  std::lock_guard lk(mu);
  io_running = false;
}

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Bootstrap::~Bootstrap() {
  impl_->stop_io();
  // Output still queued (node 0's abort messages after a failure) gets a
  // moment to leave before the connections close.
  impl_->flush(now_ms() + 200);
}

uint32_t Bootstrap::self() const { return impl_->o.self; }
uint32_t Bootstrap::nodes() const { return impl_->n; }
const NodeAddress& Bootstrap::address(uint32_t node) const { return impl_->o.nodes.at(node); }
uint64_t Bootstrap::run_token() const { return impl_->token; }

bool Bootstrap::failed() const { return impl_->failed.load(std::memory_order_acquire); }

std::string Bootstrap::failure() const {
  std::lock_guard lk(impl_->mu);
  return impl_->failed.load(std::memory_order_relaxed) ? impl_->failure.message : std::string();
}

}  // namespace rdtx::cluster
