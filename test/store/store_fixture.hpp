// Shared helpers of the lib/store tests: an embedded two-node shm cluster
// (node 0 initiates one-sided verbs, node 1 owns the tables), a worker that
// runs coroutines on the test thread, and self-validating records.
// Thread-safety: a fixture is used by the test's thread, except where a test
// says otherwise.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "rdma/rdma.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/task.hpp"
#include "runtime/worker.hpp"
#include "store/remote_lookup.hpp"
#include "store/store.hpp"

namespace rdtx::store::test {

// A fabric name no other test (or concurrent test process) uses.
inline std::string unique_fabric() {
  static std::atomic<int> counter{0};
  return "store-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1));
}

template <typename T>
T must(Result<T> r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.error().message;
    std::abort();
  }
  return std::move(r).value();
}

// Record word i of `key` at `version`: each word names key, version and its
// own position, so a reader can tell a record of another key (wrong), a mix
// of two versions of this key (torn by an in-place update) and a good one.
inline uint64_t record_word(uint64_t key, uint64_t version, uint32_t i) {
  return key << 32 | (version & 0xffffff) << 8 | i;
}
inline std::vector<std::byte> make_record(uint64_t key, uint64_t version, uint32_t record_bytes) {
  std::vector<std::byte> rec(record_bytes);
  for (uint32_t i = 0; i < record_bytes / 8; ++i) {
    uint64_t w = record_word(key, version, i);
    std::memcpy(rec.data() + 8 * i, &w, 8);
  }
  return rec;
}
enum class RecordCheck { kGood, kTorn, kWrong };
inline RecordCheck check_record(const std::byte* rec, uint64_t key, uint32_t record_bytes) {
  uint64_t first = 0;
  bool torn = false;
  for (uint32_t i = 0; i < record_bytes / 8; ++i) {
    uint64_t w;
    std::memcpy(&w, rec + 8 * i, 8);
    if (w >> 32 != key || (w & 0xff) != i) return RecordCheck::kWrong;
    if (i == 0) first = w;
    torn |= ((w >> 8) & 0xffffff) != ((first >> 8) & 0xffffff);
  }
  return torn ? RecordCheck::kTorn : RecordCheck::kGood;
}
inline uint64_t record_version(const std::byte* rec) {
  uint64_t w;
  std::memcpy(&w, rec, 8);
  return (w >> 8) & 0xffffff;
}

// One shm node with a Store: for tests of local behaviour.
struct OneNode {
  std::unique_ptr<rdma::Device> dev = must(rdma::open_device("shm", {0, unique_fabric()}));
  Store store{*dev, 0};
};

// Two shm nodes in this process with an RC QP pair connected both ways;
// node 1 owns the tables, node 0 reads them from a Worker polled here.
class TwoNodes {
 public:
  static constexpr uint32_t kScratchBytes = 8192;  // per coroutine
  static constexpr uint32_t kScratchBuffers = 8;

  TwoNodes() : fabric_(unique_fabric()) {
    for (uint32_t n = 0; n < 2; ++n) {
      dev[n] = must(rdma::open_device("shm", {n, fabric_}));
      cq[n] = must(dev[n]->create_cq(1024));
      rdma::QpInit init;
      init.send_cq = cq[n].get();
      qp[n] = must(dev[n]->create_qp(init));
    }
    EXPECT_TRUE(qp[0]->connect(qp[1]->address()).ok());
    EXPECT_TRUE(qp[1]->connect(qp[0]->address()).ok());
    owner = std::make_unique<Store>(*dev[1], 1);
    scratch_mem = must(dev[0]->alloc_memory(kScratchBytes * kScratchBuffers));
    scratch_mr = must(dev[0]->reg_mr(scratch_mem->data(), scratch_mem->size(), rdma::kAccessAll));
    worker.add_poller([poller = runtime::CqPoller(cq[0].get())]() mutable { return poller(); });
  }

  Scratch scratch(uint32_t i = 0) const {
    return Scratch{static_cast<std::byte*>(scratch_mr.addr) + i * kScratchBytes, kScratchBytes, scratch_mr.lkey};
  }

  // Runs `task` on the worker, polling it from this thread until it is done.
  template <typename T>
  T run(runtime::Task<T> task) {
    std::optional<T> out;
    worker.spawn([](runtime::Task<T> t, std::optional<T>& out) -> runtime::Task<void> {
      out.emplace(co_await std::move(t));
    }(std::move(task), out));
    drain();
    if (!out) {
      ADD_FAILURE() << "task did not finish";
      std::abort();
    }
    return std::move(*out);
  }
  void drain() {
    for (int i = 0; i < 10'000'000 && worker.live_tasks() > 0; ++i) worker.poll_once();
    ASSERT_EQ(worker.live_tasks(), 0u);
  }

  LookupResult lookup(const TableDescriptor& t, uint64_t key) {
    return run(lookup_onesided(qp[0].get(), t, key, scratch()));
  }
  FetchResult fetch(const TableDescriptor& t, uint64_t key, LocationCache* cache,
                    TupleCheck check = TupleCheck::kConfirmed) {
    return run(fetch_onesided(qp[0].get(), t, key, scratch(), cache, check));
  }

  std::string fabric_;
  std::unique_ptr<rdma::Device> dev[2];
  std::unique_ptr<rdma::CompletionQueue> cq[2];
  std::unique_ptr<rdma::QueuePair> qp[2];
  std::unique_ptr<Store> owner;
  std::unique_ptr<rdma::DeviceMemory> scratch_mem;
  rdma::MemoryRegion scratch_mr;
  runtime::Worker worker{"node0"};
};

}  // namespace rdtx::store::test
