// Conformance: one-sided verbs on RC QPs (ordering, atomics, protection
// errors and the error state, signaling, inline, doorbell lists).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "conformance_fixture.hpp"

namespace rdtx::rdma::test {
namespace {

class OneSided : public ConformanceTest {
 protected:
  // Runs a request expected to fail with `want`, then recovers the link.
  void expect_failure(RcLink& link, const WorkRequest& wr, Status want) {
    EXPECT_EQ(run(link, wr), want) << to_string(wr.opcode);
    reconnect(link);
  }
  // As expect_failure, where the verbs specification allows either
  // outcome: the request refused at post (EINVAL, as Soft-RoCE does for a
  // misaligned atomic), or a failed completion with one of `allowed`.
  void expect_refused_or_failure(RcLink& link, const WorkRequest& wr, std::initializer_list<Status> allowed) {
    Outcome o = try_run(link, wr);
    if (o.post_rc != 0) {
      EXPECT_EQ(o.post_rc, -EINVAL) << to_string(wr.opcode);
    } else {
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), o.status), allowed.end())
          << to_string(wr.opcode) << ": " << to_string(o.status);
    }
    reconnect(link);
  }
  // A local key violation: the specification's local protection error, or
  // the local QP operation error Soft-RoCE reports for it.
  void expect_local_key_failure(RcLink& link, const WorkRequest& wr) {
    Outcome o = try_run(link, wr);
    EXPECT_EQ(o.post_rc, 0) << to_string(wr.opcode);
    EXPECT_TRUE(o.status == Status::kLocalProtectionError || o.status == Status::kLocalQpOperationError)
        << to_string(wr.opcode) << ": " << to_string(o.status);
    reconnect(link);
  }
};

INSTANTIATE_TEST_SUITE_P(Topologies, OneSided, ::testing::ValuesIn(all_topologies()), topology_name);

TEST_P(OneSided, WriteThenReadOnOneQpSeesTheWrite) {
  RcLink link = connect_rc();
  const uint64_t target = topo().mem.addr + 1000;
  for (uint64_t round = 0; round < 2; ++round) {
    fill_pattern(local_buf(0), 256, round + 7);
    std::memset(local_buf(4096), 0, 256);
    WorkRequest w = write_wr(0, target, topo().mem.rkey, 256, 1);  // unsignaled
    WorkRequest r = read_wr(4096, target, topo().mem.rkey, 256, 2);
    r.flags = kSignaled;
    WorkRequest* bad = nullptr;
    if (round == 0) {  // one doorbell
      w.next = &r;
      ASSERT_EQ(link.qp->post_send(&w, &bad), 0);
    } else {  // two doorbells
      ASSERT_EQ(link.qp->post_send(&w, &bad), 0);
      ASSERT_EQ(link.qp->post_send(&r, &bad), 0);
    }
    auto wc = poll_for(*link.cq, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].wr_id, 2u);
    EXPECT_EQ(wc[0].status, Status::kSuccess);
    EXPECT_TRUE(check_pattern(local_buf(4096), 256, round + 7)) << "round " << round;
  }
}

// A region registered over reserved memory (Device::reserve_memory) reaches
// each piece committed after the registration, with the same key: what a
// growing table relies on. Uncommitted pages are never touched here.
TEST_P(OneSided, RegionOverReservedMemoryReachesPiecesCommittedLater) {
  if (!dev().caps().lazy_memory) GTEST_SKIP() << dev().caps().name << " has no lazy memory";
  constexpr size_t kReserve = size_t{64} << 20, kPiece = size_t{1} << 20;
  auto lazy = topo().remote_lazy(kReserve, kPiece);
  ASSERT_TRUE(lazy.ok()) << lazy.error().message;
  EXPECT_EQ(lazy->length, kReserve);
  RcLink link = connect_rc();
  for (size_t piece : {size_t{0}, size_t{40}, size_t{17}}) {
    if (piece != 0) ASSERT_TRUE(topo().remote_commit(piece * kPiece, kPiece).ok());
    const uint64_t at = lazy->addr + piece * kPiece + kPiece - 512;
    fill_pattern(local_buf(0), 512, piece + 3);
    ASSERT_EQ(run(link, write_wr(0, at, lazy->rkey, 512)), Status::kSuccess) << piece;
    std::vector<uint8_t> back = remote_read(link, at, lazy->rkey, 512);
    EXPECT_TRUE(check_pattern(back.data(), 512, piece + 3)) << piece;
    auto seen = topo().remote_peek(at, 512);
    ASSERT_TRUE(seen.ok()) << seen.error().message;
    EXPECT_TRUE(check_pattern(seen->data(), 512, piece + 3)) << "node 1 sees the WRITE, piece " << piece;
    std::memset(local_buf(0), 0, 8);
    ASSERT_EQ(run(link, faa_wr(0, lazy->addr + piece * kPiece, lazy->rkey, 5)), Status::kSuccess);
    std::vector<uint8_t> word = remote_read(link, lazy->addr + piece * kPiece, lazy->rkey, 8);
    uint64_t v = 0;
    std::memcpy(&v, word.data(), 8);
    EXPECT_EQ(v, 5u) << "a fresh piece is zero";
  }
  // Committing outside the reservation is an error naming the range.
  auto bad = topo().remote_commit(kReserve - 4096, 8192);
  ASSERT_FALSE(bad.ok());
}

