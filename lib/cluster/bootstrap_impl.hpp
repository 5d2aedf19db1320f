// Internal to lib/cluster/bootstrap*: the state of a Bootstrap and the
// connection core every part of it uses. The parts, one concern per file:
//
//   bootstrap_wire.{hpp,cpp}    message formats (framing, payload layouts)
//   bootstrap.cpp               the connection core: queueing, reading and
//                               writing frames, dispatch, the I/O step and
//                               waiting, the fatal failure
//   bootstrap_join.cpp          connect(): options, listening, node 0 accepting
//                               hellos, the other nodes joining node 0
//   bootstrap_collectives.cpp   all_gather, gather, barrier, agree
//   bootstrap_monitor.cpp       heartbeats, dead and silent peers, stop
//                               signals, excluded nodes
//
// Locking: `mu` guards the peers, the failure and the I/O thread's state.
// The thread that runs step() (the monitor thread while it runs, else the
// owner) is the only one that reads, writes or closes sockets, so no fd is
// closed under a poll(). Functions named *_locked expect `mu` held.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cluster/bootstrap.hpp"
#include "cluster/bootstrap_wire.hpp"
#include "env/log.hpp"

namespace rdtx::cluster::detail {

constexpr size_t kMaxPending = 16;  // connections accepted but not yet identified
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kReadBurst = 4u << 20;  // per connection and poll round, for fairness
constexpr uint32_t kNoNode = UINT32_MAX;

const env::LogType& log();

inline int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// "0.3 s"
std::string seconds(uint64_t ms);
// host:port, [v6]:port
std::string host_port(const std::string& host, uint16_t port);

// One TCP connection: to a joiner on node 0 (peers[id]), to node 0 on a
// joiner (peers[0]), or, on node 0 during connect(), an unidentified one.
struct Peer {
  uint32_t id = kNoNode;
  std::string addr;    // as listed, host:port
  std::string remote;  // where the connection comes from
  int fd = -1;
  bool joined = false;
  std::string gone;  // why the connection ended; empty while open
  std::vector<std::byte> in;
  std::deque<std::vector<std::byte>> out;
  size_t out_off = 0;  // bytes of out.front() already sent
  std::deque<Frame> inbox;
  int64_t last_rx = 0;
  bool armed = false;     // its monitor runs: it sends heartbeats, silence is death
  bool said_off = false;  // it left the monitored phase: its exit is no failure
  // Lost while monitored with lost_peer_fatal = false: a collective on node
  // 0 waits (until its deadline) for the membership service to exclude it.
  bool left_to_membership = false;
  // Bootstrap::exclude(): nothing is sent to it or awaited from it, and
  // what it sends is dropped (the first message with a warning).
  bool excluded = false;
  bool drop_logged = false;
};

// Reads up to `burst` bytes of what is there: 0 while the connection is
// open, -1 on EOF, else the errno.
int read_raw(Peer& p, size_t burst = kReadBurst);
// "closed the connection" (err < 0) or "reset the connection (why)".
std::string lost_text(int err);

}  // namespace rdtx::cluster::detail

namespace rdtx::cluster {

struct Bootstrap::Impl {
  using Peer = detail::Peer;

  BootstrapOptions o;
  uint32_t n = 0;
  uint64_t fp = 0;
  uint64_t token = 0;     // run_token() of this node's options
  int64_t tick_ms = 100;  // monitor poll period
  int listen_fd = -1;
  int wake[2] = {-1, -1};  // a write to wake[1] interrupts the monitor thread's poll()
  std::vector<Peer> peers;

  mutable std::mutex mu;  // guards peers, failure, io_running, next_heartbeat
  std::condition_variable cv;
  std::thread io;
  bool io_running = false;
  std::atomic<bool> io_stop{false};
  int64_t next_heartbeat = 0;
  bool stop_seen = false;  // o.stop_signal reported a signal (acted on once)
  uint64_t seq = 0;        // collectives so far; only the owner thread touches it
  // Set once, after `failure` is written under mu (release); failed() reads
  // it lock-free (acquire).
  std::atomic<bool> failed{false};
  Error failure;
  // Bit n: node n excluded (Peer::excluded); written under mu, read
  // lock-free by excluded().
  std::atomic<uint64_t> excluded_mask{0};

