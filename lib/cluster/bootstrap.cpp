#include "cluster/bootstrap.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "env/log.hpp"

namespace rdtx::cluster {

namespace {

const env::LogType& log() {
  static const env::LogType type("rdtx.bootstrap");
  return type;
}

// Wire format (doc/bootstrap.md): every message is a 16-byte header, all
// integers big-endian, then `length` payload bytes.
//   u32 magic "RDTB" | u16 version | u16 type | u32 sender node id | u32 length
constexpr uint32_t kMagic = 0x52445442;
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderBytes = 16;
// A connection that has not sent a valid hello is a stranger: its first
// message may not make node 0 allocate more than this.
constexpr uint32_t kMaxHelloBytes = 4096;
constexpr uint32_t kMaxPayload = 256u << 20;
constexpr size_t kMaxTextBytes = 1024;  // run ids and operation names
constexpr size_t kMaxAbortBytes = 64 * 1024;
constexpr size_t kMaxPending = 16;  // connections accepted but not yet identified
constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kReadBurst = 4u << 20;  // per connection and poll round, for fairness
constexpr uint32_t kNoNode = UINT32_MAX;

enum MsgType : uint16_t {
  kHello = 1,      // joiner -> 0: u32 nodes, u64 node-list fingerprint, u16+bytes run id
  kWelcome = 2,    // 0 -> joiner: every node has joined
  kAbort = 3,      // 0 -> joiner: u32 errno, then the error text; the run is over
  kContrib = 4,    // joiner -> 0: op header, then the contribution
  kResult = 5,     // 0 -> joiner: op header, then the result
  kHeartbeat = 6,  // both: u8 1 = monitoring, 0 = left the monitored phase
};
constexpr uint16_t kLastType = kHeartbeat;

// The op header: u64 sequence number | u8 kind | u16+bytes name.
enum class OpKind : uint8_t { kAllGather = 1, kGather = 2, kBarrier = 3, kAgree = 4 };

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kGather:
      return "gather";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kAgree:
      return "agree";
  }
  return "unknown operation";
}