TEST_P(OneSided, WritesLandInPostingOrder) {
  constexpr int kWrites = 100;
  RcLink link = connect_rc(128);
  const uint64_t window = topo().mem.addr + 8192;
  // Write k covers [k, k + 64) with the value k + 1, so each byte must end
  // with the value of the last write covering it.
  std::vector<WorkRequest> wrs;
  wrs.reserve(kWrites);
  for (int k = 0; k < kWrites; ++k) {
    std::memset(local_buf(k * 64), k + 1, 64);
    wrs.push_back(write_wr(k * 64, window + k, topo().mem.rkey, 64, k));
    if (k > 0) wrs[k - 1].next = &wrs[k];
  }
  wrs.back().flags = kSignaled;
  WorkRequest* bad = nullptr;
  ASSERT_EQ(link.qp->post_send(&wrs[0], &bad), 0);
  auto wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  ASSERT_EQ(wc[0].status, Status::kSuccess);
  auto got = remote_read(link, window, topo().mem.rkey, kWrites + 63);
  for (int j = 0; j < kWrites + 63; ++j) ASSERT_EQ(got[j], std::min(j, kWrites - 1) + 1) << "byte " << j;
}

TEST_P(OneSided, ReadsAndWritesOfManySizes) {
  RcLink link = connect_rc();
  uint64_t seq = 1;
  for (uint32_t len : {1u, 7u, 8u, 63u, 64u, 4096u, 65536u}) {
    for (uint64_t off : {0ull, 3ull, 4096ull + 5}) {
      std::vector<uint8_t> data(len);
      fill_pattern(data.data(), len, ++seq);
      remote_write(link, topo().mem.addr + off, topo().mem.rkey, data);
      EXPECT_EQ(remote_read(link, topo().mem.addr + off, topo().mem.rkey, len), data) << len << " bytes at " << off;
    }
  }
}