  explicit Impl(BootstrapOptions opts);
  ~Impl();

  std::string who(uint32_t id) const { return "node " + std::to_string(id) + " (" + peers[id].addr + ")"; }
  std::string me() const { return "node " + std::to_string(o.self); }
  int64_t short_deadline() const {
    return detail::now_ms() + static_cast<int64_t>(std::min<uint64_t>(o.op_timeout_ms, 1000));
  }

  // --- the connection core (bootstrap.cpp) ---
  void wake_io();
  void queue_locked(Peer& p, uint16_t type, std::span<const std::byte> payload);
  // Records the first fatal error; node 0 forwards it to every joiner.
  void fail_locked(Error e);
  void close_locked(Peer& p, std::string why);
  void lost_locked(Peer& p, std::string why, bool monitor);
  void bad_message_locked(Peer& p, const std::string& why);
  void dispatch_locked(Peer& p, detail::Frame f);
  void parse_locked(Peer& p);
  void read_locked(Peer& p, bool monitor);
  void write_locked(Peer& p, bool monitor);
  // One round of socket I/O: waits (at most until deadline, or one monitor
  // tick) for any connection to be readable or writable, reads and
  // dispatches whole frames, writes queued output, and when `monitor` sends
  // heartbeats and checks for silence. Runs on one thread at a time.
  void step(int64_t deadline, bool monitor);
  // Waits until pred() (evaluated under mu) or the deadline: on the monitor
  // thread's notifications while it runs, else doing the I/O itself.
  template <typename Pred>
  bool wait_until(Pred pred, int64_t deadline);
  // Until every queued byte is sent, or the deadline.
  bool flush(int64_t deadline);
  // Makes e the failure (unless there is one already), lets node 0's abort
  // messages go out, and returns the failure.
  Error fail(Error e);
  void stop_io();

  // --- joining (bootstrap_join.cpp) ---
  Result<void> open();
  Result<void> listen_self();
  // Why a well-formed hello is a stranger's (another run token), or nullopt.
  std::optional<std::string> foreign_run(const detail::Hello& h) const;
  // A hello of this run that cannot join (id out of range, 0, or taken):
  // fatal, since a node of this run is misconfigured.
  std::optional<Error> check_hello(uint32_t id, const detail::Hello& h, const std::string& from) const;
  Result<void> accept_joiners(int64_t deadline);
  int try_connect(int64_t deadline, std::string& why);
  Result<void> join_root(int64_t deadline);

  // --- collectives (bootstrap_collectives.cpp) ---
  // Node 0: whether a collective still waits for joiner p's contribution:
  // none arrived, it is not excluded, and it is connected or was lost to
  // the membership service (which may yet exclude it).
  bool awaited_locked(const Peer& p) const {
    return p.inbox.empty() && !p.excluded && (p.fd >= 0 || p.left_to_membership);
  }
  Result<void> check_name(detail::OpKind kind, std::string_view what) const;
  Result<std::vector<std::vector<std::byte>>> root_collect(detail::OpKind kind, std::string_view what,
                                                           std::span<const std::byte> mine);
  Result<void> root_respond(detail::OpKind kind, std::string_view what, std::span<const std::byte> body);
  Result<std::vector<std::byte>> exchange(detail::OpKind kind, std::string_view what, std::span<const std::byte> mine);

  // --- the peer monitor (bootstrap_monitor.cpp) ---
  void monitor_tick_locked();
  // Polls o.stop_signal; on a signal, tells node 0 (from a joiner) and
  // fails the run with stopped_error(o.self, signal).
  void check_stop_locked();
  Error stopped_error(uint32_t node, int signal) const;
};

template <typename Pred>
bool Bootstrap::Impl::wait_until(Pred pred, int64_t deadline) {
  std::unique_lock lk(mu);
  for (;;) {
    if (pred()) return true;
    int64_t now = detail::now_ms();
    if (now >= deadline) return false;
    if (io_running) {
      cv.wait_for(lk, std::chrono::milliseconds(std::min<int64_t>(deadline - now, 100)));
    } else {
      lk.unlock();
      step(deadline, false);
      lk.lock();
    }
  }
}

}  // namespace rdtx::cluster
