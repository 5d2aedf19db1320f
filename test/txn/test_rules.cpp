// Protocol rules, each stepped by hand in one thread (stepper.hpp): two
// coordinators (sometimes three) of node 0 run scripted transactions on
// records of node 1 (and node 0), interleaved pass by pass, so that each
// rule is met in exactly one way and its outcome is fixed. Every rule is
// tested with one-sided and with RPC stages. Abort reasons are compared by
// their keys in the protocol's names, never by enum value.
//
//   OCC       a read whose version changed fails validation (read-only and
//             read-write); a record locked at fetch aborts the reader, and a
//             lock held at the lock stage aborts the writer
//   WAITDIE   the older waits for the younger (and gets the lock when it
//             commits); the younger dies
//   NOWAIT    a conflict aborts, and every lock the attempt took is released
//   MVCC      a write below a read timestamp is too late; a read is served
//             the version below its timestamp, passes a younger writer's
//             lock and not an older one's; a fifth version replaces the
//             oldest, and a read below every version left overflows
//   SUNDIAL   a reader whose lease covers its commit timestamp commits
//             although a writer replaced the version since (ordered before
//             it); an expired lease is renewed (rts raised to tts); renewal
//             fails while another transaction holds the lock, or once the
//             version changed; a loaded tuple's copy is renewed once, which
//             gives it a checksum
//   fences    a lock request whose caller gave up is never granted: parked
//             on WAITDIE's waiting list when the call times out, or (any
//             protocol, RPC) arriving after the cancel of its attempt
#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "test/txn/stepper.hpp"
#include "txn/stages/toolkit.hpp"
#include "txn/stages/lock_wait_list.hpp"
#include "txn/stages/owner_status.hpp"

// Names, not bytes, in failure messages (found by argument-dependent lookup).
namespace rdtx::txn {
void PrintTo(Primitive p, std::ostream* os) { *os << to_string(p); }
void PrintTo(Stage s, std::ostream* os) { *os << to_string(s); }
}  // namespace rdtx::txn

using namespace rdtx;
using namespace rdtx::testing_stepper;
using txn::make_txn_id;

