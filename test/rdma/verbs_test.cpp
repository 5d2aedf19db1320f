// The verbs driver where it can run anywhere: devargs errors name the key,
// opening without the device says what is missing (this test passes on a
// machine with no RDMA device and on one with devices), the help text lists
// every key, and the pure pieces (QP address encoding, GID choice, status
// mapping) do what the driver relies on. The data path is covered by the
// conformance suite's verbs topologies where a device exists.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "drivers/rdma/verbs/address_wire.hpp"
#include "drivers/rdma/verbs/gid.hpp"
#include "drivers/rdma/verbs/stall_watch.hpp"
#include "drivers/rdma/verbs/verbs_config.hpp"
#include "drivers/rdma/verbs/verbs_status.hpp"
#include "rdma/driver.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::verbs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string open_error(const std::string& devargs) {
  auto dev = open_device(devargs);
  return dev.ok() ? std::string("(opened)") : dev.error().message;
}

// The names of the RDMA devices this machine has (none on the CI VM).
std::vector<std::string> device_names() {
  std::vector<std::string> names;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list != nullptr && i < n; ++i) names.emplace_back(ibv_get_device_name(list[i]));
  if (list != nullptr) ibv_free_device_list(list);
  return names;
}

TEST(VerbsDevargs, UnknownKeyIsNamedWithTheValidOnes) {
  std::string e = open_error("verbs,bogus=1");
  EXPECT_THAT(e, HasSubstr("bogus"));
  for (const char* key : {"dev", "port", "gid_index", "huge", "timeout", "retry_cnt"}) EXPECT_THAT(e, HasSubstr(key));
}

TEST(VerbsDevargs, BadValuesAreNamed) {
  EXPECT_THAT(open_error("verbs,port=abc"), HasSubstr("port=abc"));
  EXPECT_THAT(open_error("verbs,port=0"), HasSubstr("port=0"));
  EXPECT_THAT(open_error("verbs,port=256"), HasSubstr("port=256"));
  EXPECT_THAT(open_error("verbs,gid_index=-1"), HasSubstr("gid_index=-1"));
  EXPECT_THAT(open_error("verbs,gid_index=first"), HasSubstr("gid_index=first"));
  EXPECT_THAT(open_error("verbs,huge=maybe"), HasSubstr("huge=maybe"));
  EXPECT_THAT(open_error("verbs,timeout=32"), HasSubstr("timeout=32"));
  EXPECT_THAT(open_error("verbs,retry_cnt=8"), HasSubstr("retry_cnt=8"));
  EXPECT_THAT(open_error("verbs,dev="), HasSubstr("dev="));
  EXPECT_THAT(open_error("verbs,port"), HasSubstr("port"));
}

TEST(VerbsDevargs, ValuesAreParsed) {
  auto cfg = VerbsConfig::parse("verbs,dev=mlx5_1,port=2,gid_index=3,huge=off,timeout=18,retry_cnt=5");
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  EXPECT_EQ(cfg->dev, "mlx5_1");
  EXPECT_EQ(cfg->port, 2u);
  EXPECT_EQ(cfg->gid_index, 3);
  EXPECT_EQ(cfg->huge, HugePages::kOff);
  EXPECT_EQ(cfg->timeout, 18);
  EXPECT_EQ(cfg->retry_cnt, 5);
  auto def = VerbsConfig::parse("verbs");
  ASSERT_TRUE(def.ok());
  EXPECT_EQ(def->dev, "");
  EXPECT_EQ(def->port, 1u);
  EXPECT_EQ(def->gid_index, VerbsConfig::kAutoGid);
  EXPECT_EQ(def->huge, HugePages::kAuto);
  auto autogid = VerbsConfig::parse("verbs,gid_index=auto,huge=on");
  ASSERT_TRUE(autogid.ok());
  EXPECT_EQ(autogid->gid_index, VerbsConfig::kAutoGid);
  EXPECT_EQ(autogid->huge, HugePages::kOn);
}

TEST(VerbsDevargs, ConformanceDevargsFromTheEnvironmentParse) {
  // The conformance suite skips a verbs topology it cannot open, so a typo
  // in RDTX_VERBS_DEVARGS would pass unnoticed there: it fails here.
  const char* env = std::getenv("RDTX_VERBS_DEVARGS");
  if (env == nullptr || *env == '\0') GTEST_SKIP() << "RDTX_VERBS_DEVARGS is not set";
  auto cfg = VerbsConfig::parse(env);
  EXPECT_TRUE(cfg.ok()) << "RDTX_VERBS_DEVARGS: " << cfg.error().message;
}

