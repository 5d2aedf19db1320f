// The remote node of a conformance topology. It opens its own device (node
// 1), allocates and registers memory with various access rights, serves an
// echo over a UD QP, and obeys line commands from the test (node 0) on `in`,
// answering on `out`, until `in` reaches end of file. The same code runs in a
// thread of the test process (in-process topology) or in a child process
// (the test binary re-executed with --rdtx-peer-agent), so both topologies
// exercise one protocol.
//
// Startup line: "ready mem=A,K,L ro=A,K,L dead=A,K,L heap=A,K,L echo=<hex>
// echo_qpn=N pid=P" (A: address, K: rkey, L: length) or "err <message>".
//   mem   alloc_memory(), all access rights, zeroed
//   ro    alloc_memory(), kLocalWrite|kRemoteRead only, filled with 0xa5
//   dead  alloc_memory(), registered then deregistered, filled with 0x5a
//   heap  ordinary heap memory, all access rights, filled with 0x3c
//   echo  a UD QP that sends every message back to the QpAddress in its
//         first 48 bytes
// Commands (answer "ok ..." or "err <message>"):
//   rc <addr>                 new RC QP connected to addr -> "ok <id> <addr>"
//   reconnect <id> <addr>     connect RC QP id again       -> "ok"
//   send <addr> <n> <size> <seq>  n signaled SENDs of pattern messages seq,
//                             seq+1, ... to UD addr -> "ok <successes> <qpn>"
//   peek <addr> <len>         own memory (any of the above) -> "ok <hex>"
// Thread-safety: one agent per call; it owns everything it creates.
#pragma once

#include <cstdint>
#include <string>

namespace rdtx::rdma::test {

struct AgentOptions {
  std::string devargs;
  std::string fabric;
  uint32_t node_id = 1;
};

// Returns 0 at end of input, non-zero if the agent could not start.
int run_peer_agent(int in_fd, int out_fd, const AgentOptions& opts);

}  // namespace rdtx::rdma::test