namespace {

constexpr Key kX = kKeysPerNode + 0;  // node 1: remote for the coordinators of node 0
constexpr Key kY = 1;                 // node 0: reached through loopback

std::string prim_name(const testing::TestParamInfo<Primitive>& i) { return txn::to_string(i.param); }
const auto kPrimitives = testing::Values(Primitive::kOneSided, Primitive::kRpc);

std::unique_ptr<Stepper> make(StepConfig cfg) {
  auto s = Stepper::create(cfg);
  EXPECT_TRUE(s.ok()) << s.error().message;
  return s.ok() ? std::move(*s) : nullptr;
}

// ---------------------------------------------------------------- OCC

// A stepped cluster running protocol `Name` with the test's primitive.
template <const char* Name>
class ProtocolRule : public testing::TestWithParam<Primitive> {
 protected:
  void SetUp() override {
    fx = make({Name, GetParam()});
    ASSERT_NE(fx, nullptr);
  }
  std::unique_ptr<Stepper> fx;
};

constexpr char kOcc[] = "occ";
using OccRule = ProtocolRule<kOcc>;

// T1 reads x; T2 writes x and commits; T1 commits: validation fails.
TEST_P(OccRule, ReadWhoseVersionChangedFailsValidation) {
  Script& t1 = fx->script({R(kX), Fetch(), Pause("fetched"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "fetched"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "validation");
  EXPECT_EQ(t1.stage(), Stage::kValidate);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// The same for a read-write record: validated under its lock at the lock
// stage, and T1's write is not installed.
TEST_P(OccRule, ReadWriteRecordWhoseVersionChangedFailsValidation) {
  Script& t1 = fx->script({W(kX), Fetch(), Pause("fetched"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "fetched"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "validation");
  EXPECT_EQ(t1.stage(), Stage::kLock);
  EXPECT_EQ(fx->counter(kX), kInitial + 1) << "only T2's increment may be installed";
  EXPECT_EQ(fx->lock_word(kX), 0u) << "T1's lock must be released";
}

// T2 holds x's lock (stepped to just after its lock stage) while T1 fetches
// x: T1 aborts at once.
TEST_P(OccRule, RecordLockedAtReadAbortsTheReader) {
  Script& t2 = fx->script({W(kX), Fetch(), Commit()}).pause_after(Stage::kLock);
  Script& t1 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "after lock"));
  ASSERT_EQ(fx->lock_word(kX), t2.id());
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "locked_at_read");
  EXPECT_EQ(t1.stage(), Stage::kFetch);
  EXPECT_EQ(fx->lock_word(kX), t2.id()) << "the reader must not touch the holder's lock";
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// T1 fetched x to write it; T2 takes x's lock first; T1's lock stage finds
// it held and aborts, leaving T2's lock alone.
TEST_P(OccRule, LockHeldAtLockStageAbortsTheWriter) {
  Script& t1 = fx->script({W(kX), W(kY), Fetch(), Pause("fetched"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()}).pause_after(Stage::kLock);
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "fetched"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "after lock"));
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "lock_conflict");
  EXPECT_EQ(t1.stage(), Stage::kLock);
  EXPECT_EQ(fx->lock_word(kX), t2.id());
  EXPECT_EQ(fx->lock_word(kY), 0u) << "the lock T1 did take must be released";
  EXPECT_EQ(fx->counter(kY), kInitial);
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rules, OccRule, kPrimitives, prim_name);

// ---------------------------------------------------------------- MVCC

// Coordinators 0, 1, 2 of node 0 took their timestamps in that order; a
// coordinator that finished a script takes a new one, the youngest.
constexpr char kMvcc[] = "mvcc";
using MvccRule = ProtocolRule<kMvcc>;

// A young transaction reads x (rts = its tts); an older one then writes x:
// its version would come before a read that did not see it. Too late.
TEST_P(MvccRule, WriteBelowAReadTimestampIsTooLate) {
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  Script& young = fx->script({R(kX), Fetch(), Commit()});
  Script& old = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, young));
  ASSERT_TRUE(fx->run_until_done(young));
  EXPECT_TRUE(young.committed()) << fx->reason_key(young);
  ASSERT_TRUE(fx->start(0, 0, old));
  ASSERT_TRUE(fx->run_until_done(old));
  EXPECT_FALSE(old.committed());
  EXPECT_EQ(fx->reason_key(old), "write_too_late");
  EXPECT_EQ(fx->counter(kX), kInitial);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// A young transaction writes x; an older one reads x afterwards and is
// served the version below its timestamp (no abort); a newer one sees the
// young one's version.
TEST_P(MvccRule, ReadIsServedTheVersionBelowItsTimestamp) {
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  Script& young = fx->script({W(kX), Fetch(), Commit()});
  Script& old = fx->script({R(kX), Fetch(), Commit()});
  Script& newer = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, young));
  ASSERT_TRUE(fx->run_until_done(young));
  EXPECT_TRUE(young.committed()) << fx->reason_key(young);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  ASSERT_TRUE(fx->start(0, 0, old));
  ASSERT_TRUE(fx->run_until_done(old));
  EXPECT_TRUE(old.committed()) << fx->reason_key(old);
  ASSERT_EQ(old.reads_seen().size(), 1u);
  EXPECT_EQ(old.reads_seen()[0], kInitial) << "the older read must see the version before the younger write";
  ASSERT_TRUE(fx->start(0, 1, newer));
  ASSERT_TRUE(fx->run_until_done(newer));
  EXPECT_TRUE(newer.committed()) << fx->reason_key(newer);
  ASSERT_EQ(newer.reads_seen().size(), 1u);
  EXPECT_EQ(newer.reads_seen()[0], kInitial + 1);
}

// A write on a tuple another writer holds aborts; the holder commits.
TEST_P(MvccRule, WriteOnALockedTupleAborts) {
  Script& t1 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "holding"));
  EXPECT_EQ(fx->lock_word(kX), t1.timestamp());
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_FALSE(t2.committed());
  EXPECT_EQ(fx->reason_key(t2), "lock_conflict");
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// A reader older than the lock holder reads through the lock (the holder's
// version will come after it); the holder still commits.
TEST_P(MvccRule, OlderReadPassesAYoungerWritersLock) {
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  Script& young = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& old = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, young));
  ASSERT_TRUE(fx->run_until_paused(young, "holding"));
  ASSERT_TRUE(fx->start(0, 0, old));
  ASSERT_TRUE(fx->run_until_done(old));
  EXPECT_TRUE(old.committed()) << fx->reason_key(old);
  ASSERT_EQ(old.reads_seen().size(), 1u);
  EXPECT_EQ(old.reads_seen()[0], kInitial);
  fx->resume(young);
  ASSERT_TRUE(fx->run_until_done(young));
  EXPECT_TRUE(young.committed()) << fx->reason_key(young);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
}

