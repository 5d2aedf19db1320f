// The shm driver's RNIC model (nic_model.hpp): devargs (calibrations,
// overrides, errors), and its timing arithmetic driven by a fake clock
// (a 1 GHz "TSC", so ticks are nanoseconds) — never wall-clock throughput:
// rdtx-perf shows the limits being reached (doc/rdtx-perf.md).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "drivers/rdma/shm/nic_model.hpp"
#include "drivers/rdma/shm/shm_config.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::test {
namespace {

using shm::NicModel;
using shm::NicOp;
using shm::NicParams;
using shm::NicShared;
using shm::ShmConfig;
using ::testing::HasSubstr;

constexpr uint64_t kHz = 1'000'000'000;  // 1 tick = 1 ns

std::string parse_error(const std::string& devargs) {
  auto c = ShmConfig::parse(devargs);
  return c.ok() ? std::string("(parsed)") : c.error().message;
}

TEST(ShmNicDevargs, CalibrationsAndOverrides) {
  auto off = ShmConfig::parse("shm,latency_ns=2000");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->nic.any()) << "the model is off unless asked for";

  auto edr = ShmConfig::parse("shm,nic=edr");
  ASSERT_TRUE(edr.ok()) << edr.error().message;
  EXPECT_EQ(edr->nic_name, "edr");
  EXPECT_EQ(edr->nic.msg_mops, 33.0);
  EXPECT_EQ(edr->nic.link_gbps, 100.0);
  EXPECT_EQ(edr->nic.atomic_mops, 24.0);
  EXPECT_EQ(edr->nic.doorbell_ns, 100u);

  auto fdr = ShmConfig::parse("shm,nic=fdr");
  ASSERT_TRUE(fdr.ok()) << fdr.error().message;
  EXPECT_EQ(fdr->nic.link_gbps, 56.0);
  EXPECT_EQ(fdr->nic.msg_mops, 26.0);
  EXPECT_EQ(fdr->nic.atomic_mops, 2.7);

  // Explicit keys override the calibration, whatever their order; 0 turns
  // one limit off.
  auto mixed = ShmConfig::parse("shm,nic_mops=10,nic=edr,doorbell_ns=0,link_gbps=25");
  ASSERT_TRUE(mixed.ok()) << mixed.error().message;
  EXPECT_EQ(mixed->nic.msg_mops, 10.0);
  EXPECT_EQ(mixed->nic.link_gbps, 25.0);
  EXPECT_EQ(mixed->nic.doorbell_ns, 0u);
  EXPECT_EQ(mixed->nic.atomic_mops, 24.0);

  // A key alone is a model of its own.
  auto alone = ShmConfig::parse("shm,atomic_mops=1.5");
  ASSERT_TRUE(alone.ok());
  EXPECT_TRUE(alone->nic.any());
  EXPECT_EQ(alone->nic.msg_mops, 0.0);
}

TEST(ShmNicDevargs, ErrorsNameTheKeyAndTheChoices) {
  EXPECT_THAT(parse_error("shm,nic=qdr"), HasSubstr("nic=qdr is not a known calibration (edr|fdr)"));
  EXPECT_THAT(parse_error("shm,nic="), HasSubstr("nic="));
  EXPECT_THAT(parse_error("shm,nic_mops=-1"), HasSubstr("nic_mops=-1"));
  EXPECT_THAT(parse_error("shm,nic_mops=lots"), HasSubstr("nic_mops=lots is not a number"));
  EXPECT_THAT(parse_error("shm,link_gbps=fast"), HasSubstr("link_gbps=fast"));
  EXPECT_THAT(parse_error("shm,atomic_mops=nan"), HasSubstr("atomic_mops=nan"));
  EXPECT_THAT(parse_error("shm,doorbell_ns=-3"), HasSubstr("doorbell_ns=-3"));
  EXPECT_THAT(parse_error("shm,doorbell_ns=2000000"), HasSubstr("doorbell_ns=2000000 is out of range"));
  // Every error names the devargs it came from.
  EXPECT_THAT(parse_error("shm,nic=qdr"), HasSubstr("shm devargs 'shm,nic=qdr'"));
}

