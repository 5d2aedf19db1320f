// [txn] configuration: pipelines a protocol does not support are rejected
// at load time with the key, where it was set, and the allowed values.
#include <gtest/gtest.h>

#include "txn/protocol.hpp"
#include "txn/options.hpp"

using namespace rdtx;

namespace {
Result<config::Config> load(const std::string& toml, std::vector<std::string> sets = {}) {
  config::Schema s;
  txn::add_schema(s, txn::protocols());
  return config::Config::parse(s, toml, "t.toml", sets);
}
std::string error_of(const std::string& toml, std::vector<std::string> sets = {}) {
  auto c = load(toml, sets);
  return c.ok() ? "" : c.error().message;
}
}  // namespace

TEST(TxnOptions, SupportedPipelinesLoad) {
  auto c = load("[txn]\nprotocol = \"occ\"\ncoroutines = 4\n[txn.pipeline]\nfetch = \"hybrid\"\nlock = \"rpc\"\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  txn::Options o = txn::options_from(*c);
  EXPECT_EQ(o.protocol, "occ");
  EXPECT_EQ(o.coroutines, 4u);
  EXPECT_EQ(o.stage(txn::Stage::kFetch), txn::Primitive::kHybrid);
  EXPECT_EQ(o.stage(txn::Stage::kLock), txn::Primitive::kRpc);
  EXPECT_EQ(o.stage(txn::Stage::kCommit), txn::Primitive::kOneSided);
  EXPECT_TRUE(load("[txn]\nprotocol = \"nowait\"\n[txn.pipeline]\nfetch = \"rpc\"\ncommit = \"rpc\"\n").ok());
}

TEST(TxnOptions, StageAProtocolLacksIsRejected) {
  std::string e = error_of("[txn]\nprotocol = \"nowait\"\n[txn.pipeline]\nvalidate = \"rpc\"\n");
  EXPECT_NE(e.find("txn.pipeline.validate = 'rpc' (t.toml:4:1) does not apply to protocol 'nowait' (its stages: "
                   "fetch, commit)"),
            std::string::npos)
      << e;
}

TEST(TxnOptions, UnsupportedPrimitiveNamesAllowedValues) {
  std::string e = error_of("[txn]\nprotocol = \"waitdie\"\n", {"txn.pipeline.fetch=hybrid"});
  EXPECT_NE(e.find("txn.pipeline.fetch = 'hybrid' (--set) is not supported by protocol 'waitdie' (allowed: "
                   "onesided, rpc)"),
            std::string::npos)
      << e;
}

// The log stage is the engine's: every replicable protocol takes it one-
// sided or by RPC (whether cluster.replicas asks for it is the app's check).
TEST(TxnOptions, LogStageIsOneSidedRpcOrOff) {
  for (const char* p : {"occ", "nowait", "waitdie", "mvcc", "sundial"})
    for (const char* v : {"onesided", "rpc", "off"}) {
      auto c = load(std::string("[txn]\nprotocol = \"") + p + "\"\n", {std::string("txn.pipeline.log=") + v});
      EXPECT_TRUE(c.ok()) << p << " " << v << ": " << c.error().message;
    }
  std::string e = error_of("", {"txn.pipeline.log=hybrid"});
  EXPECT_NE(e.find("txn.pipeline.log = 'hybrid' (--set) is not a log primitive (allowed: onesided, rpc, off)"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of("", {"txn.log_ring_kb=100"}).find("must be a power of two"), std::string::npos);
  auto c = load("", {"txn.pipeline.log=rpc", "txn.log_ring_kb=64"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(txn::options_from(*c).stage(txn::Stage::kLog), txn::Primitive::kRpc);
  EXPECT_EQ(txn::options_from(*c).log_ring_bytes, 64u << 10);
}

// txn.options.read_locks: exclusive by default; shared for nowait and
// waitdie only, with fetch and commit in one form (a read lock is given
// back the way it was taken).
TEST(TxnOptions, SharedReadLocksOnlyWhereTheyApply) {
  auto d = load("[txn]\nprotocol = \"nowait\"\n");
  ASSERT_TRUE(d.ok()) << d.error().message;
  EXPECT_EQ(txn::options_from(*d).read_locks, txn::ReadLocks::kExclusive);
  for (const char* p : {"nowait", "waitdie"})
    for (const char* prim : {"onesided", "rpc"}) {
      auto c = load(std::string("[txn]\nprotocol = \"") + p + "\"\n",
                    {"txn.options.read_locks=shared", std::string("txn.pipeline.fetch=") + prim,
                     std::string("txn.pipeline.commit=") + prim});
      ASSERT_TRUE(c.ok()) << p << " " << prim << ": " << c.error().message;
      EXPECT_EQ(txn::options_from(*c).read_locks, txn::ReadLocks::kShared);
    }
  for (const char* p : {"occ", "mvcc", "sundial", "2pl"}) {
    std::string e = error_of(std::string("[txn]\nprotocol = \"") + p + "\"\n", {"txn.options.read_locks=shared"});
    EXPECT_NE(e.find(std::string("txn.options.read_locks = 'shared' (--set): protocol '") + p +
                     "' has no shared read locks (nowait and waitdie have)"),
              std::string::npos)
        << e;
  }
  std::string e = error_of("[txn]\nprotocol = \"waitdie\"\n",
                           {"txn.options.read_locks=shared", "txn.pipeline.fetch=rpc"});
  EXPECT_NE(e.find("txn.options.read_locks = 'shared' (--set) needs txn.pipeline.fetch (rpc, --set) and "
                   "txn.pipeline.commit (onesided, default) to be the same primitive"),
            std::string::npos)
      << e;
}

TEST(TxnOptions, UnknownProtocolListsTheKnownOnes) {
  std::string e = error_of("[txn]\nprotocol = \"no-such-protocol\"\n");
  EXPECT_NE(e.find("nowait"), std::string::npos) << e;
  EXPECT_NE(e.find("occ"), std::string::npos) << e;
}

// txn.isolation: a level the protocol offers loads (2pl at read committed),
// one it does not is refused with the key, where it was set and the level
// the protocol runs at.
TEST(TxnOptions, IsolationLevelMustBeOneTheProtocolOffers) {
  auto c = load("[txn]\nprotocol = \"2pl\"\nisolation = \"read_committed\"\n");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(txn::options_from(*c).isolation, txn::Isolation::kReadCommitted);
  EXPECT_EQ(txn::options_from(*load("[txn]\nprotocol = \"2pl\"\n")).isolation, txn::Isolation::kSerializable);
  auto rr = load("[txn]\nprotocol = \"2pl\"\nisolation = \"repeatable_read\"\n");
  ASSERT_TRUE(rr.ok()) << rr.error().message;
  EXPECT_EQ(txn::options_from(*rr).isolation, txn::Isolation::kRepeatableRead);
  std::string e = error_of("[txn]\nprotocol = \"occ\"\n", {"txn.isolation=read_committed"});
  EXPECT_NE(e.find("txn.isolation = 'read_committed' (--set): protocol 'occ' runs at serializable only"),
            std::string::npos)
      << e;
  e = error_of("[txn]\nprotocol = \"to\"\n", {"txn.isolation=repeatable_read"});
  EXPECT_NE(e.find("txn.isolation = 'repeatable_read' (--set): protocol 'to' runs at serializable only"),
            std::string::npos)
      << e;
}

// txn.isolation's default, "protocol": each protocol's own level (namdb's is
// snapshot isolation); namdb refuses serializable by name, and "snapshot"
// is refused by a serializable protocol.
TEST(TxnOptions, DefaultIsolationIsTheProtocolsOwn) {
  auto n = load("[txn]\nprotocol = \"namdb\"\n");
  ASSERT_TRUE(n.ok()) << n.error().message;
  EXPECT_EQ(txn::options_from(*n).isolation, txn::Isolation::kSnapshot);
  auto s = load("[txn]\nprotocol = \"namdb\"\nisolation = \"snapshot\"\n");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(txn::options_from(*s).isolation, txn::Isolation::kSnapshot);
  EXPECT_EQ(txn::options_from(*load("[txn]\nprotocol = \"occ\"\n")).isolation, txn::Isolation::kSerializable);
  std::string e = error_of("[txn]\nprotocol = \"namdb\"\n", {"txn.isolation=serializable"});
  EXPECT_NE(e.find("txn.isolation = 'serializable' (--set): protocol 'namdb' runs at snapshot isolation only"),
            std::string::npos)
      << e;
  e = error_of("[txn]\nprotocol = \"occ\"\n", {"txn.isolation=snapshot"});
  EXPECT_NE(e.find("protocol 'occ' runs at serializable only"), std::string::npos) << e;
}