// A reader younger than the lock holder may need the holder's version: it
// waits (bounded) and, the holder staying, aborts; it never reads around it.
TEST_P(MvccRule, YoungerReadDoesNotPassAnOlderWritersLock) {
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  Script& old = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& young = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, old));
  ASSERT_TRUE(fx->run_until_paused(old, "holding"));
  ASSERT_TRUE(fx->start(0, 1, young));
  ASSERT_TRUE(fx->run_until_done(young));
  EXPECT_FALSE(young.committed());
  EXPECT_EQ(fx->reason_key(young), "read_locked");
  fx->resume(old);
  ASSERT_TRUE(fx->run_until_done(old));
  EXPECT_TRUE(old.committed()) << fx->reason_key(old);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
}

// Four versions fit: after three writes an old reader still finds the loaded
// version; a fourth write replaces it (the oldest slot), and an old reader
// then finds no version below its timestamp.
TEST_P(MvccRule, ReadBelowEveryVersionInTheSlotsOverflows) {
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 2));
  ASSERT_LT(fx->idle_ts(0, 1), fx->idle_ts(0, 2));
  // Coordinator 2 writes; a first script (a read of y) makes its timestamp
  // younger than those of coordinators 0 and 1, the old readers.
  Script& warm = fx->script({R(kY), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 2, warm));
  ASSERT_TRUE(fx->run_until_done(warm));
  for (int k = 0; k < 3; ++k) {
    Script& w = fx->script({W(kX), Fetch(), Commit()});
    ASSERT_TRUE(fx->start(0, 2, w));
    ASSERT_TRUE(fx->run_until_done(w));
    ASSERT_TRUE(w.committed()) << fx->reason_key(w);
  }
  Script& r1 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, r1));
  ASSERT_TRUE(fx->run_until_done(r1));
  EXPECT_TRUE(r1.committed()) << fx->reason_key(r1);
  ASSERT_EQ(r1.reads_seen().size(), 1u);
  EXPECT_EQ(r1.reads_seen()[0], kInitial);
  Script& w4 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 2, w4));
  ASSERT_TRUE(fx->run_until_done(w4));
  ASSERT_TRUE(w4.committed()) << fx->reason_key(w4);
  EXPECT_EQ(fx->counter(kX), kInitial + 4);
  Script& r2 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, r2));
  ASSERT_TRUE(fx->run_until_done(r2));
  EXPECT_FALSE(r2.committed());
  EXPECT_EQ(fx->reason_key(r2), "version_overflow");
}

INSTANTIATE_TEST_SUITE_P(Rules, MvccRule, kPrimitives, prim_name);

// ---------------------------------------------------------------- WAITDIE

class WaitDieRule : public testing::TestWithParam<Primitive> {};

// Coordinators 0, 1, 2 of node 0 took their timestamps in that order: T1
// (coordinator 0) is the oldest. T2 holds x; T1 asks for it and waits; T2
// commits and T1 gets x; T3 (younger than T1) asks for it and dies.
TEST_P(WaitDieRule, OlderWaitsYoungerDies) {
  auto fx = make({"waitdie", GetParam()});
  ASSERT_NE(fx, nullptr);
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 2));
  Script& t2 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t1 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t3 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "holding"));
  ASSERT_EQ(fx->lock_word(kX), t2.timestamp());

  ASSERT_TRUE(fx->start(0, 0, t1));
  // The older waits: many passes later it is still in its fetch, neither
  // aborted nor holding x.
  EXPECT_FALSE(fx->run_until([&] { return t1.done() || !t1.paused_at().empty(); }, 200));
  ASSERT_TRUE(t1.started());
  ASSERT_LT(t1.timestamp(), t2.timestamp());
  EXPECT_EQ(t1.stage(), Stage::kFetch);
  EXPECT_EQ(fx->lock_word(kX), t2.timestamp());

  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  ASSERT_TRUE(fx->run_until_paused(t1, "holding")) << "the waiter must get the lock once the holder commits"
                                                   << (t1.done() ? ", it aborted: " + fx->reason_key(t1) : "");
  EXPECT_EQ(fx->lock_word(kX), t1.timestamp());
  EXPECT_EQ(fx->counter(kX), kInitial + 1) << "T1 holds x and sees T2's write";

  // The younger dies.
  ASSERT_GT(fx->idle_ts(0, 2), t1.timestamp());
  ASSERT_TRUE(fx->start(0, 2, t3));
  ASSERT_TRUE(fx->run_until_done(t3)) << "the younger must not wait";
  EXPECT_GT(t3.timestamp(), t1.timestamp());
  EXPECT_FALSE(t3.committed());
  EXPECT_EQ(fx->reason_key(t3), "wait_die");
  EXPECT_EQ(fx->lock_word(kX), t1.timestamp());

  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(fx->counter(kX), kInitial + 2);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rules, WaitDieRule, kPrimitives, prim_name);