TEST(ShmNicDevargs, DevicesOpenWithTheModelAndListTheKeys) {
  OpenOptions oo;
  oo.fabric = "nic" + std::to_string(getpid());
  auto dev = open_device("shm,nic=edr,latency_ns=1000", oo);
  ASSERT_TRUE(dev.ok()) << dev.error().message;
  // The NIC state every peer maps: one file per node.
  EXPECT_EQ(access(("/dev/shm/rdtx." + oo.fabric + ".n0.nic").c_str(), F_OK), 0);
  EXPECT_TRUE((*dev)->caps().nic_model);
  EXPECT_EQ((*dev)->model_unaccounted().stale, 0u);
  EXPECT_EQ((*dev)->model_unaccounted().overflow, 0u);
  auto bad = open_device("shm,nic=ib", oo);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message, HasSubstr("edr|fdr"));
  EXPECT_THAT(std::string(shm::kShmDevargsHelp), HasSubstr("nic=edr|fdr"));
}

// Every node of a fabric needs the model: a QP with it on cannot connect to
// a node without it (there is no NIC state to share).
TEST(ShmNicDevargs, ConnectingToANodeWithoutTheModelIsRefused) {
  OpenOptions oa, ob;
  oa.fabric = ob.fabric = "nicmix" + std::to_string(getpid());
  oa.node_id = 0;
  ob.node_id = 1;
  auto a = open_device("shm,nic=edr", oa);
  auto b = open_device("shm", ob);
  ASSERT_TRUE(a.ok() && b.ok());
  auto cqa = (*a)->create_cq(8);
  auto cqb = (*b)->create_cq(8);
  QpInit init;
  init.max_send_wr = 8;
  init.send_cq = cqa->get();
  auto qa = (*a)->create_qp(init);
  init.send_cq = cqb->get();
  auto qb = (*b)->create_qp(init);
  ASSERT_TRUE(qa.ok() && qb.ok());
  auto r = (*qa)->connect((*qb)->address());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message, HasSubstr("runs without the RNIC model"));
}

// A NIC's state is 516 KiB: on the heap, zeroed (every resource free).
std::unique_ptr<NicShared> fresh() {
  auto s = std::make_unique<NicShared>();
  s->magic = NicShared::kMagic;
  return s;
}

// Whether any slot of a calendar was reserved.
bool touched(const shm::NicCalendar& c) {
  return std::any_of(std::begin(c.slot), std::end(c.slot), [](uint64_t w) { return w != 0; });
}

// Message rate: every work request occupies the poster's NIC for
// 1 / msg_mops us; requests posted together leave one slot apart, and the
// NIC idles when nothing is posted.
TEST(ShmNicModel, MessageRateSpacesRequestsOfEveryQpOfTheNode) {
  NicParams p;
  p.msg_mops = 10;  // 100 ns per request
  NicModel m(p, kHz);
  auto local = fresh();
  auto remote = fresh();
  for (uint64_t i = 0; i < 5; ++i) {
    // Two QPs (any thread or process) of the node share the slots.
    auto t = shm::nic_schedule(m, i % 2 ? NicOp::kRead : NicOp::kWrite, 64, 1000, 1000, 0, local.get(), remote.get());
    EXPECT_EQ(t.effect, 1100 + 100 * i) << i;
    EXPECT_EQ(t.visible, 1100 + 100 * i) << i;
  }
  // Posted later than the NIC is busy: starts at once.
  auto late = shm::nic_schedule(m, NicOp::kRead, 64, 5000, 5000, 0, local.get(), remote.get());
  EXPECT_EQ(late.effect, 5100u);
  // One-way delay: a READ takes effect one way after it was issued and
  // completes one way later.
  auto l2 = fresh();
  auto r2 = fresh();
  auto rd = shm::nic_schedule(m, NicOp::kRead, 64, 0, 0, 500, l2.get(), r2.get());
  EXPECT_EQ(rd.effect, 600u);
  EXPECT_EQ(rd.visible, 1100u);
  // The target's message rate is not charged: only the poster's.
  EXPECT_FALSE(touched(r2->msg));
}

