// SEND/RECV echo over datagram QPs, RPC style: a client worker on node 0 and
// a server worker on node 1 per pair. Each of `outstanding` client coroutines
// sends a doorbell batch of `batch` requests and waits for every reply; the
// server answers each burst of requests with one doorbell of replies.
#include <algorithm>
#include <cstring>

#include "env/tsc.hpp"
#include "rdtx-perf/perf.hpp"
#include "runtime/task.hpp"

namespace rdtx::perf {

namespace {

// Request and reply start with this header; the payload is echoed as is.
struct MsgHeader {
  uint32_t slot;  // client coroutine slot, validated on return
  uint32_t seq;
};

constexpr uint32_t kSignalEvery = 32;  // server: one signaled SEND per this many
constexpr int kBurst = 32;

struct ClientSlot {
  std::vector<rdma::WorkRequest> wrs;
  runtime::WaitGroup wg;
};

struct Endpoint {
  rdma::QueuePair* qp = nullptr;
  rdma::CompletionQueue* cq = nullptr;
  const rdma::AddressHandle* peer = nullptr;
  char* recv_base = nullptr;
  uint32_t recv_lkey = 0;
  uint32_t buf_bytes = 0;
  uint64_t* errors = nullptr;  // the pair's WorkerStats::errors
  rdma::RecvRequest repost[kBurst];

  // Gives the buffers of this burst's RECV completions back to the QP.
  void repost_burst(const rdma::Completion* wc, int n) {
    int k = 0;
    for (int i = 0; i < n; ++i) {
      if (wc[i].opcode != rdma::Opcode::kRecv) continue;
      rdma::RecvRequest& r = repost[k];
      r.wr_id = wc[i].wr_id;
      r.addr = recv_base + wc[i].wr_id * buf_bytes;
      r.length = buf_bytes;
      r.lkey = recv_lkey;
      r.next = nullptr;
      if (k > 0) repost[k - 1].next = &r;
      ++k;
    }
    rdma::RecvRequest* bad = nullptr;
    if (k > 0 && qp->post_recv(repost, &bad) != 0) ++*errors;
  }
};

struct Client {
  Endpoint ep;
  std::vector<ClientSlot> slots;
  WorkerStats* stats;
  const Window* window;

  int poll() {
    rdma::Completion wc[kBurst];
    int n = ep.cq->poll(wc, kBurst);
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != rdma::Status::kSuccess) {
        ++stats->errors;
        continue;
      }
      if (wc[i].opcode != rdma::Opcode::kRecv) continue;
      MsgHeader h;
      std::memcpy(&h, ep.recv_base + wc[i].wr_id * ep.buf_bytes, sizeof h);
      if (wc[i].byte_len < sizeof h || h.slot >= slots.size()) {
        ++stats->errors;  // a malformed reply: counted, never trusted
        continue;
      }
      slots[h.slot].wg.done();
    }
    ep.repost_burst(wc, n);
    return n;
  }
};

struct Server {
  Endpoint ep;
  char* send_base = nullptr;
  uint32_t send_lkey = 0;
  uint32_t send_slots = 0;
  uint32_t next_send = 0;
  bool use_inline = false;
  rdma::WorkRequest replies[kBurst];

  int poll() {
    rdma::Completion wc[kBurst];
    int n = ep.cq->poll(wc, kBurst);
    int k = 0;
    for (int i = 0; i < n; ++i) {
      if (wc[i].status != rdma::Status::kSuccess) {
        ++*ep.errors;
        continue;
      }
      if (wc[i].opcode != rdma::Opcode::kRecv) continue;
      const char* req = ep.recv_base + wc[i].wr_id * ep.buf_bytes;
      rdma::WorkRequest& wr = replies[k];
      wr = {};
      wr.opcode = rdma::Opcode::kSend;
      wr.ah = ep.peer;
      wr.length = wc[i].byte_len;
      if (use_inline) {
        // Inline copies the payload at post time, so the request buffer
        // itself is the reply and is reposted right after.
        wr.local = const_cast<char*>(req);
        wr.flags = rdma::kInline;
      } else {
        char* out = send_base + (next_send % send_slots) * ep.buf_bytes;
        std::memcpy(out, req, wc[i].byte_len);
        wr.local = out;
        wr.lkey = send_lkey;
      }
      if (++next_send % kSignalEvery == 0) wr.flags |= rdma::kSignaled;
      if (k > 0) replies[k - 1].next = &wr;
      ++k;
    }
    rdma::WorkRequest* bad = nullptr;
    if (k > 0 && ep.qp->post_send(replies, &bad) != 0) ++*ep.errors;
    ep.repost_burst(wc, n);
    return n;
  }
};