// ---------------------------------------------------------------- SUNDIAL

constexpr char kSundial[] = "sundial";
using SundialRule = ProtocolRule<kSundial>;

// SUNDIAL's metadata words (cc/sundial/sundial.cpp): lock, wts, rts, checksum.
uint64_t meta_word(Stepper& fx, Key k, int w) {
  uint64_t v;
  std::memcpy(&v, fx.tuple(k) + 8 * w, 8);
  return v;
}
uint64_t wts(Stepper& fx, Key k) { return meta_word(fx, k, 1); }
uint64_t rts(Stepper& fx, Key k) { return meta_word(fx, k, 2); }
uint64_t checksum_word(Stepper& fx, Key k) { return meta_word(fx, k, 3); }

// x gets wts = rts = 1 (T0 writes it). T1 reads x (lease [1, 1]) and pauses;
// T2 writes x and commits at rts + 1 = 2; T1 commits at 1 with no renewal,
// ordered before T2: the read-write conflict costs neither an abort.
TEST_P(SundialRule, ReaderWithinItsLeaseCommitsBeforeTheWriter) {
  Script& t0 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t0));
  ASSERT_TRUE(fx->run_until_done(t0));
  ASSERT_TRUE(t0.committed()) << fx->reason_key(t0);
  ASSERT_EQ(wts(*fx, kX), 1u);
  ASSERT_EQ(rts(*fx, kX), 1u);
  Script& t1 = fx->script({R(kX), Fetch(), Pause("read"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "read"));
  ASSERT_TRUE(fx->start(0, 2, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_EQ(wts(*fx, kX), 2u) << "the writer's tts is above the lease";
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(rts(*fx, kX), 2u) << "no renewal: T1's lease already covered its tts";
  EXPECT_EQ(fx->counter(kX), kInitial + 2);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// x: [1, 1], y: [2, 2]. T1 reads x and writes y: tts = rts(y) + 1 = 3 >
// rts(x), so x's lease is renewed to 3 and y installed at 3.
TEST_P(SundialRule, ExpiredLeaseIsRenewedToTheCommitTimestamp) {
  Script& t0 = fx->script({W(kX), W(kY), Fetch(), Commit()});
  Script& t0b = fx->script({W(kY), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t0));
  ASSERT_TRUE(fx->run_until_done(t0));
  ASSERT_TRUE(fx->start(0, 1, t0b));
  ASSERT_TRUE(fx->run_until_done(t0b));
  ASSERT_TRUE(t0.committed() && t0b.committed());
  ASSERT_EQ(rts(*fx, kX), 1u);
  ASSERT_EQ(rts(*fx, kY), 2u);
  Script& t1 = fx->script({R(kX), W(kY), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 2, t1));
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(wts(*fx, kX), 1u) << "renewal keeps the version";
  EXPECT_EQ(rts(*fx, kX), 3u) << "and extends its lease to tts";
  EXPECT_EQ(wts(*fx, kY), 3u);
  EXPECT_EQ(rts(*fx, kY), 3u);
  EXPECT_EQ(fx->lock_word(kX), 0u);
  EXPECT_EQ(fx->lock_word(kY), 0u);
}

// T1 read x (a loaded tuple: it must be renewed) and holds y; T2 holds x's
// lock. T1's renewal fails (never waits), T1 releases y; T2 commits.
TEST_P(SundialRule, RenewalFailsWhileAnotherTransactionHoldsTheLock) {
  Script& t1 = fx->script({R(kX), W(kY), Fetch(), Pause("fetched"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "fetched"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "holding"));
  ASSERT_EQ(fx->lock_word(kX), t2.timestamp());
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "lease_renewal");
  EXPECT_EQ(t1.stage(), Stage::kValidate);
  EXPECT_EQ(fx->lock_word(kX), t2.timestamp()) << "the renewal must leave the holder's lock alone";
  EXPECT_EQ(fx->lock_word(kY), 0u) << "T1's write lock must be released";
  EXPECT_EQ(fx->counter(kY), kInitial);
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// T1 read x and holds y; T2 replaces x's version and commits. T1's lease
// cannot be renewed (wts changed): T1 aborts and installs nothing.
TEST_P(SundialRule, RenewalFailsOnceTheVersionChanged) {
  Script& t1 = fx->script({R(kX), W(kY), Fetch(), Pause("fetched"), Commit()});
  Script& t2 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "fetched"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "lease_renewal");
  EXPECT_EQ(t1.stage(), Stage::kValidate);
  EXPECT_EQ(fx->counter(kY), kInitial);
  EXPECT_EQ(fx->lock_word(kX), 0u);
  EXPECT_EQ(fx->lock_word(kY), 0u);
}

// A loaded tuple carries no checksum, so a lock-free copy of it is proven
// by a renewal, even at tts 0; the renewal writes the checksum, and the
// next reader needs none.
TEST_P(SundialRule, LoadedTupleIsRenewedOnceAndGetsAChecksum) {
  ASSERT_EQ(checksum_word(*fx, kX), 0u);
  Script& t1 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_NE(checksum_word(*fx, kX), 0u);
  EXPECT_EQ(wts(*fx, kX), 0u);
  EXPECT_EQ(rts(*fx, kX), 0u);
  EXPECT_EQ(fx->lock_word(kX), 0u);
  const uint64_t sum = checksum_word(*fx, kX);
  Script& t2 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_EQ(checksum_word(*fx, kX), sum) << "a proven copy within its lease is not renewed again";
}

INSTANTIATE_TEST_SUITE_P(Rules, SundialRule, kPrimitives, prim_name);

// ---------------------------------------------------------------- NOWAIT

constexpr char kNoWait[] = "nowait";
using NoWaitRule = ProtocolRule<kNoWait>;

// T1 holds x; T2 locks y (an earlier fetch round), then asks for x: T2
// aborts and y is unlocked.
TEST_P(NoWaitRule, ConflictAbortsAndReleasesEveryLockTaken) {
  Script& t1 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t2 = fx->script({W(kY), Fetch(), Pause("holds y"), W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "holding"));
  ASSERT_EQ(fx->lock_word(kX), t1.id());
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "holds y"));
  ASSERT_EQ(fx->lock_word(kY), t2.id());
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_FALSE(t2.committed());
  EXPECT_EQ(fx->reason_key(t2), "lock_conflict");
  EXPECT_EQ(fx->lock_word(kY), 0u) << "the aborted attempt left y locked";
  EXPECT_EQ(fx->counter(kY), kInitial);
  EXPECT_EQ(fx->lock_word(kX), t1.id()) << "the holder's lock must stay";
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

// The same with y and x asked for in one round (one request per owner): y
// is granted on node 0 as x conflicts on node 1, and is released.
TEST_P(NoWaitRule, ConflictInOneRoundReleasesTheOtherOwnersLock) {
  Script& t1 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t2 = fx->script({W(kY), W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "holding"));
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_FALSE(t2.committed());
  EXPECT_EQ(fx->reason_key(t2), "lock_conflict");
  EXPECT_EQ(fx->lock_word(kY), 0u) << "the aborted attempt left y locked";
  EXPECT_EQ(fx->lock_word(kX), t1.id());
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed());
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rules, NoWaitRule, kPrimitives, prim_name);

// ---------------------------------------------------------------- shared read locks

// txn.options.read_locks = shared (doc/txn.md "Shared read locks"): the lock
// word counts readers; a writer holds kExclusiveBit | its lock value.
std::unique_ptr<Stepper> make_shared(const char* protocol, Primitive p) {
  StepConfig cfg{protocol, p};
  cfg.read_locks = txn::ReadLocks::kShared;
  return make(cfg);
}

class SharedReadLockRule : public testing::TestWithParam<Primitive> {};

// T1 and T2 read x: both hold it (count 2). T3 asks to write it and is
// refused (NOWAIT: lock_conflict), the count untouched. Each reader's
// commit gives one back; the last leaves the word free.
TEST_P(SharedReadLockRule, ReadersShareAWriterIsRefusedReleaseRestoresZero) {
  auto fx = make_shared("nowait", GetParam());
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({R(kX), Fetch(), Pause("reading"), Commit()});
  Script& t2 = fx->script({R(kX), R(kY), Fetch(), Pause("reading"), Commit()});
  Script& t3 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "reading"));
  EXPECT_EQ(fx->lock_word(kX), 1u);
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "reading"))
      << (t2.done() ? "the second reader aborted: " + fx->reason_key(t2) : "");
  EXPECT_EQ(fx->lock_word(kX), 2u) << "two readers share x";
  EXPECT_EQ(fx->lock_word(kY), 1u);
  ASSERT_TRUE(fx->start(0, 2, t3));
  ASSERT_TRUE(fx->run_until_done(t3));
  EXPECT_FALSE(t3.committed());
  EXPECT_EQ(fx->reason_key(t3), "lock_conflict");
  EXPECT_EQ(fx->lock_word(kX), 2u) << "the refused writer changed the count";
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_TRUE(fx->run_until([&] { return fx->lock_word(kX) == 1u; })) << fx->lock_word(kX);
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  EXPECT_TRUE(fx->run_until([&] { return fx->lock_word(kX) == 0u && fx->lock_word(kY) == 0u; }))
      << fx->lock_word(kX) << " " << fx->lock_word(kY);
  EXPECT_EQ(fx->counter(kX), kInitial);
}