// Fractional costs accumulate without per-message rounding (fixed point,
// 1/64 tick): 33 M msg/s is 30.30 ns per message at 1 GHz; 1000 messages
// take 30,303 ns within 1000/64 ns, not 30,000 or 31,000.
TEST(ShmNicModel, FractionalCostsDoNotDrift) {
  NicParams p;
  p.msg_mops = 33;
  NicModel m(p, kHz);
  auto local = fresh();
  auto remote = fresh();
  uint64_t last = 0;
  for (int i = 0; i < 1000; ++i) last = shm::nic_schedule(m, NicOp::kWrite, 8, 0, 0, 0, local.get(), remote.get()).visible;
  EXPECT_NEAR(static_cast<double>(last), 1000 / 33e6 * 1e9, 1000.0 / 64);
}

// Link bandwidth per node and direction: a WRITE's payload leaves through
// the poster's egress and enters the target's ingress one way later; a
// READ's response leaves the target's egress and enters the reader's.
TEST(ShmNicModel, LinkIsSharedPerNodeAndDirection) {
  NicParams p;
  p.link_gbps = 8;  // 1 byte per ns
  NicModel m(p, kHz);
  auto a = fresh();
  auto b = fresh();
  auto c = fresh();
  // a -> c, 1000 bytes: 1000 ns on a's egress, on c's ingress from 500.
  auto w1 = shm::nic_schedule(m, NicOp::kWrite, 1000, 0, 0, 500, a.get(), c.get());
  EXPECT_EQ(w1.effect, 1500u);
  EXPECT_EQ(w1.visible, 2000u);
  // a -> b at the same time: a's egress is busy until 1000.
  auto w2 = shm::nic_schedule(m, NicOp::kWrite, 1000, 0, 0, 500, a.get(), b.get());
  EXPECT_EQ(w2.effect, 2500u);
  // b -> c at the same time: b's egress is free, c's ingress is not (1500).
  auto w3 = shm::nic_schedule(m, NicOp::kWrite, 1000, 0, 0, 500, b.get(), c.get());
  EXPECT_EQ(w3.effect, 2500u);
  // The other direction is free: c READs 1000 bytes from b. The request
  // reaches b at 500; b's egress is busy until 1000 (w3), c's ingress
  // until 2500.
  auto r = shm::nic_schedule(m, NicOp::kRead, 1000, 0, 0, 500, c.get(), b.get());
  EXPECT_EQ(r.effect, 500u);
  EXPECT_EQ(r.visible, 3500u);
  // A SEND completes locally once transmitted; the receiver sees it on arrival.
  auto d = fresh();
  auto e = fresh();
  auto s = shm::nic_schedule(m, NicOp::kSend, 100, 0, 0, 500, d.get(), e.get());
  EXPECT_EQ(s.visible, 100u);
  EXPECT_EQ(s.arrival, 600u);
}

// Atomics: the target NIC's unit runs one CAS/FAA per 1 / atomic_mops us,
// whoever sends them.
TEST(ShmNicModel, AtomicsSerialiseAtTheTargetNic) {
  NicParams p;
  p.atomic_mops = 1;  // 1000 ns each
  NicModel m(p, kHz);
  auto a = fresh();
  auto b = fresh();
  auto target = fresh();
  auto c1 = shm::nic_schedule(m, NicOp::kAtomic, 8, 0, 0, 100, a.get(), target.get());
  auto c2 = shm::nic_schedule(m, NicOp::kAtomic, 8, 0, 0, 100, b.get(), target.get());
  auto c3 = shm::nic_schedule(m, NicOp::kAtomic, 8, 0, 0, 100, a.get(), target.get());
  EXPECT_EQ(c1.effect, 1100u);
  EXPECT_EQ(c2.effect, 2100u);
  EXPECT_EQ(c3.effect, 3100u);
  EXPECT_EQ(c3.visible, 3200u);
  // Other verbs do not use the atomic unit.
  auto w = shm::nic_schedule(m, NicOp::kWrite, 8, 0, 0, 100, a.get(), target.get());
  EXPECT_EQ(w.effect, 100u);
}

