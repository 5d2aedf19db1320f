#include "topology.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "peer_agent.hpp"
#include "test_util.hpp"

extern char** environ;

namespace rdtx::rdma::test {

namespace {
constexpr int kReplyTimeoutMs = 60'000;  // generous: sanitizer builds on a busy 2-core machine

bool parse_region(const std::string& v, RemoteRegion* r) {
  return std::sscanf(v.c_str(), "%" SCNu64 ",%" SCNu32 ",%" SCNu64, &r->addr, &r->rkey, &r->length) == 3;
}

// A TCP connection to HOST:PORT, retried for up to `wait_s` seconds (the
// server may still be starting on the other host).
Result<int> connect_tcp(const std::string& peer, int wait_s) {
  auto colon = peer.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == peer.size())
    return make_error(EINVAL, "RDTX_CONFORMANCE_PEER '%s' is not HOST:PORT", peer.c_str());
  const std::string host = peer.substr(0, colon), port = peer.substr(colon + 1);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return make_error(EINVAL, "RDTX_CONFORMANCE_PEER '%s': %s", peer.c_str(), gai_strerror(rc));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
  int err = 0;
  for (;;) {
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
      int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        freeaddrinfo(res);
        return fd;
      }
      err = errno;
      close(fd);
    }
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  freeaddrinfo(res);
  return make_error(err != 0 ? err : ECONNREFUSED, "cannot reach the agent server at %s: %s", peer.c_str(),
                    strerror(err != 0 ? err : ECONNREFUSED));
}

bool write_all(int fd, const std::string& s) { return write(fd, s.data(), s.size()) == static_cast<ssize_t>(s.size()); }

// One line (without its newline) read a byte at a time: what follows it on
// the connection belongs to the agent.
bool read_first_line(int fd, std::string* line) {
  char c;
  while (line->size() < 64) {
    if (read(fd, &c, 1) != 1) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
  return false;
}
}  // namespace

std::vector<TopologySpec> all_topologies() {
  // verbs: both nodes on one RDMA device (hardware or Soft-RoCE), reaching
  // each other through its port. RDTX_VERBS_DEVARGS picks the device, e.g.
  // "verbs,dev=rxe0,gid_index=1"; by default the driver takes the first one.
  // Where there is none (or the driver was not built) opening fails with
  // the reason and the tests skip with it.
  const char* verbs_env = std::getenv("RDTX_VERBS_DEVARGS");
  std::string verbs = verbs_env != nullptr && *verbs_env != '\0' ? verbs_env : "verbs";
  // The shm_*order ones run the whole suite with the adversarial word orders
  // (doc/drivers.md): nothing the API promises may depend on ascending order.
  // shm_hca_process with atomics=hca (remote atomics atomic only among
  // themselves, IBV_ATOMIC_HCA; the node's atomic unit shared across processes).
  // verbs_remote: node 1 on another host (its own kernel and device), listed
  // only when RDTX_CONFORMANCE_PEER names the agent server there.
  std::vector<TopologySpec> all = {
      {"shm_inproc", "shm", false, ""},
      {"shm_process", "shm", true, ""},
      {"shm_random_order", "shm,read_order=random,write_order=random,seed=1", false, ""},
      {"shm_descending_order_process", "shm,read_order=descending,write_order=random", true, ""},
      {"shm_hca_process", "shm,atomics=hca", true, ""},
      {"verbs_inproc", verbs, false, ""},
      {"verbs_process", verbs, true, ""},
  };
  const char* peer = std::getenv("RDTX_CONFORMANCE_PEER");
  if (peer != nullptr && *peer != '\0') all.push_back({"verbs_remote", verbs, true, peer});
  return all;
}

Result<std::unique_ptr<Topology>> Topology::start(const TopologySpec& spec) {
  static std::atomic<unsigned> seq{0};
  std::string fabric = "conf" + std::to_string(getpid()) + "x" + std::to_string(seq.fetch_add(1));
  auto topo = std::make_unique<Topology>(spec, fabric);
  OpenOptions oo;
  oo.node_id = 0;
  oo.fabric = fabric;
  auto dev = open_device(spec.devargs, oo);
  if (!dev.ok()) return dev.error();
  topo->local_ = std::move(*dev);
  RDTX_TRY(topo->launch());
  auto line = topo->read_line();
  if (!line.ok()) return line.error();
  std::istringstream in(*line);
  std::string word;
  in >> word;
  if (word != "ready") return make_error(EPROTO, "peer agent failed to start: %s", line->c_str());
  bool ok = true;
  while (in >> word) {
    auto eq = word.find('=');
    std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    if (key == "mem") ok &= parse_region(value, &topo->mem);
    if (key == "ro") ok &= parse_region(value, &topo->ro);
    if (key == "dead") ok &= parse_region(value, &topo->dead);
    if (key == "heap") ok &= parse_region(value, &topo->heap);
    if (key == "echo") ok &= from_hex(value, &topo->echo);
    if (key == "echo_qpn") topo->echo_qpn = static_cast<uint32_t>(std::stoul(value));
  }
  if (!ok) return make_error(EPROTO, "cannot parse the peer agent's ready line: %s", line->c_str());
  return topo;
}