// T1 writes x (the word: kExclusiveBit | its id); T2 reads x and is
// refused. T2's abort gives back y, which it had read-locked in the same
// round; T1 commits and frees x.
TEST_P(SharedReadLockRule, AReaderIsRefusedWhileAWriterHolds) {
  auto fx = make_shared("nowait", GetParam());
  ASSERT_NE(fx, nullptr);
  Script& t1 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t2 = fx->script({R(kY), R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until_paused(t1, "holding"));
  EXPECT_EQ(fx->lock_word(kX), txn::kExclusiveBit | t1.id());
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_FALSE(t2.committed());
  EXPECT_EQ(fx->reason_key(t2), "lock_conflict");
  EXPECT_EQ(fx->lock_word(kX), txn::kExclusiveBit | t1.id()) << "the holder's lock must stay";
  EXPECT_TRUE(fx->run_until([&] { return fx->lock_word(kY) == 0u; })) << "y left read-locked: " << fx->lock_word(kY);
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  EXPECT_EQ(fx->lock_word(kX), 0u);
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
}

// WAITDIE: a writer cannot know the readers' ages, so it dies even when it
// is older than every one of them (never waiting on readers keeps it free
// of deadlocks).
TEST_P(SharedReadLockRule, WaitDieWriterDiesAgainstReaders) {
  auto fx = make_shared("waitdie", GetParam());
  ASSERT_NE(fx, nullptr);
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  ASSERT_LT(fx->idle_ts(0, 1), fx->idle_ts(0, 2));
  Script& reader = fx->script({R(kX), Fetch(), Pause("reading"), Commit()});
  Script& old_writer = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 2, reader));  // the youngest
  ASSERT_TRUE(fx->run_until_paused(reader, "reading"));
  EXPECT_EQ(fx->lock_word(kX), 1u);
  ASSERT_TRUE(fx->start(0, 0, old_writer));  // the oldest
  ASSERT_TRUE(fx->run_until_done(old_writer)) << "a writer must not wait for readers";
  EXPECT_FALSE(old_writer.committed());
  EXPECT_EQ(fx->reason_key(old_writer), "wait_die");
  EXPECT_EQ(fx->lock_word(kX), 1u);
  fx->resume(reader);
  ASSERT_TRUE(fx->run_until_done(reader));
  EXPECT_TRUE(reader.committed()) << fx->reason_key(reader);
  EXPECT_TRUE(fx->run_until([&] { return fx->lock_word(kX) == 0u; }));
}