TEST(VerbsOpen, ErrorNamesWhatIsMissing) {
  const std::vector<std::string> names = device_names();
  if (names.empty()) {
    // This machine: no device at all. The message is the one the
    // conformance suite's verbs topologies skip with.
    EXPECT_THAT(
        open_error("verbs"),
        HasSubstr("no RDMA device: ibv_get_device_list returned 0 devices; see doc/deployment.md for Soft-RoCE"));
    std::string e = open_error("verbs,dev=mlx5_0");
    EXPECT_THAT(e, HasSubstr("dev=mlx5_0"));
    EXPECT_THAT(e, HasSubstr("no RDMA device"));
  } else {
    // A machine with devices: a wrong name is named, with the ones that exist.
    std::string e = open_error("verbs,dev=rdtx_no_such_device");
    EXPECT_THAT(e, HasSubstr("rdtx_no_such_device"));
    for (const std::string& n : names) EXPECT_THAT(e, HasSubstr(n));
    std::string p = open_error("verbs,dev=" + names[0] + ",port=200");
    EXPECT_THAT(p, HasSubstr("port 200 does not exist"));
  }
}

TEST(VerbsOpen, DevargsAreCheckedBeforeLookingForADevice) {
  // Wherever it runs, a typo is reported as a typo, not as a missing device.
  std::string e = open_error("verbs,gid=3");
  EXPECT_THAT(e, HasSubstr("unknown key 'gid'"));
  EXPECT_THAT(e, Not(HasSubstr("no RDMA device")));
}

TEST(VerbsDriver, HelpListsEveryKey) {
  const Driver* verbs = nullptr;
  for (const Driver* d : drivers())
    if (std::string(d->name) == "verbs") verbs = d;
  ASSERT_NE(verbs, nullptr) << "the verbs driver is not registered";
  for (const char* key : {"dev=", "port=", "gid_index=", "huge=", "timeout=", "retry_cnt="})
    EXPECT_THAT(verbs->help, HasSubstr(key));
}

TEST(VerbsAddress, RoundTripsEveryField) {
  AddressWire w;
  w.type = QpType::kUd;
  w.link = LinkLayer::kEthernet;
  w.mtu = IBV_MTU_4096;
  w.lid = 0xbeef;
  w.qpn = 0xabcdef;
  w.psn = 0x123456;
  w.qkey = 0x11223344;
  w.node_id = 7;
  for (int i = 0; i < 16; ++i) w.gid[i] = static_cast<uint8_t>(0xa0 + i);
  QpAddress a = w.encode();
  // Big-endian on the wire, whatever the host: another machine reads it.
  EXPECT_EQ(a.bytes[10], 0x00);
  EXPECT_EQ(a.bytes[11], 0xab);
  EXPECT_EQ(a.bytes[13], 0xef);
  AddressWire back;
  ASSERT_TRUE(AddressWire::decode(a, &back));
  EXPECT_EQ(back.type, QpType::kUd);
  EXPECT_EQ(back.link, LinkLayer::kEthernet);
  EXPECT_EQ(back.mtu, IBV_MTU_4096);
  EXPECT_EQ(back.lid, 0xbeef);
  EXPECT_EQ(back.qpn, 0xabcdefu);
  EXPECT_EQ(back.psn, 0x123456u);
  EXPECT_EQ(back.qkey, 0x11223344u);
  EXPECT_EQ(back.node_id, 7u);
  EXPECT_EQ(std::memcmp(back.gid, w.gid, 16), 0);
}

TEST(VerbsAddress, ForeignAndCorruptAddressesAreRejected) {
  AddressWire w;
  w.mtu = IBV_MTU_1024;
  w.qpn = 5;
  AddressWire out;
  ASSERT_TRUE(AddressWire::decode(w.encode(), &out));
  QpAddress zero;
  EXPECT_FALSE(AddressWire::decode(zero, &out));
  QpAddress garbage;
  std::memset(garbage.bytes, 0xab, sizeof garbage.bytes);
  EXPECT_FALSE(AddressWire::decode(garbage, &out));
  // An shm address (magic "RDSH", little-endian) is not a verbs one.
  QpAddress shm;
  const uint32_t shm_magic = 0x4853'4452;
  std::memcpy(shm.bytes, &shm_magic, 4);
  EXPECT_FALSE(AddressWire::decode(shm, &out));
  QpAddress bad_mtu = w.encode();
  bad_mtu.bytes[7] = 9;
  EXPECT_FALSE(AddressWire::decode(bad_mtu, &out));
  QpAddress tail = w.encode();
  tail.bytes[47] = 1;
  EXPECT_FALSE(AddressWire::decode(tail, &out)) << "unused bytes must be zero";
}

GidEntry gid(uint32_t index, GidType type, std::vector<uint8_t> raw) {
  GidEntry e;
  e.index = index;
  e.type = type;
  std::memcpy(e.raw, raw.data(), 16);
  return e;
}

