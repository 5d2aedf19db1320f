// RPC calls through lib/rpc: each of `outstanding` client coroutines sends a
// Batch of `batch` calls to a trivial echo handler on node 1 and waits for
// all replies. Compare with `echo`, the same exchange on raw verbs: the
// difference is the RPC layer's cost (validation, coalescing, call table).
#include <cstring>

#include "env/tsc.hpp"
#include "rdtx-perf/perf.hpp"
#include "rpc/endpoint.hpp"
#include "runtime/task.hpp"

namespace rdtx::perf {

namespace {

constexpr rpc::HandlerId kEchoHandler = 1;

runtime::Task<void> run_caller(rpc::Endpoint& ep, uint32_t server, uint32_t batch, uint32_t size, WorkerStats& st,
                               const Window& w) {
  runtime::Worker* self = runtime::Worker::current();
  std::vector<std::byte> req(size, std::byte{0x5a});
  std::vector<std::byte> out(static_cast<size_t>(size) * batch);
  std::vector<rpc::Reply> replies(batch);
  while (!self->stopping()) {
    rpc::Batch b(ep);
    uint64_t t0 = env::tsc();
    for (uint32_t i = 0; i < batch; ++i) {
      replies[i] = {out.data() + static_cast<size_t>(i) * size, size};
      if (!b.call(server, kEchoHandler, req, &replies[i])) ++st.errors;
    }
    bool ok = co_await b.send();
    uint64_t t1 = env::tsc();
    if (!ok) {
      ++st.errors;
      continue;
    }
    if (w.contains(t0, t1)) {
      st.ops += batch;
      st.latency_tsc.record(t1 - t0);
    }
  }
}

}  // namespace

Result<Bench> build_rpc(Cluster& c, const Params& p, uint32_t size, uint32_t batch, uint32_t outstanding,
                        const Window& w) {
  rpc::EndpointConfig cfg;
  cfg.recv_buffers = std::max<uint32_t>(256, 2 * batch * outstanding);
  cfg.send_buffers = cfg.recv_buffers;
  cfg.max_calls = std::max<uint32_t>(1024, 2 * batch * outstanding);
  Bench b;
  const uint32_t n = 2 * p.workers;  // endpoint 2i: client i (node 0); 2i+1: its server (node 1)
  std::vector<std::shared_ptr<rpc::Endpoint>> eps;
  for (uint32_t i = 0; i < n; ++i) {
    auto ep = rpc::Endpoint::create(*c.node[i % 2], i, n, cfg);
    if (!ep.ok()) return ep.error();
    eps.push_back(std::move(*ep));
  }
  for (uint32_t i = 0; i < p.workers; ++i) {
    auto& client = eps[2 * i];
    auto& server = eps[2 * i + 1];
    RDTX_TRY(client->connect(server->id(), server->address()));
    RDTX_TRY(server->connect(client->id(), client->address()));
    if (size > client->max_payload())
      return make_error(EINVAL, "--size %u exceeds the RPC payload limit (%u)", size, client->max_payload());
    RDTX_TRY(server->register_handler(kEchoHandler, "echo", [](rpc::Request& r) {
      std::memcpy(r.reply_buffer().data(), r.payload().data(), r.payload().size());
      r.set_reply_len(static_cast<uint32_t>(r.payload().size()));
    }));
    auto stats = std::make_unique<WorkerStats>();
    auto cw = std::make_unique<runtime::Worker>("rpc-client" + std::to_string(i));
    auto sw = std::make_unique<runtime::Worker>("rpc-server" + std::to_string(i));
    cw->add_poller([ep = client.get()] { return ep->poll(); });
    sw->add_poller([ep = server.get()] { return ep->poll(); });
    for (uint32_t k = 0; k < outstanding; ++k)
      cw->spawn(run_caller(*client, server->id(), batch, size, *stats, w));
    b.workers.push_back(std::move(cw));
    b.workers.push_back(std::move(sw));
    b.group.push_back(i);
    b.group.push_back(i);
    b.stats.push_back(std::move(stats));
  }
  for (auto& ep : eps) b.keep.push_back(ep);
  return b;
}

}  // namespace rdtx::perf