TEST_P(OneSided, FetchAddFromManyThreadsIsExact) {
  constexpr int kThreads = 4, kOps = 10000, kBatch = 16;
  const uint64_t counter = topo().mem.addr + 16384;
  std::vector<RcLink> links;
  for (int t = 0; t < kThreads; ++t) links.push_back(connect_rc(kBatch));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RcLink& link = links[t];
      const size_t results = size_t(t) * kOps * 8;  // this thread's result slots
      WorkRequest wrs[kBatch];
      for (int done = 0; done < kOps; done += kBatch) {
        for (int i = 0; i < kBatch; ++i) {
          wrs[i] = faa_wr(results + (done + i) * 8, counter, topo().mem.rkey, 1, done + i);
          wrs[i].next = i + 1 < kBatch ? &wrs[i + 1] : nullptr;
        }
        wrs[kBatch - 1].flags = kSignaled;
        WorkRequest* bad = nullptr;
        auto wc = link.qp->post_send(wrs, &bad) == 0 ? poll_for(*link.cq, 1) : std::vector<Completion>{};
        if (wc.size() != 1 || wc[0].status != Status::kSuccess) failures.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(remote_u64(links[0], counter), uint64_t{kThreads * kOps});
  // Every FAA saw a distinct old value: none was lost or applied twice.
  std::vector<uint64_t> old(kThreads * kOps);
  std::memcpy(old.data(), local_buf(0), old.size() * 8);
  std::sort(old.begin(), old.end());
  for (size_t i = 0; i < old.size(); ++i) ASSERT_EQ(old[i], i);
}

TEST_P(OneSided, CasIncrementsFromManyThreadsLoseNoUpdate) {
  constexpr int kThreads = 4, kIncrements = 500;
  const uint64_t counter = topo().mem.addr + 24576;
  std::vector<RcLink> links;
  for (int t = 0; t < kThreads; ++t) links.push_back(connect_rc(4));
  std::atomic<int> failures{0};
  std::atomic<uint64_t> retries{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RcLink& link = links[t];
      uint64_t guess = 0;
      for (int done = 0; done < kIncrements;) {
        WorkRequest wr = cas_wr(t * 64, counter, topo().mem.rkey, guess, guess + 1);
        wr.flags = kSignaled;
        WorkRequest* bad = nullptr;
        auto wc = link.qp->post_send(&wr, &bad) == 0 ? poll_for(*link.cq, 1) : std::vector<Completion>{};
        if (wc.size() != 1 || wc[0].status != Status::kSuccess) {
          failures.fetch_add(1);
          return;
        }
        uint64_t old;
        std::memcpy(&old, local_buf(t * 64), 8);
        if (old == guess) {
          ++done;
          ++guess;
        } else {
          retries.fetch_add(1);
          guess = old;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  EXPECT_EQ(remote_u64(links[0], counter), uint64_t{kThreads * kIncrements}) << retries.load() << " retries";
}

TEST_P(OneSided, CasSwapsOnlyOnMatch) {
  RcLink link = connect_rc();
  const uint64_t word = topo().mem.addr + 256;
  uint64_t five = 5;
  remote_write(link, word, topo().mem.rkey, std::vector<uint8_t>((uint8_t*)&five, (uint8_t*)&five + 8));
  uint64_t old = 0;
  ASSERT_EQ(run(link, cas_wr(0, word, topo().mem.rkey, 4, 9)), Status::kSuccess);
  std::memcpy(&old, local_buf(0), 8);
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(remote_u64(link, word), 5u) << "CAS swapped on a mismatch";
  ASSERT_EQ(run(link, cas_wr(0, word, topo().mem.rkey, 5, 9)), Status::kSuccess);
  std::memcpy(&old, local_buf(0), 8);
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(remote_u64(link, word), 9u);
  ASSERT_EQ(run(link, faa_wr(0, word, topo().mem.rkey, 3)), Status::kSuccess);
  std::memcpy(&old, local_buf(0), 8);
  EXPECT_EQ(old, 9u);
  EXPECT_EQ(remote_u64(link, word), 12u);
}

TEST_P(OneSided, RemoteAtomicsAreAtomicWithCpuAtomicsWhenCapsSaySo) {
  if (!dev().caps().atomics_coherent_with_cpu) GTEST_SKIP() << dev().caps().name << " does not claim CPU coherence";
  constexpr int kOps = 20000;
  // Loopback: node 0's QP targets node 0's own memory, which a CPU thread
  // increments at the same time.
  auto cq = dev().create_cq(128);
  ASSERT_TRUE(cq.ok());
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = cq->get();
  init.max_send_wr = 64;
  auto a = dev().create_qp(init);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = dev().create_qp(init);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_TRUE((*a)->connect((*b)->address()).ok());
  ASSERT_TRUE((*b)->connect((*a)->address()).ok());
  auto* word = reinterpret_cast<uint64_t*>(local_buf(4096));
  *word = 0;
  std::thread cpu([word] {
    std::atomic_ref<uint64_t> w(*word);
    for (int i = 0; i < kOps; ++i) w.fetch_add(1, std::memory_order_relaxed);
  });
  int failures = 0;
  for (int i = 0; i < kOps; ++i) {
    WorkRequest wr = faa_wr(0, reinterpret_cast<uint64_t>(word), lmr().rkey, 1);
    wr.flags = kSignaled;
    WorkRequest* bad = nullptr;
    auto wc = (*a)->post_send(&wr, &bad) == 0 ? poll_for(**cq, 1) : std::vector<Completion>{};
    failures += wc.size() != 1 || wc[0].status != Status::kSuccess;
  }
  cpu.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), uint64_t{2 * kOps});
}

// A QP connected to itself runs atomics on its own context's memory: how the
// engine's owner atomics reach a local word through the NIC on a device
// whose atomics are not coherent with the CPU's (txn/stages/owner_atomics.hpp),
// the same API on every driver (verbs: INIT->RTR->RTS to its own QPN and GID).
TEST_P(OneSided, AQpConnectedToItselfRunsAtomicsOnItsOwnMemory) {
  auto cq = dev().create_cq(4);
  ASSERT_TRUE(cq.ok()) << cq.error().message;
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = cq->get();
  init.max_send_wr = 1;
  init.max_inline = 0;
  auto qp = dev().create_qp(init);
  ASSERT_TRUE(qp.ok()) << qp.error().message;
  ASSERT_TRUE((*qp)->connect((*qp)->address()).ok());
  auto* word = reinterpret_cast<uint64_t*>(local_buf(8192));
  std::atomic_ref<uint64_t>(*word).store(41);
  auto one = [&](WorkRequest wr) {
    wr.flags = kSignaled;
    WorkRequest* bad = nullptr;
    auto wc = (*qp)->post_send(&wr, &bad) == 0 ? poll_for(**cq, 1) : std::vector<Completion>{};
    uint64_t old = UINT64_MAX;
    if (wc.size() == 1 && wc[0].status == Status::kSuccess) std::memcpy(&old, local_buf(64), 8);
    return old;
  };
  const uint64_t addr = reinterpret_cast<uint64_t>(word);
  EXPECT_EQ(one(cas_wr(64, addr, lmr().rkey, 40, 7)), 41u) << "a CAS that does not match";
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 41u);
  EXPECT_EQ(one(cas_wr(64, addr, lmr().rkey, 41, 42)), 41u);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 42u);
  EXPECT_EQ(one(faa_wr(64, addr, lmr().rkey, ~uint64_t{0})), 42u) << "FAA of -1";
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 41u);
}