// The QP's own wire (bw_gbps) and the NIC compose: a request leaves when
// both are done with it.
TEST(ShmNicModel, PerQpWireStillOrdersItsRequests) {
  NicParams p;
  p.msg_mops = 10;
  NicModel m(p, kHz);
  auto a = fresh();
  auto b = fresh();
  auto t = shm::nic_schedule(m, NicOp::kWrite, 64, 0, 700, 0, a.get(), b.get());  // wire done at 700
  EXPECT_EQ(t.effect, 700u);
}

// Requests reserved in time order are served exactly as by one FIFO server
// (start = max(ready, free), done = start + cost), whatever the slot
// boundaries they cross.
TEST(ShmNicModel, RequestsInTimeOrderAreServedAsByOneFifo) {
  NicParams p;
  p.msg_mops = 33;
  const NicModel m(p, kHz);
  auto n = fresh();
  std::mt19937_64 rng(7);
  uint64_t ready = 0, free = 0;
  for (int i = 0; i < 20000; ++i) {
    ready += rng() % 6000;  // bursts and idle gaps, in fixed point (a slot is 8192)
    const uint64_t cost = 1 + (i % 50 == 0 ? rng() % 40000 : rng() % 4000);  // some span ~5 slots
    const uint64_t fifo = std::max(ready, free) + cost;
    free = fifo;
    ASSERT_EQ(NicModel::reserve(&n->msg, m.msg_shift(), ready, cost), fifo) << i;
  }
}

