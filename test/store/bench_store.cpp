// Micro-benchmarks of lib/store on the zero-latency shm driver, which
// measures the store's own software cost: local lookups, one-sided index
// lookups and fetches (with and without the location cache), cache probes.
// Two nodes in this process; node 1 owns a table of 1M tuples (16-byte
// metadata, 32-byte record). Remote operations run in batches of kBatch
// inside one coroutine, so a Worker pass per READ is part of the cost.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "rdma/rdma.hpp"
#include "rpc/endpoint.hpp"
#include "runtime/cq_poller.hpp"
#include "runtime/worker.hpp"
#include "store/loader.hpp"
#include "store/location_cache.hpp"
#include "store/remote_lookup.hpp"
#include "store/store.hpp"

using namespace rdtx;
using namespace rdtx::store;

namespace {

constexpr uint32_t kRows = 1'000'000;
constexpr int kBatch = 1000;

uint64_t key_of(uint64_t row) { return row * 0x9e3779b1ull + 17; }

template <typename T>
T must(Result<T> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "bench_store: %s\n", r.error().message.c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

struct Cluster {
  std::unique_ptr<rdma::Device> dev[2];
  std::unique_ptr<rdma::CompletionQueue> cq;
  std::unique_ptr<rdma::QueuePair> qp[2];
  std::unique_ptr<rdma::CompletionQueue> cq1;
  std::unique_ptr<Store> owner;
  Table* table = nullptr;
  TableDescriptor desc;
  std::unique_ptr<rdma::DeviceMemory> scratch_mem;
  rdma::MemoryRegion scratch_mr;
  runtime::Worker worker{"bench"};

  Cluster() {
    std::string fabric = "store-bench-" + std::to_string(getpid());
    for (uint32_t n = 0; n < 2; ++n) dev[n] = must(rdma::open_device("shm", {n, fabric}));
    cq = must(dev[0]->create_cq(1024));
    cq1 = must(dev[1]->create_cq(1024));
    rdma::QpInit init;
    init.send_cq = cq.get();
    qp[0] = must(dev[0]->create_qp(init));
    init.send_cq = cq1.get();
    qp[1] = must(dev[1]->create_qp(init));
    if (!qp[0]->connect(qp[1]->address()).ok() || !qp[1]->connect(qp[0]->address()).ok()) std::exit(1);
    owner = std::make_unique<Store>(*dev[1], 1);
    TableSpec s;
    s.id = 1;
    s.name = "bench";
    s.meta_bytes = 16;
    s.record_bytes = 32;
    s.capacity = kRows;
    table = must(owner->create_table(s));
    auto loaded = load(*table, kRows, [](uint64_t row, std::span<std::byte> rec) {
      std::memcpy(rec.data(), &row, sizeof row);
      return key_of(row);
    });
    if (!loaded.ok()) std::exit(1);
    desc = table->descriptor();
    scratch_mem = must(dev[0]->alloc_memory(4096));
    scratch_mr = must(dev[0]->reg_mr(scratch_mem->data(), 4096, rdma::kAccessAll));
    worker.add_poller([p = runtime::CqPoller(cq.get())]() mutable { return p(); });
  }

  Scratch scratch() const { return {static_cast<std::byte*>(scratch_mr.addr), 4096, scratch_mr.lkey}; }

  void drive() {
    while (worker.live_tasks() > 0) worker.poll_once();
  }
};

Cluster& cluster() {
  static Cluster c;
  return c;
}

void BM_LocalLookup(benchmark::State& state) {
  Cluster& c = cluster();
  std::mt19937_64 rng(1);
  for (auto _ : state) {
    TupleRef ref;
    int rc = c.table->lookup(key_of(rng() % kRows), &ref);
    benchmark::DoNotOptimize(rc);
    benchmark::DoNotOptimize(ref);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LocalLookup);

void BM_LocalLookupAndCopy(benchmark::State& state) {
  Cluster& c = cluster();
  std::mt19937_64 rng(1);
  std::vector<std::byte> out(c.table->tuple_bytes());
  for (auto _ : state) {
    TupleRef ref;
    if (c.table->lookup(key_of(rng() % kRows), &ref) == 0)
      benchmark::DoNotOptimize(c.table->copy_tuple(ref, out.data()));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_LocalLookupAndCopy);

// Mode 0: lookup_onesided only; 1: fetch without cache; 2: fetch through a
// warm cache with room for 4x the keys (confirmed); 3: same, single READ.
void BM_Remote(benchmark::State& state) {
  Cluster& c = cluster();
  const int mode = static_cast<int>(state.range(0));
  LocationCache cache(4 * kRows);
  uint64_t round_trips = 0, ops = 0;
  std::mt19937_64 rng(2);
  if (mode >= 2) {  // warm the cache (untimed)
    c.worker.spawn([](Cluster& c, LocationCache& cache) -> runtime::Task<void> {
      for (uint64_t row = 0; row < kRows; row += 1) {
        FetchResult f = co_await fetch_onesided(c.qp[0].get(), c.desc, key_of(row), c.scratch(), &cache);
        if (f.status != 0) std::exit(1);
      }
    }(c, cache));
    c.drive();
  }
  const LocationCacheStats warm = cache.stats();
  for (auto _ : state) {
    c.worker.spawn([](Cluster& c, LocationCache& cache, int mode, std::mt19937_64& rng, uint64_t& rts,
                      uint64_t& ops) -> runtime::Task<void> {
      for (int i = 0; i < kBatch; ++i) {
        uint64_t key = key_of(rng() % kRows);
        if (mode == 0) {
          LookupResult r = co_await lookup_onesided(c.qp[0].get(), c.desc, key, c.scratch());
          rts += r.reads;
        } else {
          FetchResult f = co_await fetch_onesided(c.qp[0].get(), c.desc, key, c.scratch(), mode >= 2 ? &cache : nullptr,
                                                  mode == 3 ? TupleCheck::kSingleRead : TupleCheck::kConfirmed);
          rts += f.round_trips;
        }
        ++ops;
      }
    }(c, cache, mode, rng, round_trips, ops));
    c.drive();
  }
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  state.counters["round_trips/op"] = static_cast<double>(round_trips) / static_cast<double>(ops);
  if (mode >= 2) {
    double hits = static_cast<double>(cache.stats().hits - warm.hits);
    double misses = static_cast<double>(cache.stats().misses - warm.misses);
    state.counters["hit_ratio"] = hits / (hits + misses);
  }
}
BENCHMARK(BM_Remote)->Arg(0)->Arg(1)->Arg(2)->Arg(3)->ArgNames({"mode"});

// The same fetch by RPC: node 1's handler looks the key up in its store and
// replies with the tuple (what OCC's fetch = "rpc" does per item). Both
// endpoints are polled on this thread, as the one-sided modes' target needs
// no CPU at all.
void BM_RpcFetch(benchmark::State& state) {
  Cluster& c = cluster();
  rpc::EndpointConfig cfg;
  cfg.recv_buffers = 256;
  cfg.send_buffers = 256;
  auto client = must(rpc::Endpoint::create(*c.dev[0], 0, 2, cfg));
  auto server = must(rpc::Endpoint::create(*c.dev[1], 1, 2, cfg));
  if (!client->connect(1, server->address()).ok() || !server->connect(0, client->address()).ok()) std::exit(1);
  Table* table = c.table;
  (void)server->register_handler(1, "fetch", [table](rpc::Request& r) {
    uint64_t key;
    if (r.payload().size() != sizeof key) return;
    std::memcpy(&key, r.payload().data(), sizeof key);
    TupleRef ref;
    if (table->lookup(key, &ref) == 0 && table->copy_tuple(ref, r.reply_buffer().data()))
      r.set_reply_len(table->tuple_bytes());
  });
  runtime::Worker cw("rpc-client"), sw("rpc-server");
  cw.add_poller([ep = client.get()] { return ep->poll(); });
  sw.add_poller([ep = server.get()] { return ep->poll(); });
  std::mt19937_64 rng(2);
  uint64_t ops = 0;
  std::vector<std::byte> out(c.table->tuple_bytes());
  for (auto _ : state) {
    cw.spawn([](rpc::Endpoint& ep, std::mt19937_64& rng, uint64_t& ops, std::vector<std::byte>& out)
                 -> runtime::Task<void> {
      for (int i = 0; i < kBatch; ++i) {
        uint64_t key = key_of(rng() % kRows);
        rpc::Batch b(ep);
        rpc::Reply r{out.data(), static_cast<uint32_t>(out.size())};
        b.call(1, 1, std::as_bytes(std::span(&key, 1)), &r);
        if (!co_await b.send() || r.len != out.size()) std::exit(1);
        ++ops;
      }
    }(*client, rng, ops, out));
    while (cw.live_tasks() > 0) {
      cw.poll_once();
      sw.poll_once();
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(ops));
  state.counters["round_trips/op"] = 1;
}
BENCHMARK(BM_RpcFetch);

void BM_CacheFind(benchmark::State& state) {
  LocationCache cache(1 << 20);
  for (uint64_t k = 0; k < (1 << 20); ++k) cache.insert(1, k, CachedLocation{1, 0x1000 + k * 64, 1});
  std::mt19937_64 rng(3);
  for (auto _ : state) {
    CachedLocation loc;
    benchmark::DoNotOptimize(cache.find(1, rng() % (1 << 20), &loc));
    benchmark::DoNotOptimize(loc);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CacheFind);

}  // namespace

BENCHMARK_MAIN();
