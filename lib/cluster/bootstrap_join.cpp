// Joining: connect() checks the options, listens on this node's port, and
// connects the run as a star through node 0. Node 0 accepts connections and
// checks each hello (strangers are dropped, misconfigured nodes of this run
// are a fatal error); the other nodes connect to node 0, retrying, send their
// hello and wait for the welcome (doc/bootstrap.md, "Topology").
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cluster/bootstrap_impl.hpp"

namespace rdtx::cluster {

using namespace detail;

namespace {

std::string sockaddr_text(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "an unknown address";
  if (std::strchr(host, ':')) return std::string("[") + host + "]:" + serv;
  return std::string(host) + ":" + serv;
}

std::string peer_text(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "an unknown address";
  return sockaddr_text(reinterpret_cast<sockaddr*>(&ss), len);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Binds and listens; -1 with errno on failure.
int listen_on(const sockaddr* sa, socklen_t len, bool dual_stack) {
  int fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1, zero = 0;
  // Lets a restarted run reuse the port while old connections sit in
  // TIME_WAIT; Linux still refuses the bind while another socket listens.
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (dual_stack) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  if (::bind(fd, sa, len) != 0 || ::listen(fd, SOMAXCONN) != 0) {
    int err = errno;
    ::close(fd);
    errno = err;
    return -1;
  }
  return fd;
}

Result<void> validate(BootstrapOptions& o) {
  if (o.nodes.empty()) return make_error(EINVAL, "bootstrap: the node list is empty");
  std::sort(o.nodes.begin(), o.nodes.end(), [](const NodeAddress& a, const NodeAddress& b) { return a.id < b.id; });
  const size_t n = o.nodes.size();
  for (size_t i = 0; i < n; ++i) {
    const NodeAddress& a = o.nodes[i];
    if (a.id != i) {
      if (i > 0 && o.nodes[i - 1].id == a.id)
        return make_error(EINVAL, "bootstrap: node id %u is listed twice (%s and %s)", a.id,
                          host_port(o.nodes[i - 1].host, o.nodes[i - 1].port).c_str(),
                          host_port(a.host, a.port).c_str());
      return make_error(EINVAL, "bootstrap: node ids must be 0..%zu without gaps, but node %zu is missing", n - 1, i);
    }
    if (a.host.empty()) return make_error(EINVAL, "bootstrap: node %u has no host", a.id);
    if (a.port == 0)
      return make_error(EINVAL, "bootstrap: node %u (%s) has port 0; every node needs a fixed port", a.id,
                        a.host.c_str());
  }
  if (o.self >= n)
    return make_error(EINVAL, "bootstrap: this node's id %u is out of range: the node list has %zu nodes (0..%zu)",
                      o.self, n, n - 1);
  if (o.connect_timeout_ms == 0 || o.op_timeout_ms == 0 || o.heartbeat_ms == 0)
    return make_error(EINVAL, "bootstrap: connect_timeout_ms, op_timeout_ms and heartbeat_ms must be positive");
  if (o.peer_dead_ms < 2 * o.heartbeat_ms)
    return make_error(EINVAL, "bootstrap: peer_dead_ms (%llu) must be at least twice heartbeat_ms (%llu)",
                      static_cast<unsigned long long>(o.peer_dead_ms), static_cast<unsigned long long>(o.heartbeat_ms));
  if (o.run_id.size() > kMaxTextBytes)
    return make_error(EINVAL, "bootstrap: run_id is %zu bytes long, at most %zu allowed", o.run_id.size(),
                      kMaxTextBytes);
  return {};
}

}  // namespace

Result<void> Bootstrap::Impl::open() {
  if (::pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0)
    return make_error(errno, "bootstrap: pipe2 failed: %s", std::strerror(errno));
  return listen_self();
}

// Listens on this node's listed address; if that address is not on this
// machine (NAT, a name for another interface), on every address.
Result<void> Bootstrap::Impl::listen_self() {
  const NodeAddress& a = o.nodes[o.self];
  const std::string port = std::to_string(a.port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0)
    return make_error(EINVAL, "bootstrap: cannot resolve host '%s' of node %u: %s", a.host.c_str(), o.self,
                      gai_strerror(rc));
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = res; ai && listen_fd < 0; ai = ai->ai_next) {
    listen_fd = listen_on(ai->ai_addr, ai->ai_addrlen, false);
    if (listen_fd < 0) err = errno;
    if (err == EADDRINUSE) break;
  }
  freeaddrinfo(res);
  if (listen_fd < 0 && err == EADDRNOTAVAIL) {
    sockaddr_in6 any6{};
    any6.sin6_family = AF_INET6;
    any6.sin6_addr = in6addr_any;
    any6.sin6_port = htons(a.port);
    listen_fd = listen_on(reinterpret_cast<sockaddr*>(&any6), sizeof any6, true);
    if (listen_fd < 0 && errno != EADDRINUSE) {
      sockaddr_in any4{};
      any4.sin_family = AF_INET;
      any4.sin_addr.s_addr = htonl(INADDR_ANY);
      any4.sin_port = htons(a.port);
      listen_fd = listen_on(reinterpret_cast<sockaddr*>(&any4), sizeof any4, false);
    }
    if (listen_fd < 0) err = errno;
  }
  if (listen_fd >= 0) return {};
  if (err == EADDRINUSE)
    return make_error(EADDRINUSE,
                      "bootstrap: port %u on %s is already in use (node %u): another process listens there, "
                      "perhaps a second process started as node %u",
                      a.port, a.host.c_str(), o.self, o.self);
  return make_error(err, "bootstrap: cannot listen on port %u on %s (node %u): %s", a.port, a.host.c_str(), o.self,
                    std::strerror(err));
}

std::optional<std::string> Bootstrap::Impl::foreign_run(const Hello& h) const {
  if (h.token == token) return std::nullopt;
  char buf[160];
  if (h.nodes != n)
    return "it was started with " + std::to_string(h.nodes) + " nodes, node 0 with " + std::to_string(n);
  if (h.fingerprint != fp) {
    std::snprintf(buf, sizeof buf, "it has a different node list (fingerprint %016llx, node 0 has %016llx)",
                  static_cast<unsigned long long>(h.fingerprint), static_cast<unsigned long long>(fp));
    return buf;
  }
  if (h.run_id != o.run_id) return "it has run id '" + h.run_id + "', node 0 has '" + o.run_id + "'";
  std::snprintf(buf, sizeof buf, "its run token is %016llx, node 0's %016llx", static_cast<unsigned long long>(h.token),
                static_cast<unsigned long long>(token));
  return buf;
}

std::optional<Error> Bootstrap::Impl::check_hello(uint32_t id, const Hello& h, const std::string& from) const {
  (void)h;  // its token matched: the rest of it agrees with node 0's
  if (id >= n)
    return Error{EINVAL, "bootstrap: a peer at " + from + " claims node id " + std::to_string(id) +
                             ", out of range for " + std::to_string(n) + " nodes (0.." + std::to_string(n - 1) + ")"};
  if (id == 0)
    return Error{EINVAL, "bootstrap: a peer at " + from + " claims node id 0, which is " + peers[0].addr +
                             " itself (two processes started as node 0?)"};
  if (peers[id].joined)
    return Error{EINVAL, "bootstrap: node " + std::to_string(id) + " joined twice, from " + peers[id].remote +
                             " and from " + from + " (two processes started as node " + std::to_string(id) + "?)"};
  return std::nullopt;
}

// Node 0: accepts connections until every node has sent a valid hello.
Result<void> Bootstrap::Impl::accept_joiners(int64_t deadline) {
  std::vector<Peer> pending;
  std::string dropped;  // the last stranger dropped, named if nodes go missing
  uint32_t joined = 0;
  auto drop = [&](size_t i, const std::string& why) {
    dropped = "dropped a connection from " + pending[i].remote + ": " + why;
    RDTX_LOG(log(), Warning, "bootstrap: %s", dropped.c_str());
    ::close(pending[i].fd);
    pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
  };
  // Reads from pending[i]: drops it if it is no node of this run, moves it
  // to peers[] on a good hello, returns the error for a misconfigured node.
  auto serve = [&](size_t i) -> std::optional<Error> {
    Peer& q = pending[i];
    int err = read_raw(q, kHeaderBytes + kMaxHelloBytes);
    size_t off = 0;
    Frame f;
    std::string why;
    int r = take_frame(q.in, off, kMaxHelloBytes, f, why);
    if (r == 0 && err != 0) why = err < 0 ? "closed before its hello" : lost_text(err) + " before its hello";
    if (r == 1 && f.type != kHello) why = "its first message has type " + std::to_string(f.type) + ", not a hello";
    std::optional<Hello> h;
    if (r == 1 && why.empty() && !(h = decode_hello(f.payload))) why = "a malformed hello";
    if (!why.empty()) {
      drop(i, why);
      return std::nullopt;
    }
    if (r == 0) return std::nullopt;
    if (auto foreign = foreign_run(*h)) {
      // Told why, so that a misconfigured process gives up at once with
      // node 0's reason instead of waiting for a welcome that never comes.
      Error e{EINVAL, "bootstrap: " + who(0) + " refused node " + std::to_string(f.from) + " (connecting from " +
                          q.remote + ") as not a node of its run: " + *foreign};
      auto frame = make_frame(kAbort, 0, encode_abort(e));
      (void)!::send(q.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      drop(i, "a hello from another run (node " + std::to_string(f.from) + "): " + *foreign);
      return std::nullopt;
    }
    if (auto e = check_hello(f.from, *h, q.remote)) {
      auto frame = make_frame(kAbort, 0, encode_abort(*e));
      (void)!::send(q.fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      return e;
    }
    Peer& p = peers[f.from];
    p.fd = q.fd;
    p.remote = q.remote;
    p.joined = true;
    p.last_rx = now_ms();
    p.in.assign(q.in.begin() + static_cast<ptrdiff_t>(off), q.in.end());
    ++joined;
    RDTX_LOG(log(), Info, "bootstrap: %s joined from %s", who(p.id).c_str(), p.remote.c_str());
    pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
    return std::nullopt;
  };
  auto abort = [&](Error e) {
    for (Peer& q : pending) ::close(q.fd);
    pending.clear();
    return fail(std::move(e));
  };
  while (joined + 1 < n) {
    {
      std::unique_lock lk(mu);
      check_stop_locked();
      if (failed.load(std::memory_order_relaxed)) {
        Error e = failure;
        lk.unlock();
        return abort(std::move(e));
      }
    }
    int64_t now = now_ms();
    if (now >= deadline) {
      std::vector<uint32_t> missing;
      for (uint32_t i = 1; i < n; ++i)
        if (!peers[i].joined) missing.push_back(i);
      std::string msg = "bootstrap: " + who(missing[0]) + " did not connect within " + seconds(o.connect_timeout_ms);
      if (missing.size() > 1) {
        msg += " (nor did node";
        for (size_t k = 1; k < missing.size() && k < 9; ++k) msg += " " + std::to_string(missing[k]);
        if (missing.size() > 9) msg += " ...";
        msg += ")";
      }
      if (!dropped.empty()) msg += "; node 0 " + dropped;
      return abort(Error{ETIMEDOUT, msg});
    }
    std::vector<pollfd> pfds{{listen_fd, POLLIN, 0}};
    for (Peer& q : pending) pfds.push_back({q.fd, POLLIN, 0});
    const size_t npending = pending.size();
    std::vector<uint32_t> joined_ids;
    for (Peer& p : peers)
      if (p.joined) {
        pfds.push_back({p.fd, POLLIN, 0});
        joined_ids.push_back(p.id);
      }
    if (::poll(pfds.data(), pfds.size(), static_cast<int>(std::min<int64_t>(deadline - now, 1000))) < 0 &&
        errno != EINTR)
      return abort(make_error(errno, "bootstrap: poll failed: %s", std::strerror(errno)));
    // A node that joined and left before the others came cannot take part.
    for (size_t k = 0; k < joined_ids.size(); ++k) {
      if (!pfds[1 + npending + k].revents) continue;
      Peer& p = peers[joined_ids[k]];
      if (int err = read_raw(p); err != 0)
        return abort(Error{ECONNRESET, "bootstrap: " + who(p.id) + " " + lost_text(err) +
                                           " while node 0 waited for the other nodes to join"});
    }
    for (size_t i = npending; i-- > 0;)
      if (pfds[1 + i].revents)
        if (auto e = serve(i)) return abort(std::move(*e));
    if (pfds[0].revents & POLLIN) {
      for (;;) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          // Out of descriptors: do not spin on the readable listener.
          if (errno == EMFILE || errno == ENFILE) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          break;  // EAGAIN, or a connection that went away before accept
        }
        set_nodelay(fd);
        Peer q;
        q.fd = fd;
        q.remote = sockaddr_text(reinterpret_cast<sockaddr*>(&ss), len);
        pending.push_back(std::move(q));
        // Its hello may be there already; serving it now keeps a burst of
        // strangers from pushing a real node out of the pending set.
        if (auto e = serve(pending.size() - 1)) return abort(std::move(*e));
        if (pending.size() > kMaxPending) drop(0, "too many connections without a hello");
      }
    }
  }
  for (Peer& q : pending) ::close(q.fd);
  {
    std::lock_guard lk(mu);
    for (Peer& p : peers)
      if (p.joined) queue_locked(p, kWelcome, encode_welcome(token));
  }
  if (!flush(now_ms() + static_cast<int64_t>(o.op_timeout_ms))) {
    for (Peer& p : peers)
      if (p.fd >= 0 && !p.out.empty())
        return fail(Error{ETIMEDOUT,
                          "bootstrap: " + who(p.id) + " did not read its welcome within " + seconds(o.op_timeout_ms)});
  }
  std::lock_guard lk(mu);
  if (failed.load(std::memory_order_relaxed)) return failure;
  return {};
}

// One connection attempt to node 0 on each of its addresses; -1 with why.
int Bootstrap::Impl::try_connect(int64_t deadline, std::string& why) {
  const NodeAddress& a = o.nodes[0];
  const std::string port = std::to_string(a.port);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(a.host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    why = std::string("cannot resolve '") + a.host + "': " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        // Bounded per address, so that an unreachable first address does
        // not use up the whole timeout.
        pollfd pfd{fd, POLLOUT, 0};
        int rc = ::poll(&pfd, 1, static_cast<int>(std::clamp<int64_t>(deadline - now_ms(), 0, 2000)));
        socklen_t len = sizeof err;
        if (rc <= 0)
          err = rc == 0 ? ETIMEDOUT : errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
          err = errno;
      }
    }
    if (err != 0) {
      why = std::strerror(err);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

// A joiner: connects to node 0 (retrying), says hello, waits for the welcome.
Result<void> Bootstrap::Impl::join_root(int64_t deadline) {
  Peer& root = peers[0];
  std::string why = "no attempt made";
  int64_t backoff = 20;
  int fd;
  while ((fd = try_connect(deadline, why)) < 0) {
    int64_t now = now_ms();
    if (now >= deadline)
      return make_error(ETIMEDOUT, "bootstrap: %s did not accept a connection from %s within %s (last error: %s)",
                        who(0).c_str(), me().c_str(), seconds(o.connect_timeout_ms).c_str(), why.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(backoff, deadline - now)));
    backoff = std::min<int64_t>(backoff * 2, 250);
  }
  set_nodelay(fd);
  // Node 0 gives up connect_timeout_ms after it started, which was before
  // this connection was accepted: wait a little longer for its verdict.
  const int64_t answer_deadline = now_ms() + static_cast<int64_t>(o.connect_timeout_ms) + 1000;
  {
    std::lock_guard lk(mu);
    root.fd = fd;
    root.joined = true;
    root.remote = peer_text(fd);
    root.last_rx = now_ms();
    queue_locked(root, kHello, encode_hello(Hello{token, n, fp, o.run_id}));
  }
  wait_until([&] { return failed.load(std::memory_order_relaxed) || !root.inbox.empty() || root.fd < 0; },
             answer_deadline);
  std::unique_lock lk(mu);
  if (failed.load(std::memory_order_relaxed)) {
    // A signal while waiting: its stop notice leaves now, since no
    // Bootstrap (whose destructor would flush it) comes of this connect().
    Error e = failure;
    lk.unlock();
    return fail(std::move(e));
  }
  if (root.inbox.empty()) {
    Error e = root.fd < 0
                  ? Error{ECONNRESET, "bootstrap: " + who(0) + " " + root.gone + " during the handshake of " + me()}
                  : Error{ETIMEDOUT, "bootstrap: " + who(0) + " did not answer the hello of " + me() + " within " +
                                         seconds(o.connect_timeout_ms + 1000)};
    fail_locked(e);
    return failure;
  }
  Frame f = std::move(root.inbox.front());
  root.inbox.pop_front();
  if (f.type != kWelcome) {
    Error e{EPROTO, "bootstrap: " + who(0) + " sent an invalid message: type " + std::to_string(f.type) +
                        " instead of the welcome"};
    fail_locked(e);
    return failure;
  }
  if (auto theirs = decode_welcome(f.payload); !theirs || *theirs != token) {
    char buf[160];
    std::snprintf(buf, sizeof buf, " sent a welcome for another run (run token %016llx, %s has %016llx)",
                  static_cast<unsigned long long>(theirs.value_or(0)), me().c_str(),
                  static_cast<unsigned long long>(token));
    fail_locked(
        Error{EPROTO, "bootstrap: " + who(0) + (theirs ? buf : " sent an invalid message: a malformed welcome")});
    return failure;
  }
  return {};
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::connect(BootstrapOptions options) {
  const int64_t deadline = now_ms() + static_cast<int64_t>(options.connect_timeout_ms);
  RDTX_TRY(validate(options));
  auto impl = std::make_unique<Impl>(std::move(options));
  RDTX_TRY(impl->open());
  if (impl->o.self == 0) {
    RDTX_TRY(impl->accept_joiners(deadline));
  } else {
    RDTX_TRY(impl->join_root(deadline));
  }
  RDTX_LOG(log(), Info, "bootstrap: node %u connected to all %u nodes", impl->o.self, impl->n);
  return std::unique_ptr<Bootstrap>(new Bootstrap(std::move(impl)));
}

}  // namespace rdtx::cluster