// A request stamped earlier than requests already reserved finds the
// capacity of its own time. In virtual time a worker whose pass computed
// for 60 us posts 60 us ahead of the others; one FIFO word would queue
// every other worker of the node behind that future reservation.
TEST(ShmNicModel, ARequestStampedEarlierDoesNotQueueBehindTheFuture) {
  NicParams p;
  p.msg_mops = 33;  // 30.3 ns a message
  const NicModel m(p, kHz);
  auto local = fresh();
  auto remote = fresh();
  auto ahead = shm::nic_schedule(m, NicOp::kWrite, 64, 60'000, 60'000, 2000, local.get(), remote.get());
  EXPECT_EQ(ahead.effect, 62'031u);
  auto now = shm::nic_schedule(m, NicOp::kRead, 64, 1000, 1000, 2000, local.get(), remote.get());
  EXPECT_EQ(now.effect, 3031u) << "queued behind a reservation 59 us in its future";
  EXPECT_EQ(now.visible, 5031u);
  // Its own time's capacity is still shared: a second one queues behind it.
  auto next = shm::nic_schedule(m, NicOp::kRead, 64, 1000, 1000, 2000, local.get(), remote.get());
  EXPECT_EQ(next.effect, 3061u);
}

// Whatever the order of reservation, no more than the server's capacity is
// served: the k-th request done is done no earlier than k costs from the
// start. And the server works through its queue: a request reserved out of
// order in a slot can leave the part of the slot before it unused (at most
// a slot, here 256 ns), which in this worst case (every request out of
// order) costs 3.3% of the capacity.
TEST(ShmNicModel, CapacityHoldsWhateverTheOrderOfReservation) {
  NicParams p;
  p.msg_mops = 10;  // 100 ns a message
  const NicModel m(p, kHz);
  auto n = fresh();
  std::mt19937_64 rng(11);
  constexpr int kRequests = 10000;
  std::vector<uint64_t> done;
  for (int i = 0; i < kRequests; ++i) {
    const uint64_t ready = NicModel::to_fixed(rng() % 100'000);  // within 100 us, in random order
    done.push_back(NicModel::to_ticks(NicModel::reserve(&n->msg, m.msg_shift(), ready, m.msg_cost())));
  }
  std::sort(done.begin(), done.end());
  for (int k = 1; k <= kRequests; ++k) ASSERT_GE(done[k - 1], uint64_t(k) * 100) << k;
  EXPECT_LE(done.back(), uint64_t{kRequests} * 100 * 104 / 100);
}

// What the ring cannot hold is served at once and counted: a request older
// than the ring (its slot already reused for a later lap) and one that
// would queue past the ring. Requests the ring holds are not counted.
TEST(ShmNicModel, WhatTheRingCannotHoldIsCounted) {
  NicParams p;
  p.msg_mops = 33;
  const NicModel m(p, kHz);
  const int shift = m.msg_shift();  // 128 ns slots: the ring is 2.1 ms
  const uint64_t width = uint64_t{1} << shift;
  auto n = fresh();
  const uint64_t late = 23437 * width;  // 3 ms, in ring slot 7053
  EXPECT_EQ(NicModel::reserve(&n->msg, shift, late, m.msg_cost()), late + m.msg_cost());
  EXPECT_EQ(n->stale() + n->overflow(), 0u);
  // Ring slot 7053 one lap earlier: older than the ring.
  const uint64_t early = 7053 * width;
  EXPECT_EQ(NicModel::reserve(&n->msg, shift, early, m.msg_cost()), early + m.msg_cost());
  EXPECT_EQ(n->stale(), 1u);
  EXPECT_EQ(n->overflow(), 0u);
  // A lap and a slot of work from an empty calendar: past the ring.
  auto q = fresh();
  const uint64_t lap = uint64_t{shm::NicCalendar::kSlots} * width;
  EXPECT_EQ(NicModel::reserve(&q->egress, shift, 0, lap + width), lap + width);
  EXPECT_EQ(q->overflow(), 1u);
  EXPECT_EQ(q->stale(), 0u);
  EXPECT_EQ(std::atomic_ref<uint64_t>(q->egress.overflow).load(), 1u) << "counted on its calendar";
  // A full lap fits.
  auto f = fresh();
  EXPECT_EQ(NicModel::reserve(&f->atomic, shift, 0, lap), lap);
  EXPECT_EQ(f->stale() + f->overflow(), 0u);
}

TEST(ShmNicModel, CostsAndReserve) {
  NicParams p;
  p.doorbell_ns = 250;
  p.link_gbps = 100;
  NicModel m(p, 2'000'000'000);  // 2 GHz
  EXPECT_TRUE(m.enabled());
  EXPECT_EQ(m.doorbell_ticks(), 500u);
  EXPECT_FALSE(m.limits_messages());
  // 64 bytes at 100 Gb/s = 5.12 ns = 10.24 ticks.
  EXPECT_NEAR(static_cast<double>(m.link_cost(64)) / (1 << NicModel::kFrac), 10.24, 0.02);
  EXPECT_FALSE(NicModel().enabled());
  // cost 0: the calendar is not touched.
  auto n = fresh();
  EXPECT_EQ(NicModel::reserve(&n->msg, m.msg_shift(), 3, 0), 3u);
  EXPECT_FALSE(touched(n->msg));
  // Slots: the largest power of two of fixed-point ticks at most 128 ns or
  // four requests' cost, whichever is longer.
  EXPECT_EQ(NicModel::slot_shift(kHz, 0), 13);             // 8192 / 64 = 128 ticks of 1 ns
  EXPECT_EQ(NicModel::slot_shift(2 * kHz, 0), 14);         // 16384 / 64 = 256 ticks of 0.5 ns
  EXPECT_EQ(NicModel::slot_shift(kHz, 64 * 30), 13);       // 30 ns requests (EDR): 128 ns
  EXPECT_EQ(NicModel::slot_shift(kHz, 64 * 1000), 17);     // 1 us requests: 4 us -> 2.048 us
  EXPECT_EQ(NicModel::slot_shift(kHz, 64 * 100'000), 23);  // capped: the fill field's width
  EXPECT_EQ(m.link_shift(), 14);                           // 512 B at 100 Gb/s is short: 128 ns at 2 GHz
  NicParams slow;
  slow.msg_mops = 1;
  slow.atomic_mops = 0.25;
  slow.link_gbps = 1;
  const NicModel s(slow, kHz);
  EXPECT_EQ(s.msg_shift(), 17);     // 4 x 1 us -> 2.048 us
  EXPECT_EQ(s.atomic_shift(), 19);  // 4 x 4 us -> 8.192 us
  EXPECT_EQ(s.link_shift(), 20);    // 4 x 512 B at 1 Gb/s = 16.4 us -> 16.384 us
}

}  // namespace
}  // namespace rdtx::rdma::test