// QueuePair::disconnect (a node removing a member, doc/membership.md): the
// peer's requests through the QP connected to a disconnected one fail and
// touch nothing; the disconnected QP's own are flushed; connecting both
// again restores the link. A loopback pair on node 0 (verbs: the requester's
// retries run out, so this takes the RC transport's timeout, or the stall
// watchdog's on Soft-RoCE under an emulator).
TEST_P(OneSided, APeersRequestsToADisconnectedQpFail) {
  auto cq = dev().create_cq(8);
  ASSERT_TRUE(cq.ok()) << cq.error().message;
  QpInit init;
  init.type = QpType::kRc;
  init.send_cq = cq->get();
  init.max_send_wr = 2;
  init.max_inline = 0;
  auto a = dev().create_qp(init), b = dev().create_qp(init);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->connect((*b)->address()).ok());
  ASSERT_TRUE((*b)->connect((*a)->address()).ok());
  auto* word = reinterpret_cast<uint64_t*>(local_buf(8192));
  std::atomic_ref<uint64_t>(*word).store(5);
  const uint64_t addr = reinterpret_cast<uint64_t>(word);
  auto status = [&](QueuePair& qp, WorkRequest wr) {
    wr.flags = kSignaled;
    WorkRequest* bad = nullptr;
    if (qp.post_send(&wr, &bad) != 0) return Status::kLocalQpOperationError;
    auto wc = poll_for(**cq, 1, std::chrono::seconds(60));
    return wc.size() == 1 ? wc[0].status : Status::kLocalLengthError;
  };
  EXPECT_EQ(status(**a, faa_wr(64, addr, lmr().rkey, 1)), Status::kSuccess);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 6u);
  ASSERT_TRUE((*b)->disconnect().ok());
  // Fails: at once on shm; on verbs when the requester's retries run out
  // (kGeneralError), or, on a device that never retransmits (Soft-RoCE under
  // an emulated CPU, drivers.md), when the driver's stall watchdog fails the
  // request's QP (kFlushed).
  const Status refused = status(**a, faa_wr(64, addr, lmr().rkey, 1));
  if (dev().caps().driver == "shm")
    EXPECT_EQ(refused, Status::kGeneralError) << "a request to a disconnected QP";
  else
    EXPECT_TRUE(refused == Status::kGeneralError || refused == Status::kFlushed)
        << "a request to a disconnected QP: " << to_string(refused);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 6u) << "a refused FAA was applied";
  EXPECT_EQ(status(**b, faa_wr(64, addr, lmr().rkey, 1)), Status::kFlushed) << "the disconnected QP's own request";
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 6u);
  // Both ends again (the requester went to the error state too).
  ASSERT_TRUE((*b)->connect((*a)->address()).ok());
  ASSERT_TRUE((*a)->connect((*b)->address()).ok());
  EXPECT_EQ(status(**a, faa_wr(64, addr, lmr().rkey, 1)), Status::kSuccess);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 7u);
}

TEST_P(OneSided, WrongRkeyFailsAndTouchesNothing) {
  RcLink link = connect_rc();
  std::vector<uint8_t> before(64);
  fill_pattern(before.data(), before.size(), 42);
  remote_write(link, topo().mem.addr, topo().mem.rkey, before);
  std::memset(local_buf(0), 0xcc, 64);
  for (uint32_t bad_key : {topo().mem.rkey ^ 0x80000000u, topo().mem.rkey + 1, 0u}) {
    expect_failure(link, write_wr(0, topo().mem.addr, bad_key, 64), Status::kRemoteAccessError);
    expect_failure(link, faa_wr(0, topo().mem.addr, bad_key, 1), Status::kRemoteAccessError);
    expect_failure(link, read_wr(0, topo().mem.addr, bad_key, 64), Status::kRemoteAccessError);
  }
  EXPECT_EQ(remote_read(link, topo().mem.addr, topo().mem.rkey, 64), before);
}

