// Micro-benchmarks of the 2PL lock table (cc/twopl/lock_table.hpp): the
// software cost of one shard serving lock requests, without messages. The
// closing figure "lock requests per second per core" of issue #15 compares
// with the paper's 1,350 M/s on 4,096 cores (330 K/s a core, messages
// included); the full protocol's rate, messages included, is rdtx-bench's
// `lock_requests` counter.
//   Transactions: each takes 10 locks (8 S, 2 X, as YCSB's 80 % reads) on
//   names drawn from `range` locks, then releases them all at once, under
//   each policy. items_per_second = lock requests per second.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "cc/twopl/lock_table.hpp"

using namespace rdtx::cc::twopl;

namespace {

void run(benchmark::State& state, DeadlockPolicy policy) {
  const uint64_t range = static_cast<uint64_t>(state.range(0));
  constexpr int kOpen = 32;  // transactions holding locks at once
  LockTable t({1 << 16, 1 << 16, 1 << 10}, policy, 1'000'000);
  std::mt19937_64 rng(1);
  std::vector<uint64_t> names(1 << 16);
  for (uint64_t& n : names) n = rng() % range;
  uint64_t txn = 1, now = 0, i = 0, requests = 0;
  LockTable::Event e;
  for (auto _ : state) {
    for (int k = 0; k < 10; ++k) {
      const LockMode m = k < 8 ? LockMode::kS : LockMode::kX;
      benchmark::DoNotOptimize(t.acquire(names[i++ & 0xffff], {txn, txn, m, 0}, now));
    }
    requests += 10;
    if (txn > kOpen) t.release_all(txn - kOpen);
    while (t.pop_event(&e)) {
    }
    ++txn;
    ++now;
    if (policy == DeadlockPolicy::kBoundedWait && (txn & 63) == 0) t.expire(now);
  }
  state.SetItemsProcessed(static_cast<int64_t>(requests));
}

void BM_NoWait(benchmark::State& s) { run(s, DeadlockPolicy::kNoWait); }
void BM_WaitDie(benchmark::State& s) { run(s, DeadlockPolicy::kWaitDie); }
void BM_BoundedWait(benchmark::State& s) { run(s, DeadlockPolicy::kBoundedWait); }

}  // namespace

// 1M locks: almost no conflicts; 1,000: some; 100: a hot set.
BENCHMARK(BM_NoWait)->Arg(1'000'000)->Arg(1'000)->Arg(100);
BENCHMARK(BM_WaitDie)->Arg(1'000'000)->Arg(1'000)->Arg(100);
BENCHMARK(BM_BoundedWait)->Arg(1'000'000)->Arg(1'000)->Arg(100);
BENCHMARK_MAIN();