runtime::Task<void> run_client_slot(Client& c, ClientSlot& s) {
  runtime::Worker* self = runtime::Worker::current();
  const auto batch = static_cast<int>(s.wrs.size());
  while (!self->stopping()) {
    s.wg.reset(batch);
    uint64_t t0 = env::tsc();
    rdma::WorkRequest* bad = nullptr;
    if (c.ep.qp->post_send(s.wrs.data(), &bad) != 0) {
      ++c.stats->errors;
      co_return;
    }
    co_await s.wg;
    uint64_t t1 = env::tsc();
    if (c.window->contains(t0, t1)) {
      c.stats->ops += static_cast<uint64_t>(batch);
      c.stats->latency_tsc.record(t1 - t0);
    }
  }
}

struct Built {
  std::shared_ptr<rdma::CompletionQueue> cq;
  std::shared_ptr<rdma::QueuePair> qp;
  std::shared_ptr<rdma::DeviceMemory> mem;
  rdma::MemoryRegion mr;
};

// A UD endpoint with `recv_n` posted buffers and `send_n` send buffers of
// `buf` bytes each, in one registered allocation (receive buffers first).
Result<Built> make_endpoint(rdma::Device& dev, uint32_t sq, uint32_t recv_n, uint32_t send_n, uint32_t buf) {
  Built b;
  auto cq = dev.create_cq(sq + recv_n + 64);
  if (!cq.ok()) return cq.error();
  b.cq = std::move(*cq);
  rdma::QpInit init;
  init.type = rdma::QpType::kUd;
  init.send_cq = b.cq.get();
  init.recv_cq = b.cq.get();
  init.max_send_wr = sq;
  init.max_recv_wr = recv_n;
  init.max_inline = std::min<uint32_t>(dev.caps().max_inline, 256);
  auto qp = dev.create_qp(init);
  if (!qp.ok()) return qp.error();
  b.qp = std::move(*qp);
  auto mem = dev.alloc_memory(static_cast<size_t>(recv_n + send_n) * buf);
  if (!mem.ok()) return mem.error();
  b.mem = std::move(*mem);
  auto mr = dev.reg_mr(b.mem->data(), b.mem->size(), rdma::kAccessAll);
  if (!mr.ok()) return mr.error();
  b.mr = *mr;
  std::vector<rdma::RecvRequest> rr(recv_n);
  for (uint32_t i = 0; i < recv_n; ++i) {
    rr[i].wr_id = i;
    rr[i].addr = static_cast<char*>(b.mem->data()) + static_cast<size_t>(i) * buf;
    rr[i].length = buf;
    rr[i].lkey = b.mr.lkey;
    rr[i].next = i + 1 < recv_n ? &rr[i + 1] : nullptr;
  }
  rdma::RecvRequest* bad = nullptr;
  if (int rc = b.qp->post_recv(rr.data(), &bad); rc != 0)
    return make_error(-rc, "cannot post %u receive buffers: %s", recv_n, std::strerror(-rc));
  return b;
}

}  // namespace