TEST_P(OneSided, AccessPastEitherEndOfARegionFails) {
  RcLink link = connect_rc();
  const RemoteRegion& m = topo().mem;
  const uint64_t end = m.addr + m.length;
  auto tail_before = topo().remote_peek(end - 16, 16);
  ASSERT_TRUE(tail_before.ok()) << tail_before.error().message;
  std::memset(local_buf(0), 0x77, 64);
  expect_failure(link, write_wr(0, end - 8, m.rkey, 9), Status::kRemoteAccessError);
  expect_failure(link, write_wr(0, end, m.rkey, 1), Status::kRemoteAccessError);
  expect_failure(link, read_wr(0, end - 1, m.rkey, 2), Status::kRemoteAccessError);
  expect_failure(link, read_wr(0, m.addr - 1, m.rkey, 1), Status::kRemoteAccessError);
  expect_failure(link, faa_wr(0, end, m.rkey, 1), Status::kRemoteAccessError);
  auto tail_after = topo().remote_peek(end - 16, 16);
  ASSERT_TRUE(tail_after.ok());
  EXPECT_EQ(*tail_after, *tail_before) << "a failed access changed memory";
  // The last bytes themselves are in bounds.
  EXPECT_EQ(run(link, write_wr(0, end - 8, m.rkey, 8)), Status::kSuccess);
  EXPECT_EQ(run(link, read_wr(64, m.addr, m.rkey, 1)), Status::kSuccess);
}

TEST_P(OneSided, DeregisteredRegionFails) {
  RcLink link = connect_rc();
  const RemoteRegion& d = topo().dead;
  std::memset(local_buf(0), 0x11, 64);
  expect_failure(link, write_wr(0, d.addr, d.rkey, 64), Status::kRemoteAccessError);
  expect_failure(link, read_wr(0, d.addr, d.rkey, 64), Status::kRemoteAccessError);
  expect_failure(link, faa_wr(0, d.addr, d.rkey, 1), Status::kRemoteAccessError);
  auto after = topo().remote_peek(d.addr, 64);
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_EQ(*after, std::vector<uint8_t>(64, 0x5a));
}

TEST_P(OneSided, MissingAccessRightFails) {
  RcLink link = connect_rc();
  const RemoteRegion& ro = topo().ro;
  std::memset(local_buf(0), 0x11, 64);
  expect_failure(link, write_wr(0, ro.addr, ro.rkey, 64), Status::kRemoteAccessError);
  expect_failure(link, faa_wr(0, ro.addr, ro.rkey, 1), Status::kRemoteAccessError);
  expect_failure(link, cas_wr(0, ro.addr, ro.rkey, 0xa5a5a5a5a5a5a5a5ull, 1), Status::kRemoteAccessError);
  auto after = topo().remote_peek(ro.addr, 64);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, std::vector<uint8_t>(64, 0xa5));
  // The right it has works.
  EXPECT_EQ(remote_read(link, ro.addr, ro.rkey, 64), std::vector<uint8_t>(64, 0xa5));
}

TEST_P(OneSided, MisalignedAtomicFails) {
  RcLink link = connect_rc();
  const uint64_t word = topo().mem.addr + 512;
  remote_write(link, word, topo().mem.rkey, std::vector<uint8_t>(16, 0));
  expect_refused_or_failure(link, faa_wr(0, word + 4, topo().mem.rkey, 1), {Status::kRemoteInvalidRequest});
  expect_refused_or_failure(link, cas_wr(0, word + 1, topo().mem.rkey, 0, 1), {Status::kRemoteInvalidRequest});
  EXPECT_EQ(remote_read(link, word, topo().mem.rkey, 16), std::vector<uint8_t>(16, 0));
}

TEST_P(OneSided, ErrorFlushesLaterRequestsUntilReconnect) {
  RcLink link = connect_rc(16);
  const RemoteRegion& m = topo().mem;
  std::memset(local_buf(0), 0x99, 256);
  // All unsignaled: errors and flushes complete anyway.
  WorkRequest wrs[4] = {write_wr(0, m.addr, m.rkey ^ 0x80000000u, 64, 10), write_wr(0, m.addr, m.rkey, 64, 11),
                        write_wr(0, m.addr + 64, m.rkey, 64, 12), read_wr(1024, m.addr, m.rkey, 64, 13)};
  for (int i = 0; i < 3; ++i) wrs[i].next = &wrs[i + 1];
  WorkRequest* bad = nullptr;
  ASSERT_EQ(link.qp->post_send(wrs, &bad), 0);
  auto wc = poll_for(*link.cq, 4);
  ASSERT_EQ(wc.size(), 4u);
  EXPECT_EQ(wc[0].wr_id, 10u);
  EXPECT_EQ(wc[0].status, Status::kRemoteAccessError);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(wc[i].wr_id, 10u + i);
    EXPECT_EQ(wc[i].status, Status::kFlushed);
  }
  // Still in the error state: a later unsignaled request is flushed too.
  WorkRequest later = write_wr(0, m.addr + 128, m.rkey, 64, 14);
  ASSERT_EQ(link.qp->post_send(&later, &bad), 0);
  wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 14u);
  EXPECT_EQ(wc[0].status, Status::kFlushed);
  EXPECT_TRUE(stays_empty(*link.cq));
  reconnect(link);
  EXPECT_EQ(remote_read(link, m.addr, m.rkey, 192), std::vector<uint8_t>(192, 0)) << "a flushed WRITE landed";
  EXPECT_EQ(run(link, write_wr(0, m.addr, m.rkey, 64)), Status::kSuccess);
  EXPECT_EQ(remote_read(link, m.addr, m.rkey, 64), std::vector<uint8_t>(64, 0x99));
}