// WAITDIE: T2 (coordinator 1) writes x. T1 (older) reads x and waits; T3
// (younger) reads x and dies. T2 commits: T1 gets x shared and reads T2's
// write.
TEST_P(SharedReadLockRule, WaitDieOlderReaderWaitsForAWriterYoungerDies) {
  auto fx = make_shared("waitdie", GetParam());
  ASSERT_NE(fx, nullptr);
  ASSERT_LT(fx->idle_ts(0, 0), fx->idle_ts(0, 1));
  ASSERT_LT(fx->idle_ts(0, 1), fx->idle_ts(0, 2));
  Script& t2 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t1 = fx->script({R(kX), Fetch(), Pause("reading"), Commit()});
  Script& t3 = fx->script({R(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "holding"));
  EXPECT_EQ(fx->lock_word(kX), txn::kExclusiveBit | t2.timestamp());
  ASSERT_TRUE(fx->start(0, 0, t1));
  EXPECT_FALSE(fx->run_until([&] { return t1.done() || !t1.paused_at().empty(); }, 200)) << "the older reader waits";
  ASSERT_TRUE(fx->start(0, 2, t3));
  ASSERT_TRUE(fx->run_until_done(t3)) << "the younger reader must not wait";
  EXPECT_FALSE(t3.committed());
  EXPECT_EQ(fx->reason_key(t3), "wait_die");
  EXPECT_EQ(fx->lock_word(kX), txn::kExclusiveBit | t2.timestamp());
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until_done(t2));
  EXPECT_TRUE(t2.committed()) << fx->reason_key(t2);
  ASSERT_TRUE(fx->run_until_paused(t1, "reading")) << (t1.done() ? "it aborted: " + fx->reason_key(t1) : "");
  EXPECT_EQ(fx->lock_word(kX), 1u);
  fx->resume(t1);
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_TRUE(t1.committed()) << fx->reason_key(t1);
  ASSERT_EQ(t1.reads_seen().size(), 1u);
  EXPECT_EQ(t1.reads_seen()[0], kInitial + 1) << "the reader sees the write it waited for";
  EXPECT_TRUE(fx->run_until([&] { return fx->lock_word(kX) == 0u; }));
}