TEST(VerbsGid, AutoPrefersRoceV2Ipv4) {
  const std::vector<uint8_t> link_local = {0xfe, 0x80, 0,    0,    0,    0,    0,    0,
                                           0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55};
  const std::vector<uint8_t> v4 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 7};
  const std::vector<uint8_t> global6 = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const std::vector<uint8_t> zero(16, 0);
  // A typical Soft-RoCE / mlx5 table: v1 and v2 of each address.
  std::vector<GidEntry> table = {gid(0, GidType::kRoceV1, link_local), gid(1, GidType::kRoceV2, link_local),
                                 gid(2, GidType::kRoceV1, v4),         gid(3, GidType::kRoceV2, v4),
                                 gid(4, GidType::kRoceV2, global6),    gid(5, GidType::kRoceV2, zero)};
  EXPECT_EQ(pick_gid(table), 3);
  table.erase(table.begin() + 3);
  EXPECT_EQ(pick_gid(table), 4) << "then a global IPv6 RoCE v2 GID";
  table.erase(table.begin() + 3);
  EXPECT_EQ(pick_gid(table), 1) << "then link-local RoCE v2";
  EXPECT_EQ(pick_gid({gid(0, GidType::kRoceV1, link_local)}), 0);
  EXPECT_EQ(pick_gid({gid(0, GidType::kRoceV2, zero)}), -1) << "an empty GID is never chosen";
  EXPECT_EQ(pick_gid({}), -1);
  EXPECT_TRUE(gid_is_ipv4_mapped(table[2].raw));
  EXPECT_EQ(format_gid(gid(3, GidType::kRoceV2, v4).raw), "::ffff:10.0.0.7");
}

TEST(VerbsStatus, CompletionStatusesMapToTheApi) {
  EXPECT_EQ(to_status(IBV_WC_SUCCESS), Status::kSuccess);
  EXPECT_EQ(to_status(IBV_WC_LOC_LEN_ERR), Status::kLocalLengthError);
  EXPECT_EQ(to_status(IBV_WC_LOC_PROT_ERR), Status::kLocalProtectionError);
  EXPECT_EQ(to_status(IBV_WC_REM_ACCESS_ERR), Status::kRemoteAccessError);
  EXPECT_EQ(to_status(IBV_WC_REM_INV_REQ_ERR), Status::kRemoteInvalidRequest);
  EXPECT_EQ(to_status(IBV_WC_WR_FLUSH_ERR), Status::kFlushed);
  EXPECT_EQ(to_status(IBV_WC_RETRY_EXC_ERR), Status::kGeneralError);
}

// The stall watchdog's clock: a QP waits from its first look, not from the
// clock's epoch (steady_clock counts from the host's boot). Before the fix a
// QP first looked at with a request outstanding was failed at once on any
// host up longer than the bound: every healthy QP whose round trip spanned a
// watchdog pass (two Soft-RoCE guests: dozens of false stalls a run).
TEST(VerbsStallWatch, AWaitStartsAtTheFirstLookNotAtTheClocksEpoch) {
  constexpr uint64_t kBound = 17'000'000'000;         // 17 s
  constexpr uint64_t kUptime = 3'600'000'000'000;     // an hour after boot
  StallWatch w;
  EXPECT_EQ(w.look(kUptime, kBound, /*waiting=*/true, /*retired=*/0), 0u) << "a first look is no stall";
  EXPECT_EQ(w.look(kUptime + kBound - 1, kBound, true, 0), 0u);
  EXPECT_EQ(w.look(kUptime + kBound, kBound, true, 0), kBound) << "a bound with no completion is a stall";
  EXPECT_EQ(w.look(kUptime + kBound + 1, kBound, true, 0), 0u) << "once per stall";
  EXPECT_EQ(w.look(kUptime + 2 * kBound, kBound, true, 0), kBound) << "and again after another bound";
}

TEST(VerbsStallWatch, ACompletionOrNothingOutstandingStartsTheWaitAgain) {
  constexpr uint64_t kBound = 1'000;
  StallWatch w;
  EXPECT_EQ(w.look(100, kBound, true, 0), 0u);
  EXPECT_EQ(w.look(100 + kBound - 1, kBound, true, 5), 0u) << "requests retired: progress";
  EXPECT_EQ(w.look(100 + 2 * kBound - 2, kBound, true, 5), 0u) << "waiting since the completion";
  EXPECT_EQ(w.look(100 + 2 * kBound - 1, kBound, true, 5), kBound);
  EXPECT_EQ(w.look(200 + 4 * kBound, kBound, false, 5), 0u) << "nothing outstanding";
  EXPECT_EQ(w.look(200 + 5 * kBound - 1, kBound, true, 5), 0u) << "waiting since the idle look";
  EXPECT_EQ(w.look(200 + 5 * kBound, kBound, true, 5), kBound);
}

}  // namespace
}  // namespace rdtx::rdma::verbs