TEST_P(OneSided, LocalKeyViolationFails) {
  RcLink link = connect_rc();
  const RemoteRegion& m = topo().mem;
  remote_write(link, m.addr, m.rkey, std::vector<uint8_t>(64, 0x42));
  std::memset(local_buf(0), 0xcc, 64);
  WorkRequest r = read_wr(0, m.addr, m.rkey, 64);
  r.lkey = lmr().lkey ^ 0x80000000u;
  expect_local_key_failure(link, r);
  EXPECT_EQ(std::vector<uint8_t>(local_buf(0), local_buf(64)), std::vector<uint8_t>(64, 0xcc));
  // A local range running past the end of the local region.
  std::memset(local_buf(kLocalBytes - 8), 0xcc, 8);
  expect_local_key_failure(link, read_wr(kLocalBytes - 8, m.addr, m.rkey, 16));
  EXPECT_EQ(std::vector<uint8_t>(local_buf(kLocalBytes - 8), local_buf(kLocalBytes)), std::vector<uint8_t>(8, 0xcc));
  WorkRequest w = write_wr(0, m.addr, m.rkey, 64);
  w.lkey = lmr().lkey + 1;
  expect_local_key_failure(link, w);
  EXPECT_EQ(remote_read(link, m.addr, m.rkey, 64), std::vector<uint8_t>(64, 0x42));
}

TEST_P(OneSided, OnlySignaledRequestsComplete) {
  RcLink link = connect_rc(32);
  const RemoteRegion& m = topo().mem;
  WorkRequest wrs[11];
  for (int i = 0; i < 11; ++i) {
    wrs[i] = i < 10 ? write_wr(i * 8, m.addr + i * 8, m.rkey, 8, i) : read_wr(256, m.addr, m.rkey, 80, i);
    wrs[i].next = i < 10 ? &wrs[i + 1] : nullptr;
  }
  wrs[10].flags = kSignaled;
  WorkRequest* bad = nullptr;
  ASSERT_EQ(link.qp->post_send(wrs, &bad), 0);
  auto wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 10u);
  EXPECT_EQ(wc[0].status, Status::kSuccess);
  EXPECT_TRUE(stays_empty(*link.cq)) << "an unsignaled request produced a completion";
}

TEST_P(OneSided, SendQueueIsFullUntilASignaledCompletionIsPolled) {
  constexpr uint32_t kDepth = 4;
  RcLink link = connect_rc(kDepth);
  const RemoteRegion& m = topo().mem;
  WorkRequest wrs[kDepth + 1];
  for (uint32_t i = 0; i <= kDepth; ++i) {
    wrs[i] = write_wr(0, m.addr, m.rkey, 8, i);
    wrs[i].next = i < kDepth ? &wrs[i + 1] : nullptr;
  }
  wrs[kDepth - 1].flags = kSignaled;  // the last that fits
  WorkRequest* bad = nullptr;
  ASSERT_EQ(link.qp->post_send(wrs, &bad), -ENOMEM);
  EXPECT_EQ(bad, &wrs[kDepth]) << "the first request that did not fit";
  // Completed but not polled: the slots are still held.
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  WorkRequest extra = write_wr(0, m.addr, m.rkey, 8, 99);
  extra.flags = kSignaled;
  bad = nullptr;
  EXPECT_EQ(link.qp->post_send(&extra, &bad), -ENOMEM);
  EXPECT_EQ(bad, &extra);
  auto wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, kDepth - 1);
  // Polling the signaled completion freed every slot up to it.
  for (uint32_t i = 0; i < kDepth; ++i) {
    wrs[i].flags = i + 1 == kDepth ? uint32_t{kSignaled} : 0u;
    wrs[i].next = i + 1 < kDepth ? &wrs[i + 1] : nullptr;
  }
  ASSERT_EQ(link.qp->post_send(wrs, &bad), 0);
  wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_TRUE(stays_empty(*link.cq));
}

