// Conformance topologies: node 0 is a device in the test process, node 1 is
// a peer agent (peer_agent.hpp) reached over pipes, either in a thread of the
// test process or in a child process, or over TCP on another host: with
// RDTX_CONFORMANCE_PEER=HOST:PORT the verbs_remote topology asks an agent
// server there (the test binary run with --rdtx-peer-agent-server PORT
// DEVARGS) for a fresh agent process per test. A topology that cannot run here (no
// device for its driver) fails to start with the reason, which the tests
// report as a skip. Adding a driver's topology is one more TopologySpec;
// the verbs ones take their devargs from RDTX_VERBS_DEVARGS (default
// "verbs": the first RDMA device).
// Thread-safety: a Topology is used by the test's main thread; local() may
// be shared for control-path calls as any Device.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "base/result.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::test {

struct TopologySpec {
  std::string name;     // a GoogleTest parameter name: [A-Za-z0-9_]
  std::string devargs;  // for both nodes
  bool separate_process = false;
  std::string peer;  // HOST:PORT of an agent server on another host; empty: this host
};

// gtest prints a parameter by its name.
inline void PrintTo(const TopologySpec& spec, std::ostream* os) { *os << spec.name; }

// Every topology the conformance suite runs against.
std::vector<TopologySpec> all_topologies();

struct RemoteRegion {
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
};

class Topology {
 public:
  // Opens node 0 and starts the agent for node 1 in a fresh fabric.
  static Result<std::unique_ptr<Topology>> start(const TopologySpec& spec);
  // Ends the agent (end of its input) and returns its exit status: 0, or
  // non-zero if it failed, crashed or (sanitizer builds) leaked.
  int stop();
  ~Topology() { stop(); }

  const TopologySpec& spec() const { return spec_; }
  Device& local() { return *local_; }
  const std::string& fabric() const { return fabric_; }

  // What the agent registered (see peer_agent.hpp).
  RemoteRegion mem, ro, dead, heap;
  QpAddress echo;
  uint32_t echo_qpn = 0;

  // A new RC QP on node 1 connected to `mine`: its id and address.
  Result<std::pair<int, QpAddress>> remote_rc(const QpAddress& mine);
  Result<void> remote_reconnect(int id, const QpAddress& mine);
  // Node 1 sends n pattern messages (test_util.hpp) seq, seq+1, ... of `size`
  // bytes to the UD QP `to`; returns how many SENDs completed successfully
  // and the sending QP's number.
  Result<std::pair<uint64_t, uint32_t>> remote_send(const QpAddress& to, uint64_t n, uint32_t size, uint64_t seq);
  // Node 1's own view of its memory, bypassing the network.
  Result<std::vector<uint8_t>> remote_peek(uint64_t addr, size_t len);
  // Node 1 reserves `reserve` bytes (Device::reserve_memory) with `commit`
  // committed and registers all of it; then commits more of it.
  Result<RemoteRegion> remote_lazy(size_t reserve, size_t commit);
  Result<void> remote_commit(size_t offset, size_t length);

  Topology(const TopologySpec& spec, std::string fabric) : spec_(spec), fabric_(std::move(fabric)) {}

 private:
  Result<void> launch();
  Result<std::string> call(const std::string& line);
  Result<std::string> read_line();

  TopologySpec spec_;
  std::string fabric_;
  std::unique_ptr<Device> local_;
  int cmd_fd_ = -1;   // our end of the agent's input
  int resp_fd_ = -1;  // our end of the agent's output
  std::string pending_;
  pid_t child_ = -1;
  bool remote_ = false;  // cmd_fd_/resp_fd_ are one TCP connection (dup'ed)
  std::thread agent_thread_;
  int agent_status_ = 0;  // set by the agent thread before it ends
};

// Entry point of the agent in a child process: argv is
// {prog, "--rdtx-peer-agent", devargs, fabric, node}. Returns an exit code.
int peer_agent_main(int argc, char** argv);
inline constexpr const char* kPeerAgentFlag = "--rdtx-peer-agent";

// The other host's side of verbs_remote: argv is {prog,
// "--rdtx-peer-agent-server", port, devargs}. Listens on the port (all
// addresses); each connection's first line is "agent FABRIC" (then a child process
// serves it as node 1 and, at the end of its input, writes "exit N") or
// "quit" (then the server ends, returning 0 if every agent exited 0).
int peer_agent_server_main(int argc, char** argv);
inline constexpr const char* kPeerAgentServerFlag = "--rdtx-peer-agent-server";
// Ends the server named by RDTX_CONFORMANCE_PEER (if set): "quit".
void stop_remote_peer_server();

}  // namespace rdtx::rdma::test