Result<void> Topology::launch() {
  if (!spec_.peer.empty()) {
    auto fd = connect_tcp(spec_.peer, 30);
    if (!fd.ok()) return fd.error();
    cmd_fd_ = *fd;
    resp_fd_ = fcntl(*fd, F_DUPFD_CLOEXEC, 0);
    remote_ = true;
    if (resp_fd_ < 0) return make_error(errno, "dup: %s", strerror(errno));
    if (!write_all(cmd_fd_, "agent " + fabric_ + "\n")) return make_error(EPIPE, "the agent server at %s hung up", spec_.peer.c_str());
    return {};
  }
  int cmd[2], resp[2];
  if (pipe2(cmd, O_CLOEXEC) != 0) return make_error(errno, "pipe: %s", strerror(errno));
  if (pipe2(resp, O_CLOEXEC) != 0) {
    close(cmd[0]);
    close(cmd[1]);
    return make_error(errno, "pipe: %s", strerror(errno));
  }
  cmd_fd_ = cmd[1];
  resp_fd_ = resp[0];
  AgentOptions opts{spec_.devargs, fabric_, 1};
  if (!spec_.separate_process) {
    agent_thread_ = std::thread([this, opts, in = cmd[0], out = resp[1]] {
      agent_status_ = run_peer_agent(in, out, opts);
      close(in);
      close(out);
    });
    return {};
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, cmd[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&fa, resp[1], STDOUT_FILENO);
  std::string node = "1";
  std::string exe = "/proc/self/exe";
  char* argv[] = {exe.data(), const_cast<char*>(kPeerAgentFlag), spec_.devargs.data(), fabric_.data(), node.data(),
                  nullptr};
  int rc = posix_spawn(&child_, exe.c_str(), &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(cmd[0]);
  close(resp[1]);
  if (rc != 0) {
    child_ = -1;
    return make_error(rc, "cannot spawn the peer agent process: %s", strerror(rc));
  }
  return {};
}

int Topology::stop() {
  // End of input tells the agent to finish; it closes its device on the way.
  // A remote one then reports its exit status on the connection.
  if (remote_ && cmd_fd_ >= 0) {
    shutdown(cmd_fd_, SHUT_WR);
    agent_status_ = 255;
    for (auto line = read_line(); line.ok(); line = read_line())
      if (line->rfind("exit ", 0) == 0) {
        agent_status_ = std::atoi(line->c_str() + 5);
        break;
      }
  }
  if (cmd_fd_ >= 0) close(cmd_fd_);
  cmd_fd_ = -1;
  if (agent_thread_.joinable()) agent_thread_.join();
  if (child_ > 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    int status = 0;
    while (waitpid(child_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(child_, SIGKILL);
        waitpid(child_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    agent_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    child_ = -1;
  }
  if (resp_fd_ >= 0) close(resp_fd_);
  resp_fd_ = -1;
  return agent_status_;
}

Result<std::string> Topology::read_line() {
  for (;;) {
    auto nl = pending_.find('\n');
    if (nl != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return line;
    }
    pollfd p{resp_fd_, POLLIN, 0};
    if (poll(&p, 1, kReplyTimeoutMs) <= 0) return make_error(ETIMEDOUT, "the peer agent did not answer");
    char buf[4096];
    ssize_t n = read(resp_fd_, buf, sizeof buf);
    if (n <= 0) return make_error(EPIPE, "the peer agent exited");
    pending_.append(buf, static_cast<size_t>(n));
  }
}

Result<std::string> Topology::call(const std::string& line) {
  std::string s = line + "\n";
  if (write(cmd_fd_, s.data(), s.size()) != static_cast<ssize_t>(s.size()))
    return make_error(EPIPE, "cannot write to the peer agent");
  auto reply = read_line();
  if (!reply.ok()) return reply.error();
  if (reply->rfind("ok", 0) != 0) return make_error(EIO, "peer agent: '%s' -> %s", line.c_str(), reply->c_str());
  return reply->size() > 3 ? reply->substr(3) : std::string();
}

Result<std::pair<int, QpAddress>> Topology::remote_rc(const QpAddress& mine) {
  auto r = call("rc " + to_hex(mine));
  if (!r.ok()) return r.error();
  std::istringstream in(*r);
  int id = -1;
  std::string hex;
  in >> id >> hex;
  QpAddress addr;
  if (!from_hex(hex, &addr)) return make_error(EPROTO, "bad rc reply: %s", r->c_str());
  return std::make_pair(id, addr);
}

Result<void> Topology::remote_reconnect(int id, const QpAddress& mine) {
  auto r = call("reconnect " + std::to_string(id) + " " + to_hex(mine));
  if (!r.ok()) return r.error();
  return {};
}

Result<std::pair<uint64_t, uint32_t>> Topology::remote_send(const QpAddress& to, uint64_t n, uint32_t size,
                                                            uint64_t seq) {
  auto r = call("send " + to_hex(to) + " " + std::to_string(n) + " " + std::to_string(size) + " " +
                std::to_string(seq));
  if (!r.ok()) return r.error();
  uint64_t ok = 0;
  uint32_t qpn = 0;
  std::istringstream in(*r);
  in >> ok >> qpn;
  return std::make_pair(ok, qpn);
}

Result<std::vector<uint8_t>> Topology::remote_peek(uint64_t addr, size_t len) {
  auto r = call("peek " + std::to_string(addr) + " " + std::to_string(len));
  if (!r.ok()) return r.error();
  std::vector<uint8_t> out(len);
  if (!from_hex(*r, out.data(), len)) return make_error(EPROTO, "bad peek reply");
  return out;
}

Result<RemoteRegion> Topology::remote_lazy(size_t reserve, size_t commit) {
  auto r = call("lazy " + std::to_string(reserve) + " " + std::to_string(commit));
  if (!r.ok()) return r.error();
  RemoteRegion out;
  if (!parse_region(*r, &out)) return make_error(EPROTO, "bad lazy reply: %s", r->c_str());
  return out;
}

Result<void> Topology::remote_commit(size_t offset, size_t length) {
  auto r = call("commit " + std::to_string(offset) + " " + std::to_string(length));
  if (!r.ok()) return r.error();
  return {};
}

int peer_agent_main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s %s <devargs> <fabric> <node>\n", argv[0], kPeerAgentFlag);
    return 2;
  }
  AgentOptions opts{argv[2], argv[3], static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10))};
  return run_peer_agent(STDIN_FILENO, STDOUT_FILENO, opts);
}

int peer_agent_server_main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s %s <port> <devargs>\n", argv[0], kPeerAgentServerFlag);
    return 2;
  }
  const int port = std::atoi(argv[2]);
  int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  if (ls < 0 || port <= 0 || port > 65535 || bind(ls, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      listen(ls, 16) != 0) {
    std::fprintf(stderr, "agent server: cannot listen on port %s: %s\n", argv[2], strerror(errno));
    return 1;
  }
  std::fprintf(stderr, "agent server: listening on port %d (devargs %s)\n", port, argv[3]);
  int agents = 0, failed = 0;
  auto reap = [&](int flags) {
    int status = 0;
    for (pid_t p; (p = waitpid(-1, &status, flags)) > 0;)
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  };
  for (;;) {
    // Bounded: a test run that never says "quit" (killed) must not leave
    // the server behind for ever.
    pollfd p{ls, POLLIN, 0};
    if (poll(&p, 1, 600'000) <= 0) {
      std::fprintf(stderr, "agent server: no connection for 600 s, giving up\n");
      return 1;
    }
    int fd = accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    std::string first;
    if (!read_first_line(fd, &first) || (first.rfind("agent ", 0) != 0 && first != "quit")) {
      close(fd);
      continue;
    }
    if (first == "quit") {
      close(fd);
      close(ls);
      reap(0);
      std::fprintf(stderr, "agent server: %d agents, %d failed\n", agents, failed);
      return failed == 0 ? 0 : 1;
    }
    ++agents;
    pid_t child = fork();
    if (child == 0) {
      close(ls);
      AgentOptions opts{argv[3], first.substr(6), 1};  // the fabric: shm's (a local try of this path)
      int rc = run_peer_agent(fd, fd, opts);
      write_all(fd, "exit " + std::to_string(rc) + "\n");
      _exit(rc);
    }
    if (child < 0) ++failed;
    close(fd);
    reap(WNOHANG);
  }
}

void stop_remote_peer_server() {
  const char* peer = std::getenv("RDTX_CONFORMANCE_PEER");
  if (peer == nullptr || *peer == '\0') return;
  auto fd = connect_tcp(peer, 5);
  if (!fd.ok()) return;
  write_all(*fd, "quit\n");
  close(*fd);
}

}  // namespace rdtx::rdma::test