INSTANTIATE_TEST_SUITE_P(Rules, SharedReadLockRule, kPrimitives, prim_name);

// The configuration refuses shared read locks where they do not apply.
TEST(SharedReadLocks, RefusedWithMixedFetchAndCommit) {
  StepConfig cfg{"nowait", Primitive::kRpc, Primitive::kOneSided};
  cfg.read_locks = txn::ReadLocks::kShared;
  auto s = Stepper::create(cfg);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("released the way it was taken"), std::string::npos) << s.error().message;
}

// ---------------------------------------------------------------- fences

// WAITDIE over RPC, commits one-sided (so that a holder can release while
// the owner's CPU does nothing). T1 (older) asks node 1 for x, held by T2:
// the request parks on node 1's waiting list. Node 1 then stays still: T2
// commits one-sided, and T1's call times out. T1 cancels its attempt at
// node 1; when node 1 runs again it must refuse the parked request (fenced)
// although x is free: granting it would leave x locked by an attempt that
// is gone.
TEST(LateLockRequest, ParkedRequestOfACallerThatGaveUpIsNeverGranted) {
  StepConfig cfg{"waitdie", Primitive::kRpc, Primitive::kOneSided};
  // The waiting list gives up after a quarter of it (25 ms): far longer
  // than the few passes from parking to the point where node 1 stops.
  cfg.rpc_timeout_ns = 100'000'000;
  auto fx = make(cfg);
  ASSERT_NE(fx, nullptr);
  txn::LockWaitList* waiting = fx->engine(1).toolkit().waiting();
  ASSERT_NE(waiting, nullptr);
  auto parked = [&] { return waiting->older_waiter(fx->tuple(kX), UINT64_MAX); };
  Script& t2 = fx->script({W(kX), Fetch(), Pause("holding"), Commit()});
  Script& t1 = fx->script({W(kX), Fetch(), Commit()});
  ASSERT_TRUE(fx->start(0, 1, t2));
  ASSERT_TRUE(fx->run_until_paused(t2, "holding"));
  ASSERT_TRUE(fx->start(0, 0, t1));
  ASSERT_TRUE(fx->run_until(parked)) << "T1's request must wait on node 1";
  ASSERT_LT(t1.timestamp(), t2.timestamp());
  EXPECT_FALSE(t1.done());

  // Only node 0 runs from here: T2 commits (one-sided), T1's call expires.
  fx->resume(t2);
  ASSERT_TRUE(fx->run_until([&] { return t2.done(); }, kMaxPasses, 0));
  EXPECT_TRUE(t2.committed());
  ASSERT_EQ(fx->lock_word(kX), 0u);
  const rpc::EndpointStats& st = fx->engine(0).ctx().rpc->stats();
  const uint64_t timeouts = st.timeouts;
  const uint64_t deadline = env::tsc() + env::ns_to_tsc(20 * cfg.rpc_timeout_ns);
  while (st.timeouts == timeouts && env::tsc() < deadline) fx->poll_node(0);
  ASSERT_GT(st.timeouts, timeouts) << "T1's lock request never timed out";
  EXPECT_TRUE(parked()) << "node 1 ran meanwhile";

  // Node 1 runs again: it gets T1's cancel and retries the parked request.
  ASSERT_TRUE(fx->run_until_done(t1));
  EXPECT_FALSE(t1.committed());
  EXPECT_EQ(fx->reason_key(t1), "network");
  EXPECT_TRUE(fx->engine(1).toolkit().fenced(t1.id()));
  EXPECT_FALSE(parked());
  fx->poll(100);
  EXPECT_EQ(fx->lock_word(kX), 0u) << "the parked request of a cancelled attempt was granted";
  EXPECT_EQ(fx->counter(kX), kInitial + 1);
  EXPECT_EQ(fx->engine(0).stats().cancel_failures, 0u);
}