Result<Bench> build_echo(Cluster& c, const Params& p, uint32_t size, uint32_t batch, uint32_t outstanding,
                         const Window& w) {
  size = std::max<uint32_t>(size, sizeof(MsgHeader));
  const auto& caps0 = c.node[0]->caps();
  if (size > caps0.max_msg_size)
    return make_error(EINVAL, "--size %u exceeds the device's message size limit (%u)", size, caps0.max_msg_size);
  const uint32_t in_flight = batch * outstanding;
  const uint32_t recv_n = std::max<uint32_t>(2 * in_flight, 2 * kBurst);
  const uint32_t server_sq = recv_n + 2 * kSignalEvery;
  if (in_flight > caps0.max_send_wr || recv_n > caps0.max_recv_wr || server_sq > caps0.max_send_wr)
    return make_error(EINVAL, "--batch %u x --outstanding %u needs %u receive and %u send queue entries; the device allows %u and %u",
                      batch, outstanding, recv_n, server_sq, caps0.max_recv_wr, caps0.max_send_wr);

  Bench b;
  for (uint32_t wi = 0; wi < p.workers; ++wi) {
    auto ce = make_endpoint(*c.node[0], in_flight, recv_n, in_flight, size);
    if (!ce.ok()) return ce.error();
    auto se = make_endpoint(*c.node[1], server_sq, recv_n, server_sq, size);
    if (!se.ok()) return se.error();
    auto ah_c = c.node[0]->create_ah(se->qp->address());
    if (!ah_c.ok()) return ah_c.error();
    auto ah_s = c.node[1]->create_ah(ce->qp->address());
    if (!ah_s.ok()) return ah_s.error();

    auto stats = std::make_unique<WorkerStats>();
    auto client = std::make_shared<Client>();
    client->stats = stats.get();
    client->window = &w;
    client->ep = {ce->qp.get(), ce->cq.get(), ah_c->get(), static_cast<char*>(ce->mem->data()), ce->mr.lkey, size,
                  &stats->errors, {}};
    client->slots = std::vector<ClientSlot>(outstanding);
    const bool client_inline = p.use_inline && size <= std::min<uint32_t>(caps0.max_inline, 256);
    char* send_base = static_cast<char*>(ce->mem->data()) + static_cast<size_t>(recv_n) * size;
    for (uint32_t si = 0; si < outstanding; ++si) {
      auto& s = client->slots[si];
      s.wrs.resize(batch);
      for (uint32_t i = 0; i < batch; ++i) {
        char* buf = send_base + static_cast<size_t>(si * batch + i) * size;
        std::memset(buf, 0x5a, size);
        MsgHeader h{si, i};
        std::memcpy(buf, &h, sizeof h);
        rdma::WorkRequest& wr = s.wrs[i];
        wr.opcode = rdma::Opcode::kSend;
        wr.ah = client->ep.peer;
        wr.local = buf;
        wr.length = size;
        wr.lkey = ce->mr.lkey;
        wr.flags = client_inline ? uint32_t{rdma::kInline} : 0u;
        wr.next = i + 1 < batch ? &s.wrs[i + 1] : nullptr;
      }
      // Frees this batch's send-queue slots once polled; nobody waits on it.
      s.wrs.back().flags |= rdma::kSignaled;
    }

    auto server = std::make_shared<Server>();
    server->ep = {se->qp.get(), se->cq.get(), ah_s->get(), static_cast<char*>(se->mem->data()), se->mr.lkey, size,
                  &stats->errors, {}};
    server->send_base = static_cast<char*>(se->mem->data()) + static_cast<size_t>(recv_n) * size;
    server->send_lkey = se->mr.lkey;
    server->send_slots = server_sq;
    server->use_inline = client_inline;

    auto cw = std::make_unique<runtime::Worker>("client" + std::to_string(wi));
    auto sw = std::make_unique<runtime::Worker>("server" + std::to_string(wi));
    cw->add_poller([client] { return client->poll(); });
    sw->add_poller([server] { return server->poll(); });
    for (auto& s : client->slots) cw->spawn(run_client_slot(*client, s));

    // Released in this order: pollers' state, address handles, QPs, CQs, memory.
    b.keep.push_back(client);
    b.keep.push_back(server);
    b.keep.push_back(std::shared_ptr<rdma::AddressHandle>(std::move(*ah_c)));
    b.keep.push_back(std::shared_ptr<rdma::AddressHandle>(std::move(*ah_s)));
    for (Built* e : {&*ce, &*se}) {
      b.keep.push_back(e->qp);
      b.keep.push_back(e->cq);
      b.keep.push_back(deregister_on_release(e == &*ce ? c.node[0].get() : c.node[1].get(), e->mr));
      b.keep.push_back(e->mem);
    }
    // Both endpoints of a pair share a placement group, hence one lcore.
    b.workers.push_back(std::move(cw));
    b.workers.push_back(std::move(sw));
    b.group.push_back(wi);
    b.group.push_back(wi);
    b.stats.push_back(std::move(stats));
  }
  return b;
}

}  // namespace rdtx::perf
