// main() of the rdma test executables. Besides running the tests, the binary
// is its own helper process:
//   --rdtx-peer-agent <devargs> <fabric> <node>  node of a two-process topology
//   --rdtx-peer-agent-server <port> <devargs>    the other host's side of the
//                                                 verbs_remote topology
//   --rdtx-abandon-node <devargs> <fabric> <node> opens a node and dies without
//                                                 closing it (a crashed owner)
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "rdma/rdma.hpp"
#include "topology.hpp"

namespace {
int abandon_node_main(int argc, char** argv) {
  if (argc != 5) return 2;
  rdtx::rdma::OpenOptions oo;
  oo.fabric = argv[3];
  oo.node_id = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
  auto dev = rdtx::rdma::open_device(argv[2], oo);
  if (!dev.ok()) return 1;
  auto mem = (*dev)->alloc_memory(4096);
  if (!mem.ok()) return 1;
  _exit(0);  // no destructors: leaves the node's files behind, as a crash would
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], rdtx::rdma::test::kPeerAgentFlag) == 0)
    return rdtx::rdma::test::peer_agent_main(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], rdtx::rdma::test::kPeerAgentServerFlag) == 0)
    return rdtx::rdma::test::peer_agent_server_main(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--rdtx-abandon-node") == 0) return abandon_node_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  rdtx::rdma::test::stop_remote_peer_server();
  return rc;
}