std::string describe(uint8_t kind, std::string_view name) {
  return std::string(to_string(static_cast<OpKind>(kind))) + " '" + std::string(name) + "'";
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

// FNV-1a over "<id>=<host>:<port>;" for every node in id order: nodes whose
// lists differ (a host, a port, the count) refuse each other.
uint64_t fingerprint(const std::vector<NodeAddress>& nodes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const NodeAddress& a : nodes) {
    std::string s = std::to_string(a.id) + "=" + a.host + ":" + std::to_string(a.port) + ";";
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

class Writer {
 public:
  void u8(uint8_t v) { buf_.push_back(std::byte{v}); }
  void u16(uint16_t v) {
    u8(static_cast<uint8_t>(v >> 8));
    u8(static_cast<uint8_t>(v));
  }
  void u32(uint32_t v) {
    u16(static_cast<uint16_t>(v >> 16));
    u16(static_cast<uint16_t>(v));
  }
  void u64(uint64_t v) {
    u32(static_cast<uint32_t>(v >> 32));
    u32(static_cast<uint32_t>(v));
  }
  void bytes(std::span<const std::byte> b) { buf_.insert(buf_.end(), b.begin(), b.end()); }
  void text(std::string_view s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  void str16(std::string_view s) {
    u16(static_cast<uint16_t>(s.size()));
    text(s);
  }
  void str32(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    text(s);
  }
  size_t size() const { return buf_.size(); }
  std::vector<std::byte> take() { return std::move(buf_); }

 private:
  std::vector<std::byte> buf_;
};

// Bounds-checked reads; after an overrun every read yields zero and ok() is false.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  uint8_t u8() { return need(1) ? std::to_integer<uint8_t>(b_[off_++]) : 0; }
  uint16_t u16() {
    uint16_t hi = u8();
    return static_cast<uint16_t>(hi << 8 | u8());
  }
  uint32_t u32() {
    uint32_t hi = u16();
    return hi << 16 | u16();
  }
  uint64_t u64() {
    uint64_t hi = u32();
    return hi << 32 | u32();
  }
  std::span<const std::byte> bytes(size_t n) {
    if (!need(n)) return {};
    auto s = b_.subspan(off_, n);
    off_ += n;
    return s;
  }
  std::string_view text(size_t n) {
    auto s = bytes(n);
    return {reinterpret_cast<const char*>(s.data()), s.size()};
  }
  std::string_view str16() { return text(u16()); }
  std::string_view str32() { return text(u32()); }
  std::span<const std::byte> rest() { return bytes(b_.size() - off_); }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && off_ == b_.size(); }

 private:
  bool need(size_t n) {
    if (ok_ && b_.size() - off_ >= n) return true;
    ok_ = false;
    return false;
  }
  std::span<const std::byte> b_;
  size_t off_ = 0;
  bool ok_ = true;
};

std::vector<std::byte> make_frame(uint16_t type, uint32_t from, std::span<const std::byte> payload) {
  Writer w;
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(type);
  w.u32(from);
  w.u32(static_cast<uint32_t>(payload.size()));
  w.bytes(payload);
  return w.take();
}

struct Frame {
  uint16_t type = 0;
  uint32_t from = 0;
  std::vector<std::byte> payload;
};

// Takes the next frame from in[off..]: 1 with a frame (off advanced), 0 if
// more bytes are needed, -1 with `why` if the bytes are not a valid frame.
int take_frame(const std::vector<std::byte>& in, size_t& off, uint32_t max_payload, Frame& f, std::string& why) {
  std::span<const std::byte> avail(in.data() + off, in.size() - off);
  char buf[160];
  if (avail.size() >= 4) {
    uint32_t magic = Reader(avail).u32();
    if (magic != kMagic) {
      std::snprintf(buf, sizeof buf, "bad magic 0x%08x (not an rdtx bootstrap peer)", magic);
      why = buf;
      return -1;
    }
  }
  if (avail.size() < kHeaderBytes) return 0;
  Reader r(avail);
  r.u32();
  uint16_t version = r.u16();
  uint16_t type = r.u16();
  uint32_t from = r.u32();
  uint32_t len = r.u32();
  if (version != kVersion) {
    std::snprintf(buf, sizeof buf, "bootstrap protocol version %u, this node speaks version %u (mixed builds?)",
                  version, kVersion);
    why = buf;
    return -1;
  }
  if (type == 0 || type > kLastType) {
    std::snprintf(buf, sizeof buf, "unknown message type %u", type);
    why = buf;
    return -1;
  }
  if (len > max_payload) {
    std::snprintf(buf, sizeof buf, "a message of %u bytes, more than the limit of %u", len, max_payload);
    why = buf;
    return -1;
  }
  if (avail.size() - kHeaderBytes < len) return 0;
  f.type = type;
  f.from = from;
  f.payload.assign(avail.begin() + kHeaderBytes, avail.begin() + kHeaderBytes + len);
  off += kHeaderBytes + len;
  return 1;
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

using Config = std::vector<std::pair<std::string, std::string>>;

// The first difference between node 0's config and node `node`'s, in node
// 0's key order, then keys only `node` has; a key's first occurrence counts.
std::optional<std::string> config_mismatch(const Config& root, const Config& other, uint32_t node) {
  std::map<std::string_view, std::string_view> in_root, in_other;
  for (const auto& [k, v] : root) in_root.emplace(k, v);
  for (const auto& [k, v] : other) in_other.emplace(k, v);
  std::string n = "node " + std::to_string(node);
  for (const auto& [k, v] : root) {
    auto it = in_other.find(k);
    if (it == in_other.end())
      return "bootstrap: config mismatch: " + n + " has no " + k + ", node 0 has " + k + " = " + v;
    if (it->second != v)
      return "bootstrap: config mismatch: " + n + " has " + k + " = " + std::string(it->second) + ", node 0 has " + v;
  }
  for (const auto& [k, v] : other)
    if (!in_root.count(k)) return "bootstrap: config mismatch: " + n + " has " + k + " = " + v + ", node 0 has no " + k;
  return std::nullopt;
}

std::vector<std::byte> encode_config(const Config& config) {
  Writer w;
  w.u32(static_cast<uint32_t>(config.size()));
  for (const auto& [k, v] : config) {
    w.str32(k);
    w.str32(v);
  }
  return w.take();
}

std::optional<Config> decode_config(std::span<const std::byte> b) {
  Reader r(b);
  uint32_t count = r.u32();
  Config c;
  for (uint32_t i = 0; i < count && r.ok(); ++i) {
    std::string k(r.str32());
    std::string v(r.str32());
    c.emplace_back(std::move(k), std::move(v));
  }
  if (!r.done()) return std::nullopt;
  return c;
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
};

}  // namespace

struct Bootstrap::Impl {
  BootstrapOptions o;
  uint32_t n = 0;
  uint64_t fp = 0;
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
  uint64_t seq = 0;  // collectives so far; only the owner thread touches it
  // Set once, after `failure` is written under mu (release); failed() reads
  // it lock-free (acquire).
  std::atomic<bool> failed{false};
  Error failure;

  explicit Impl(BootstrapOptions opts) : o(std::move(opts)) {
    n = static_cast<uint32_t>(o.nodes.size());
    fp = fingerprint(o.nodes);
    tick_ms = static_cast<int64_t>(std::clamp<uint64_t>(std::min(o.heartbeat_ms, o.peer_dead_ms / 4), 1, 100));
    peers.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      peers[i].id = i;
      peers[i].addr = host_port(o.nodes[i].host, o.nodes[i].port);
    }
  }

  ~Impl() {
    stop_io();
    for (Peer& p : peers)
      if (p.fd >= 0) ::close(p.fd);
    if (listen_fd >= 0) ::close(listen_fd);
    for (int fd : wake)
      if (fd >= 0) ::close(fd);
  }

  std::string who(uint32_t id) const { return "node " + std::to_string(id) + " (" + peers[id].addr + ")"; }
  std::string me() const { return "node " + std::to_string(o.self); }
  int64_t short_deadline() const { return now_ms() + static_cast<int64_t>(std::min<uint64_t>(o.op_timeout_ms, 1000)); }

  void wake_io() {
    char c = 0;
    if (io_running) (void)!::write(wake[1], &c, 1);
  }

  void queue_locked(Peer& p, uint16_t type, std::span<const std::byte> payload) {
    if (p.fd < 0) return;
    p.out.push_back(make_frame(type, o.self, payload));
    wake_io();
  }

  // Records the first fatal error; node 0 forwards it to every joiner.
  void fail_locked(Error e) {
    if (failed.load(std::memory_order_relaxed)) return;
    failure = std::move(e);
    failed.store(true, std::memory_order_release);
    RDTX_LOG(log(), Error, "%s", failure.message.c_str());
    if (o.self == 0) {
      Writer w;
      w.u32(static_cast<uint32_t>(failure.code));
      w.text(std::string_view(failure.message).substr(0, kMaxAbortBytes - 4));
      auto payload = w.take();
      for (Peer& p : peers)
        if (p.joined) queue_locked(p, kAbort, payload);
    }
    cv.notify_all();
  }

  // Only the thread that runs step() (the monitor thread, or the owner while
  // it does not run) closes connections, so no fd is closed under a poll().
  void close_locked(Peer& p, std::string why) {
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
    p.gone = std::move(why);
    p.out.clear();
    p.out_off = 0;
    p.armed = false;
  }

  void lost_locked(Peer& p, std::string why, bool monitor) {
    close_locked(p, why);
    if (monitor && !p.said_off)
      fail_locked(Error{ECONNRESET, "bootstrap: " + who(p.id) + " " + why + " while monitored (process died?)"});
    else
      RDTX_LOG(log(), Info, "bootstrap: %s %s", who(p.id).c_str(), why.c_str());
  }

  void bad_message_locked(Peer& p, const std::string& why) {
    Error e{EPROTO, "bootstrap: " + who(p.id) + " sent an invalid message: " + why};
    close_locked(p, "sent an invalid message");
    fail_locked(std::move(e));
  }

  void dispatch_locked(Peer& p, Frame f) {
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
        Reader r(f.payload);
        int code = static_cast<int>(r.u32());
        auto text = r.rest();
        if (!r.ok() || text.size() > kMaxAbortBytes) break;
        fail_locked(Error{code > 0 ? code : ECONNABORTED,
                          std::string(reinterpret_cast<const char*>(text.data()), text.size())});
        return;
      }
      case kContrib:
        if (o.self != 0) break;
        p.inbox.push_back(std::move(f));
        return;
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

  void parse_locked(Peer& p) {
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

  // Reads up to `burst` bytes of what is there: 0 while the connection is
  // open, -1 on EOF, else the errno.
  static int read_raw(Peer& p, size_t burst = kReadBurst) {
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

  static std::string lost_text(int err) {
    return err < 0 ? "closed the connection" : std::string("reset the connection (") + std::strerror(err) + ")";
  }

  void read_locked(Peer& p, bool monitor) {
    int err = read_raw(p);
    // Frames that arrived before an EOF count: an abort, a heartbeat "off".
    parse_locked(p);
    if (err != 0 && p.fd >= 0) lost_locked(p, lost_text(err), monitor);
  }

  void write_locked(Peer& p, bool monitor) {
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

  void monitor_tick_locked() {
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
      std::snprintf(
          buf, sizeof buf,
          " has been silent for %.1f s (peer_dead_ms = %llu): process stopped or hung, or the network is down",
          static_cast<double>(now - p.last_rx) / 1000.0, static_cast<unsigned long long>(o.peer_dead_ms));
      Error e{ETIMEDOUT, "bootstrap: " + who(p.id) + buf};
      close_locked(p, "was silent too long");
      fail_locked(std::move(e));
    }
  }

  // One round of socket I/O: waits (at most until deadline, or one monitor
  // tick) for any connection to be readable or writable, reads and
  // dispatches whole frames, writes queued output, and when `monitor` sends
  // heartbeats and checks for silence. Runs on one thread at a time.
  void step(int64_t deadline, bool monitor) {
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

  // Waits until pred() (evaluated under mu) or the deadline: on the monitor
  // thread's notifications while it runs, else doing the I/O itself.
  template <typename Pred>
  bool wait_until(Pred pred, int64_t deadline) {
    std::unique_lock lk(mu);
    for (;;) {
      if (pred()) return true;
      int64_t now = now_ms();
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

  bool flush(int64_t deadline) {
    return wait_until(
        [&] {
          for (const Peer& p : peers)
            if (p.fd >= 0 && !p.out.empty()) return false;
          return true;
        },
        deadline);
  }

  // Makes e the failure (unless there is one already), lets node 0's abort
  // messages go out, and returns the failure.
  Error fail(Error e) {
    {
      std::lock_guard lk(mu);
      fail_locked(std::move(e));
    }
    flush(short_deadline());
    std::lock_guard lk(mu);
    return failure;
  }

  void stop_io() {
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

  Result<void> open() {
    if (::pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0)
      return make_error(errno, "bootstrap: pipe2 failed: %s", std::strerror(errno));
    return listen_self();
  }

  // Listens on this node's listed address; if that address is not on this
  // machine (NAT, a name for another interface), on every address.
  Result<void> listen_self() {
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

  // A valid hello from a stranger: is it a node of this run?
  std::optional<Error> check_hello(uint32_t id, uint32_t nodes, uint64_t their_fp, std::string_view run,
                                   const std::string& from) const {
    std::string node = "node " + std::to_string(id) + " (connecting from " + from + ")";
    char buf[256];
    if (nodes != n)
      return Error{EINVAL, "bootstrap: " + node + " was started with " + std::to_string(nodes) +
                               " nodes, node 0 with " + std::to_string(n)};
    if (id >= n)
      return Error{EINVAL, "bootstrap: a peer at " + from + " claims node id " + std::to_string(id) +
                               ", out of range for " + std::to_string(n) + " nodes (0.." + std::to_string(n - 1) + ")"};
    if (id == 0)
      return Error{EINVAL, "bootstrap: a peer at " + from + " claims node id 0, which is " + peers[0].addr +
                               " itself (two processes started as node 0?)"};
    if (their_fp != fp) {
      std::snprintf(buf, sizeof buf,
                    " has a different node list than node 0 (fingerprint %016llx vs %016llx): "
                    "start every node with the same list",
                    static_cast<unsigned long long>(their_fp), static_cast<unsigned long long>(fp));
      return Error{EINVAL, "bootstrap: " + node + buf};
    }
    if (run != o.run_id)
      return Error{EINVAL,
                   "bootstrap: " + node + " has run id '" + std::string(run) + "', node 0 has '" + o.run_id + "'"};
    if (peers[id].joined)
      return Error{EINVAL, "bootstrap: node " + std::to_string(id) + " joined twice, from " + peers[id].remote +
                               " and from " + from + " (two processes started as node " + std::to_string(id) + "?)"};
    return std::nullopt;
  }

  // Node 0: accepts connections until every node has sent a valid hello.
  Result<void> accept_joiners(int64_t deadline) {
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
      Reader rd(f.payload);
      uint32_t nodes = rd.u32();
      uint64_t their_fp = rd.u64();
      std::string_view run = rd.str16();
      if (r == 1 && why.empty() && !rd.done()) why = "a malformed hello";
      if (!why.empty()) {
        drop(i, why);
        return std::nullopt;
      }
      if (r == 0) return std::nullopt;
      if (auto e = check_hello(f.from, nodes, their_fp, run, q.remote)) {
        Writer w;
        w.u32(static_cast<uint32_t>(e->code));
        w.text(e->message);
        auto frame = make_frame(kAbort, 0, w.take());
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
        if (p.joined) queue_locked(p, kWelcome, {});
    }
    if (!flush(now_ms() + static_cast<int64_t>(o.op_timeout_ms))) {
      for (Peer& p : peers)
        if (p.fd >= 0 && !p.out.empty())
          return fail(Error{
              ETIMEDOUT, "bootstrap: " + who(p.id) + " did not read its welcome within " + seconds(o.op_timeout_ms)});
    }
    std::lock_guard lk(mu);
    if (failed.load(std::memory_order_relaxed)) return failure;
    return {};
  }

  // One connection attempt to node 0 on each of its addresses; -1 with why.
  int try_connect(int64_t deadline, std::string& why) {
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
  Result<void> join_root(int64_t deadline) {
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
      Writer w;
      w.u32(n);
      w.u64(fp);
      w.str16(o.run_id);
      queue_locked(root, kHello, w.take());
    }
    wait_until([&] { return failed.load(std::memory_order_relaxed) || !root.inbox.empty() || root.fd < 0; },
               answer_deadline);
    std::unique_lock lk(mu);
    if (failed.load(std::memory_order_relaxed)) return failure;
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
    return {};
  }

  std::vector<std::byte> op_header(OpKind kind, std::string_view what, uint64_t s) const {
    Writer w;
    w.u64(s);
    w.u8(static_cast<uint8_t>(kind));
    w.str16(what);
    return w.take();
  }
  // A collective's message as op_header() wrote it, and its body.
  struct OpMessage {
    uint64_t seq = 0;
    uint8_t kind = 0;
    std::string_view name;
    std::span<const std::byte> body;
    bool ok = false;  // well-formed
    bool is(uint64_t s, OpKind k, std::string_view what) const {
      return seq == s && kind == static_cast<uint8_t>(k) && name == what;
    }
  };
  static OpMessage parse_op(std::span<const std::byte> payload) {
    Reader r(payload);
    OpMessage m;
    m.seq = r.u64();
    m.kind = r.u8();
    m.name = r.str16();
    m.body = r.rest();
    m.ok = r.ok();
    return m;
  }

  Result<void> check_name(OpKind kind, std::string_view what) const {
    if (what.size() > kMaxTextBytes)
      return make_error(EINVAL, "bootstrap: the name of %s is %zu bytes long, at most %zu allowed", to_string(kind),
                        what.size(), kMaxTextBytes);
    return {};
  }

  // Node 0: waits for every joiner's contribution to this operation and
  // returns all contributions by node id (its own at [0]).
  Result<std::vector<std::vector<std::byte>>> root_collect(OpKind kind, std::string_view what,
                                                           std::span<const std::byte> mine) {
    RDTX_TRY(check_name(kind, what));
    const std::string op = describe(static_cast<uint8_t>(kind), what);
    const uint64_t s = ++seq;
    const int64_t deadline = now_ms() + static_cast<int64_t>(o.op_timeout_ms);
    wait_until(
        [&] {
          if (failed.load(std::memory_order_relaxed)) return true;
          for (uint32_t i = 1; i < n; ++i)
            if (peers[i].inbox.empty() && peers[i].fd >= 0) return false;
          return true;
        },
        deadline);
    std::unique_lock lk(mu);
    if (failed.load(std::memory_order_relaxed)) return failure;
    std::vector<std::vector<std::byte>> blobs(n);
    blobs[0].assign(mine.begin(), mine.end());
    std::optional<Error> err;
    for (uint32_t i = 1; i < n && !err; ++i) {
      Peer& p = peers[i];
      if (p.inbox.empty()) {
        if (p.fd < 0) {
          err = Error{ECONNRESET, "bootstrap: " + who(i) + " " + p.gone + " during " + op};
        } else {
          uint32_t late = 0;
          for (uint32_t k = i + 1; k < n; ++k) late += peers[k].inbox.empty();
          err =
              Error{ETIMEDOUT, "bootstrap: " + who(i) + " did not reach " + op + " within " + seconds(o.op_timeout_ms) +
                                   (late ? " (nor did " + std::to_string(late) + " more)" : std::string())};
        }
        break;
      }
      Frame f = std::move(p.inbox.front());
      p.inbox.pop_front();
      const OpMessage m = parse_op(f.payload);
      if (!m.ok) {
        err = Error{EPROTO, "bootstrap: " + who(i) + " sent an invalid message: a truncated contribution"};
      } else if (!m.is(s, kind, what)) {
        err = Error{EPROTO, "bootstrap: " + who(i) + " is in " + describe(m.kind, m.name) + " (operation #" +
                                std::to_string(m.seq) + ") while node 0 is in " + op + " (operation #" +
                                std::to_string(s) + ")"};
      } else {
        blobs[i].assign(m.body.begin(), m.body.end());
      }
    }
    lk.unlock();
    if (err) return fail(std::move(*err));
    return blobs;
  }

  // Node 0: sends every joiner the result and waits until it is sent.
  Result<void> root_respond(OpKind kind, std::string_view what, std::span<const std::byte> body) {
    const std::string op = describe(static_cast<uint8_t>(kind), what);
    auto payload = op_header(kind, what, seq);
    if (payload.size() + body.size() > kMaxPayload)
      return fail(make_error(EMSGSIZE, "bootstrap: the result of %s is %zu bytes, more than the limit of %u",
                             op.c_str(), body.size(), kMaxPayload));
    payload.insert(payload.end(), body.begin(), body.end());
    {
      std::lock_guard lk(mu);
      for (uint32_t i = 1; i < n; ++i) queue_locked(peers[i], kResult, payload);
    }
    if (!flush(now_ms() + static_cast<int64_t>(o.op_timeout_ms))) {
      std::unique_lock lk(mu);
      for (uint32_t i = 1; i < n; ++i)
        if (peers[i].fd >= 0 && !peers[i].out.empty()) {
          Error e{ETIMEDOUT,
                  "bootstrap: " + who(i) + " did not read the result of " + op + " within " + seconds(o.op_timeout_ms)};
          lk.unlock();
          return fail(std::move(e));
        }
    }
    std::lock_guard lk(mu);
    if (failed.load(std::memory_order_relaxed)) return failure;
    return {};
  }

  // A joiner: sends its contribution to node 0 and returns node 0's result.
  Result<std::vector<std::byte>> exchange(OpKind kind, std::string_view what, std::span<const std::byte> mine) {
    RDTX_TRY(check_name(kind, what));
    const std::string op = describe(static_cast<uint8_t>(kind), what);
    const uint64_t s = ++seq;
    // Node 0 sees every node and names the late one: give its verdict time
    // to arrive when this node entered the operation before node 0 did.
    const uint64_t wait_ms = o.op_timeout_ms + 1000;
    const int64_t deadline = now_ms() + static_cast<int64_t>(wait_ms);
    Peer& root = peers[0];
    {
      std::lock_guard lk(mu);
      if (failed.load(std::memory_order_relaxed)) return failure;
      auto payload = op_header(kind, what, s);
      if (payload.size() + mine.size() > kMaxPayload) {
        Error e = make_error(EMSGSIZE, "bootstrap: %s's contribution to %s is %zu bytes, more than the limit of %u",
                             me().c_str(), op.c_str(), mine.size(), kMaxPayload);
        fail_locked(e);
        return e;
      }
      payload.insert(payload.end(), mine.begin(), mine.end());
      queue_locked(root, kContrib, payload);
    }
    wait_until([&] { return failed.load(std::memory_order_relaxed) || !root.inbox.empty() || root.fd < 0; }, deadline);
    std::unique_lock lk(mu);
    if (failed.load(std::memory_order_relaxed)) return failure;
    if (root.inbox.empty()) {
      if (root.fd < 0)
        fail_locked(Error{ECONNRESET, "bootstrap: " + who(0) + " " + root.gone + " during " + op});
      else
        fail_locked(Error{ETIMEDOUT, "bootstrap: " + who(0) + " did not complete " + op + " within " +
                                         seconds(wait_ms) + " (node 0, or a node it waits for, is late)"});
      return failure;
    }
    Frame f = std::move(root.inbox.front());
    root.inbox.pop_front();
    const OpMessage m = parse_op(f.payload);
    if (f.type != kResult || !m.ok || !m.is(s, kind, what)) {
      fail_locked(Error{EPROTO, "bootstrap: " + who(0) + " sent an invalid message: not the result of " + op});
      return failure;
    }
    return std::vector<std::byte>(m.body.begin(), m.body.end());
  }
};

Bootstrap::Bootstrap(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Bootstrap::~Bootstrap() {
  impl_->stop_io();
  // Output still queued (node 0's abort messages after a failure) gets a
  // moment to leave before the connections close.
  impl_->flush(now_ms() + 200);
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

uint32_t Bootstrap::self() const { return impl_->o.self; }
uint32_t Bootstrap::nodes() const { return impl_->n; }
const NodeAddress& Bootstrap::address(uint32_t node) const { return impl_->o.nodes.at(node); }

Result<std::vector<std::vector<std::byte>>> Bootstrap::all_gather(std::span<const std::byte> mine,
                                                                  std::string_view what) {
  Impl& m = *impl_;
  if (m.o.self == 0) {
    auto blobs = m.root_collect(OpKind::kAllGather, what, mine);
    if (!blobs.ok()) return blobs.error();
    size_t total = 4;
    for (const auto& b : *blobs) total += 4 + b.size();
    if (total > kMaxPayload)
      return m.fail(make_error(EMSGSIZE, "bootstrap: the blobs of %s total %zu bytes, more than the limit of %u",
                               describe(static_cast<uint8_t>(OpKind::kAllGather), what).c_str(), total, kMaxPayload));
    Writer w;
    w.u32(m.n);
    for (const auto& b : *blobs) {
      w.u32(static_cast<uint32_t>(b.size()));
      w.bytes(b);
    }
    RDTX_TRY(m.root_respond(OpKind::kAllGather, what, w.take()));
    return blobs;
  }
  auto body = m.exchange(OpKind::kAllGather, what, mine);
  if (!body.ok()) return body.error();
  Reader r(*body);
  std::vector<std::vector<std::byte>> blobs;
  if (r.u32() == m.n) {
    for (uint32_t i = 0; i < m.n && r.ok(); ++i) {
      auto b = r.bytes(r.u32());
      blobs.emplace_back(b.begin(), b.end());
    }
  }
  if (!r.done() || blobs.size() != m.n)
    return m.fail(Error{EPROTO, "bootstrap: " + m.who(0) + " sent an invalid message: a malformed result of " +
                                    describe(static_cast<uint8_t>(OpKind::kAllGather), what)});
  return blobs;
}

Result<std::vector<std::vector<std::byte>>> Bootstrap::gather(std::span<const std::byte> mine, std::string_view what) {
  Impl& m = *impl_;
  if (m.o.self == 0) {
    auto blobs = m.root_collect(OpKind::kGather, what, mine);
    if (!blobs.ok()) return blobs.error();
    RDTX_TRY(m.root_respond(OpKind::kGather, what, {}));
    return blobs;
  }
  auto body = m.exchange(OpKind::kGather, what, mine);
  if (!body.ok()) return body.error();
  return std::vector<std::vector<std::byte>>{};
}

Result<void> Bootstrap::barrier(std::string_view what) {
  Impl& m = *impl_;
  if (m.o.self == 0) {
    auto blobs = m.root_collect(OpKind::kBarrier, what, {});
    if (!blobs.ok()) return blobs.error();
    return m.root_respond(OpKind::kBarrier, what, {});
  }
  auto body = m.exchange(OpKind::kBarrier, what, {});
  if (!body.ok()) return body.error();
  return {};
}

Result<void> Bootstrap::agree(const std::vector<std::pair<std::string, std::string>>& config) {
  Impl& m = *impl_;
  constexpr std::string_view kWhat = "config";
  auto mine = encode_config(config);
  if (m.o.self != 0) {
    auto body = m.exchange(OpKind::kAgree, kWhat, mine);
    if (!body.ok()) return body.error();
    return {};
  }
  auto blobs = m.root_collect(OpKind::kAgree, kWhat, mine);
  if (!blobs.ok()) return blobs.error();
  for (uint32_t i = 1; i < m.n; ++i) {
    auto theirs = decode_config((*blobs)[i]);
    if (!theirs)
      return m.fail(Error{EPROTO, "bootstrap: " + m.who(i) + " sent an invalid message: a malformed config"});
    if (auto diff = config_mismatch(config, *theirs, i)) return m.fail(Error{EINVAL, std::move(*diff)});
  }
  return m.root_respond(OpKind::kAgree, kWhat, {});
}

void Bootstrap::start_monitor() {
  Impl& m = *impl_;
  {
    std::unique_lock lk(m.mu);
    if (m.io_running || m.failed.load(std::memory_order_relaxed)) return;
    const int64_t now = now_ms();
    const std::byte on{1};
    for (Peer& p : m.peers) {
      if (!p.joined) continue;
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

bool Bootstrap::failed() const { return impl_->failed.load(std::memory_order_acquire); }

std::string Bootstrap::failure() const {
  std::lock_guard lk(impl_->mu);
  return impl_->failed.load(std::memory_order_relaxed) ? impl_->failure.message : std::string();
}

}  // namespace rdtx::cluster
