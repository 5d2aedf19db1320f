// Conformance: opening devices — devargs errors name what is wrong, caps
// reflect devargs, a node can be open only once.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "rdma/rdma.hpp"

namespace rdtx::rdma::test {
namespace {

std::string open_error(const std::string& devargs, const OpenOptions& oo = {}) {
  auto dev = open_device(devargs, oo);
  return dev.ok() ? std::string("(opened)") : dev.error().message;
}

using ::testing::HasSubstr;

TEST(DeviceOpen, UnknownKeyIsNamedWithTheValidOnes) {
  std::string e = open_error("shm,bogus=1");
  EXPECT_THAT(e, HasSubstr("bogus"));
  EXPECT_THAT(e, HasSubstr("latency_ns"));
}

TEST(DeviceOpen, BadValuesAreNamed) {
  EXPECT_THAT(open_error("shm,latency_ns=abc"), HasSubstr("latency_ns=abc"));
  EXPECT_THAT(open_error("shm,latency_ns=-5"), HasSubstr("latency_ns=-5"));
  EXPECT_THAT(open_error("shm,bw_gbps=fast"), HasSubstr("bw_gbps=fast"));
  EXPECT_THAT(open_error("shm,bw_gbps=-1"), HasSubstr("bw_gbps=-1"));
  EXPECT_THAT(open_error("shm,mtu=0"), HasSubstr("mtu=0"));
  EXPECT_THAT(open_error("shm,latency_ns"), HasSubstr("latency_ns"));
}

TEST(DeviceOpen, BadAdversarialValuesAreNamed) {
  EXPECT_THAT(open_error("shm,read_order=sideways"), HasSubstr("read_order=sideways is not one of ascending|descending|random"));
  EXPECT_THAT(open_error("shm,write_order=descending"), HasSubstr("write_order=descending is not one of ascending|random"));
  for (const char* key : {"ud_drop", "ud_dup", "ud_delay"}) {
    std::string k(key);
    EXPECT_THAT(open_error("shm," + k + "=1.5"), HasSubstr(k + "=1.5 is out of range [0, 1]"));
    EXPECT_THAT(open_error("shm," + k + "=-0.1"), HasSubstr(k + "=-0.1 is out of range [0, 1]"));
    EXPECT_THAT(open_error("shm," + k + "=nan"), HasSubstr(k + "=nan"));
    EXPECT_THAT(open_error("shm," + k + "=often"), HasSubstr(k + "=often is not a number"));
  }
  EXPECT_THAT(open_error("shm,ud_delay=0.1,ud_delay_ns=0"), HasSubstr("ud_delay_ns=0 is out of range"));
  EXPECT_THAT(open_error("shm,seed=x"), HasSubstr("seed=x"));
  EXPECT_THAT(open_error("shm,pause_ms=100"), HasSubstr("need pause_node"));
  EXPECT_THAT(open_error("shm,pause_at_ms=100"), HasSubstr("need pause_node"));
  EXPECT_THAT(open_error("shm,pause_node=1"), HasSubstr("pause_node needs pause_ms"));
  EXPECT_THAT(open_error("shm,pause_node=1,pause_ms=0"), HasSubstr("pause_ms=0 is out of range"));
  EXPECT_THAT(open_error("shm,pause_node=4096,pause_ms=10"), HasSubstr("pause_node=4096 is out of range"));
  EXPECT_THAT(open_error("shm,pause_node=1,pause_ms=10,pause_at_ms=soon"), HasSubstr("pause_at_ms=soon"));
  EXPECT_THAT(open_error("shm,atomics=glob"), HasSubstr("atomics=glob is not one of cpu|hca"));
}

TEST(DeviceOpen, AdversarialDevargsOpen) {
  OpenOptions oo;
  oo.fabric = "adv" + std::to_string(getpid());
  for (const char* devargs :
       {"shm,read_order=descending,write_order=random,seed=0", "shm,read_order=random,write_order=ascending",
        "shm,ud_drop=0,ud_dup=1,ud_delay=0.5,ud_delay_ns=1000,seed=18446744073709551615",
        "shm,pause_node=0,pause_at_ms=0,pause_ms=1", "shm,pause_node=7,pause_ms=86400000,latency_ns=100"}) {
    auto dev = open_device(devargs, oo);
    EXPECT_TRUE(dev.ok()) << devargs << ": " << dev.error().message;
  }
}

TEST(DeviceOpen, UnknownDriverIsNamed) { EXPECT_THAT(open_error("nosuchnic,x=1"), HasSubstr("nosuchnic")); }

TEST(DeviceOpen, BadFabricNameIsRefused) {
  OpenOptions oo;
  oo.fabric = "../etc";
  EXPECT_THAT(open_error("shm", oo), HasSubstr("fabric"));
}

TEST(DeviceOpen, CapsReflectDevargs) {
  OpenOptions oo;
  oo.node_id = 3;
  oo.fabric = "caps" + std::to_string(getpid());
  auto dev = open_device("shm,latency_ns=1500,bw_gbps=25,mtu=8192", oo);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  const DeviceCaps& c = (*dev)->caps();
  EXPECT_EQ(c.driver, "shm");
  EXPECT_EQ(c.name, "shm:node3");
  EXPECT_EQ(c.latency_ns, 1500u);
  EXPECT_EQ(c.bw_gbps, 25.0);
  EXPECT_EQ(c.max_msg_size, 8192u);
  EXPECT_TRUE(c.atomics_coherent_with_cpu) << "atomics=cpu is the default";
  EXPECT_GT(c.max_inline, 0u);
  EXPECT_GT(c.max_send_wr, 0u);
  EXPECT_GT(c.max_recv_wr, 0u);
  EXPECT_GT(c.max_cqe, 0u);
}

// atomics=hca: remote atomics not coherent with CPU atomics, as the caps say
// (doc/drivers.md); atomics=cpu says what the default is.
TEST(DeviceOpen, AtomicsDevargSetsTheCoherenceCap) {
  OpenOptions oo;
  oo.fabric = "atomics" + std::to_string(getpid());
  auto hca = open_device("shm,atomics=hca", oo);
  ASSERT_TRUE(hca.ok()) << hca.error().message;
  EXPECT_FALSE((*hca)->caps().atomics_coherent_with_cpu);
  oo.node_id = 1;
  auto cpu = open_device("shm,atomics=cpu", oo);
  ASSERT_TRUE(cpu.ok()) << cpu.error().message;
  EXPECT_TRUE((*cpu)->caps().atomics_coherent_with_cpu);
}

TEST(DeviceOpen, ANodeCanBeOpenOnlyOnce) {
  OpenOptions oo;
  oo.node_id = 2;
  oo.fabric = "once" + std::to_string(getpid());
  auto first = open_device("shm", oo);
  ASSERT_TRUE(first.ok()) << first.error().message;
  std::string e = open_error("shm", oo);
  EXPECT_THAT(e, HasSubstr("node 2 of fabric " + oo.fabric + " is already in use by pid " + std::to_string(getpid())));
  first->reset();
  EXPECT_TRUE(open_device("shm", oo).ok()) << "closing must free the node";
}

TEST(DeviceOpen, LimitsAreEnforcedWithClearErrors) {
  OpenOptions oo;
  oo.fabric = "lim" + std::to_string(getpid());
  auto dev = open_device("shm", oo);
  ASSERT_TRUE(dev.ok());
  EXPECT_FALSE((*dev)->create_cq(0).ok());
  auto cq = (*dev)->create_cq(8);
  ASSERT_TRUE(cq.ok());
  QpInit init;
  init.send_cq = cq->get();
  init.max_send_wr = 16;  // more than the CQ can hold
  auto qp = (*dev)->create_qp(init);
  ASSERT_FALSE(qp.ok());
  EXPECT_THAT(qp.error().message, HasSubstr("CQ"));
  init.max_send_wr = 8;
  init.max_inline = (*dev)->caps().max_inline + 1;
  EXPECT_FALSE((*dev)->create_qp(init).ok());
  init.max_inline = 0;
  init.send_cq = nullptr;
  EXPECT_FALSE((*dev)->create_qp(init).ok());
  EXPECT_FALSE((*dev)->reg_mr(nullptr, 10, kAccessAll).ok());
  char buf[64];
  EXPECT_FALSE((*dev)->reg_mr(buf, sizeof buf, kRemoteWrite).ok()) << "remote write without local write";
}

}  // namespace
}  // namespace rdtx::rdma::test