// A hand-made item request to node 1's toolkit handler `h`, sent from a
// coroutine on node 0's endpoint; the first item's reply.
struct Answer {
  bool ok = false;
  txn::ItemReply reply{};
};

runtime::Task<void> call_items(rpc::Endpoint* ep, uint32_t dest, rpc::HandlerId h, std::vector<std::byte> req,
                               Answer* out, bool* done) {
  std::vector<std::byte> buf(ep->max_payload());
  rpc::Reply r{buf.data(), static_cast<uint32_t>(buf.size())};
  rpc::Batch b(*ep);
  b.call(dest, h, req, &r);
  out->ok = co_await b.send();
  if (out->ok && r.len >= sizeof(txn::ItemReply))
    std::memcpy(&out->reply, buf.data(), sizeof out->reply);
  else
    out->ok = false;
  *done = true;
}

Answer ask(Stepper& fx, rpc::HandlerId h, Key key, uint64_t arg0, uint64_t arg1, std::optional<uint64_t> data) {
  std::vector<std::byte> req(8 + sizeof(txn::ItemHeader) + (data ? 8 : 0));
  const uint64_t count = 1;
  const txn::ItemHeader hdr{kTable, data ? 8u : 0u, key, arg0, arg1};
  std::memcpy(req.data(), &count, 8);
  std::memcpy(req.data() + 8, &hdr, sizeof hdr);
  if (data) std::memcpy(req.data() + 8 + sizeof hdr, &*data, 8);
  Answer a;
  bool done = false;
  const uint32_t dest = fx.owner(key);  // worker 0 of the owner: its endpoint id
  fx.cluster().worker(0, 0).worker->spawn(call_items(fx.engine(0).ctx().rpc.get(), dest, h, std::move(req), &a, &done));
  EXPECT_TRUE(fx.run_until([&] { return done; }));
  EXPECT_TRUE(a.ok) << "no answer from the owner";
  return a;
}

class LateLockRequestAnyProtocol : public testing::TestWithParam<std::string> {};

// A lock request that reaches the owner after the cancel of its attempt
// (a datagram delayed past its caller's timeout) is refused, as are those
// of earlier attempts of the coordinator; a later attempt is not fenced.
TEST_P(LateLockRequestAnyProtocol, LockRequestAfterItsCancelIsRefused) {
  auto fx = make({GetParam(), Primitive::kRpc});
  ASSERT_NE(fx, nullptr);
  const auto& h = fx->engine(1).toolkit().handlers();
  // An attempt of coordinator 9 of node 0 (no coordinator runs there):
  // the lock value is the attempt id, as NOWAIT and OCC use.
  const uint64_t a = make_txn_id(0, 0, 9, 7);
  const uint64_t lock_word_span = txn::owner::span_word(0, 8);

  Answer cancel = ask(*fx, h.cancel, kX, a, a, std::nullopt);
  EXPECT_EQ(cancel.reply.status, txn::owner::kOk);
  Answer late = ask(*fx, h.lock_read, kX, a, a, lock_word_span);
  EXPECT_EQ(late.reply.status, txn::owner::kFenced);
  EXPECT_EQ(fx->lock_word(kX), 0u) << "a lock request after its attempt's cancel was granted";
  Answer older = ask(*fx, h.lock_read, kX, a - 1, a - 1, lock_word_span);
  EXPECT_EQ(older.reply.status, txn::owner::kFenced);
  EXPECT_EQ(fx->lock_word(kX), 0u);

  Answer next = ask(*fx, h.lock_read, kX, a + 1, a + 1, lock_word_span);
  EXPECT_EQ(next.reply.status, txn::owner::kOk) << "the coordinator's next attempt is not fenced";
  EXPECT_EQ(fx->lock_word(kX), a + 1);
  // A release: the lock value, the attempt, then a span word (no record).
  Answer release = ask(*fx, h.release, kX, a + 1, a + 1, txn::owner::span_word(8, 0));
  EXPECT_EQ(release.reply.status, txn::owner::kOk);
  EXPECT_EQ(fx->lock_word(kX), 0u);
}

INSTANTIATE_TEST_SUITE_P(Rules, LateLockRequestAnyProtocol, testing::Values("nowait", "occ", "waitdie"),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