TEST_P(OneSided, InlinePayloadIsCopiedAtPostTime) {
  RcLink link = connect_rc();
  const RemoteRegion& m = topo().mem;
  uint8_t payload[48];
  fill_pattern(payload, sizeof payload, 5);
  WorkRequest wr;
  wr.wr_id = 1;
  wr.opcode = Opcode::kWrite;
  wr.flags = kSignaled | kInline;
  wr.local = payload;  // not registered memory: inline ignores the lkey
  wr.length = sizeof payload;
  wr.lkey = 0xdeadbeef;
  wr.remote_addr = m.addr + 2048;
  wr.rkey = m.rkey;
  WorkRequest* bad = nullptr;
  ASSERT_EQ(link.qp->post_send(&wr, &bad), 0);
  std::memset(payload, 0xff, sizeof payload);  // reused right away
  auto wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, Status::kSuccess);
  auto got = remote_read(link, m.addr + 2048, m.rkey, sizeof payload);
  EXPECT_TRUE(check_pattern(got.data(), got.size(), 5));
}

TEST_P(OneSided, InlineLargerThanMaxInlineIsRejected) {
  RcLink link = connect_rc();
  std::vector<uint8_t> payload(QpInit{}.max_inline + 1, 1);
  WorkRequest wr;
  wr.opcode = Opcode::kWrite;
  wr.flags = kSignaled | kInline;
  wr.local = payload.data();
  wr.length = static_cast<uint32_t>(payload.size());
  wr.remote_addr = topo().mem.addr;
  wr.rkey = topo().mem.rkey;
  WorkRequest* bad = nullptr;
  EXPECT_EQ(link.qp->post_send(&wr, &bad), -EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_TRUE(stays_empty(*link.cq));
  EXPECT_EQ(run(link, read_wr(0, topo().mem.addr, topo().mem.rkey, 8)), Status::kSuccess) << "QP still works";
}

TEST_P(OneSided, DoorbellListOfMixedVerbs) {
  RcLink link = connect_rc();
  const RemoteRegion& m = topo().mem;
  uint64_t init[2] = {100, 7};
  remote_write(link, m.addr + 256, m.rkey, std::vector<uint8_t>((uint8_t*)init, (uint8_t*)init + 16));
  fill_pattern(local_buf(0), 128, 77);
  WorkRequest wrs[5] = {write_wr(0, m.addr + 512, m.rkey, 128, 1), faa_wr(128, m.addr + 256, m.rkey, 5, 2),
                        cas_wr(136, m.addr + 264, m.rkey, 7, 42, 3), read_wr(1024, m.addr + 512, m.rkey, 128, 4),
                        read_wr(2048, m.addr + 256, m.rkey, 16, 5)};
  for (int i = 0; i < 5; ++i) {
    wrs[i].flags = kSignaled;
    wrs[i].next = i < 4 ? &wrs[i + 1] : nullptr;
  }
  WorkRequest* bad = nullptr;
  ASSERT_EQ(link.qp->post_send(wrs, &bad), 0);
  auto wc = poll_for(*link.cq, 5);
  ASSERT_EQ(wc.size(), 5u);
  const Opcode ops[5] = {Opcode::kWrite, Opcode::kFetchAdd, Opcode::kCompareSwap, Opcode::kRead, Opcode::kRead};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(wc[i].wr_id, uint64_t(i + 1));
    EXPECT_EQ(wc[i].opcode, ops[i]);
    EXPECT_EQ(wc[i].status, Status::kSuccess);
  }
  uint64_t faa_old, cas_old, after[2];
  std::memcpy(&faa_old, local_buf(128), 8);
  std::memcpy(&cas_old, local_buf(136), 8);
  std::memcpy(after, local_buf(2048), 16);
  EXPECT_EQ(faa_old, 100u);
  EXPECT_EQ(cas_old, 7u);
  EXPECT_TRUE(check_pattern(local_buf(1024), 128, 77));
  EXPECT_EQ(after[0], 105u);
  EXPECT_EQ(after[1], 42u);
}

