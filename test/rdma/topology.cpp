#include "topology.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
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
  // (doc/drivers.md): nothing the API promises may depend on ascending order;
  // shm_hca_process with atomics=hca.
  return {
      {"shm_inproc", "shm", false},
      {"shm_process", "shm", true},
      {"shm_random_order", "shm,read_order=random,write_order=random,seed=1", false},
      {"shm_descending_order_process", "shm,read_order=descending,write_order=random", true},
      // Remote atomics atomic only among themselves (IBV_ATOMIC_HCA), the
      // node's atomic unit shared across processes.
      {"shm_hca_process", "shm,atomics=hca", true},
      {"verbs_inproc", verbs, false},
      {"verbs_process", verbs, true},
  };
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

}  // namespace rdtx::rdma::test