TEST_P(OneSided, MalformedRequestIsRejectedAfterEarlierOnesArePosted) {
  RcLink link = connect_rc();
  const RemoteRegion& m = topo().mem;
  WorkRequest ok = write_wr(0, m.addr, m.rkey, 8, 1);
  ok.flags = kSignaled;
  WorkRequest send = write_wr(0, m.addr, m.rkey, 8, 2);
  send.opcode = Opcode::kSend;  // not on an RC QP
  WorkRequest after = write_wr(0, m.addr, m.rkey, 8, 3);
  after.flags = kSignaled;
  ok.next = &send;
  send.next = &after;
  WorkRequest* bad = nullptr;
  EXPECT_EQ(link.qp->post_send(&ok, &bad), -EINVAL);
  EXPECT_EQ(bad, &send);
  auto wc = poll_for(*link.cq, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_TRUE(stays_empty(*link.cq));
  WorkRequest short_faa = faa_wr(0, m.addr, m.rkey, 1, 4);
  short_faa.length = 4;
  EXPECT_EQ(link.qp->post_send(&short_faa, &bad), -EINVAL);
  EXPECT_EQ(bad, &short_faa);
}

TEST_P(OneSided, RegionOfOrdinaryHeapMemory) {
  RcLink link = connect_rc();
  const RemoteRegion& h = topo().heap;
  // shm reaches only alloc_memory() memory from another process; verbs
  // reaches any registered memory.
  bool reachable = !(dev().caps().driver == "shm" && topo().spec().separate_process);
  if (reachable) {
    EXPECT_EQ(remote_read(link, h.addr, h.rkey, 64), std::vector<uint8_t>(64, 0x3c));
  } else {
    EXPECT_EQ(run(link, read_wr(0, h.addr, h.rkey, 64)), Status::kRemoteAccessError);
  }
}

// A second device context of the node (a worker's, verbs: its own
// ibv_context and PD) with the same memory registered in both: each key is
// valid only with QPs of the context that registered it, CQs and QPs must
// come from one context, and a region is deregistered where it was made.
TEST_P(OneSided, ProtectionIsPerDeviceContext) {
  auto other = dev().open_context();
  ASSERT_TRUE(other.ok()) << other.error().message;
  Device& ctx2 = **other;
  auto mem = dev().alloc_memory(4096);
  ASSERT_TRUE(mem.ok());
  std::memset((*mem)->data(), 0, 4096);
  auto mr1 = dev().reg_mr((*mem)->data(), 4096, kAccessAll);
  auto mr2 = ctx2.reg_mr((*mem)->data(), 4096, kAccessAll);
  ASSERT_TRUE(mr1.ok() && mr2.ok());

  // QP a (this context) connected to QP b (the other), on the same node.
  auto cq1 = dev().create_cq(16);
  auto cq2 = ctx2.create_cq(16);
  ASSERT_TRUE(cq1.ok() && cq2.ok());
  QpInit init;
  init.max_send_wr = 16;
  init.send_cq = cq1->get();
  EXPECT_FALSE(ctx2.create_qp(init).ok()) << "a CQ of another context";
  RcLink a;
  a.cq = std::move(*cq1);
  a.qp = std::move(*dev().create_qp(init));
  init.send_cq = cq2->get();
  auto b = ctx2.create_qp(init);
  ASSERT_TRUE(b.ok()) << b.error().message;
  ASSERT_TRUE(a.qp->connect((*b)->address()).ok());
  ASSERT_TRUE((*b)->connect(a.qp->address()).ok());

  const uint64_t raddr = reinterpret_cast<uint64_t>((*mem)->data());
  auto* word = static_cast<uint64_t*>((*mem)->data());
  // The target QP is b's: only the other context's key reaches the memory.
  EXPECT_EQ(run(a, faa_wr(0, raddr, mr2->rkey, 5)), Status::kSuccess);
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 5u);
  // After an error both ends are brought back (verbs: the responder of an
  // access error goes to the error state too).
  auto recover = [&] {
    ASSERT_TRUE(a.qp->connect((*b)->address()).ok());
    ASSERT_TRUE((*b)->connect(a.qp->address()).ok());
  };
  EXPECT_EQ(run(a, faa_wr(0, raddr, mr1->rkey, 7)), Status::kRemoteAccessError);
  recover();
  EXPECT_EQ(std::atomic_ref<uint64_t>(*word).load(), 5u) << "a refused key changed memory";
  // The local buffer must be registered in a's context.
  WorkRequest rd = read_wr(0, raddr, mr2->rkey, 8);
  EXPECT_EQ(run(a, rd), Status::kSuccess);
  rd.local = (*mem)->data();
  rd.lkey = mr2->lkey;
  EXPECT_EQ(run(a, rd), Status::kLocalProtectionError);
  recover();

  EXPECT_FALSE(dev().dereg_mr(*mr2).ok()) << "deregistered through the wrong context";
  EXPECT_TRUE(ctx2.dereg_mr(*mr2).ok());
  EXPECT_TRUE(dev().dereg_mr(*mr1).ok());
  b->reset();
}

TEST_P(OneSided, ConnectRejectsAGarbageAddress) {
  auto cq = dev().create_cq(4);
  ASSERT_TRUE(cq.ok());
  QpInit init;
  init.send_cq = cq->get();
  init.max_send_wr = 4;
  auto qp = dev().create_qp(init);
  ASSERT_TRUE(qp.ok());
  QpAddress garbage;
  std::memset(garbage.bytes, 0xab, sizeof garbage.bytes);
  auto r = (*qp)->connect(garbage);
  EXPECT_FALSE(r.ok());
  // Not connected: posting is refused.
  WorkRequest wr = read_wr(0, topo().mem.addr, topo().mem.rkey, 8);
  WorkRequest* bad = nullptr;
  EXPECT_EQ((*qp)->post_send(&wr, &bad), -EINVAL);
}

}  // namespace
}  // namespace rdtx::rdma::test
