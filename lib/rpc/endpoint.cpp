// Set-up, the call table, the poller and Batch. Receiving, sending and
// timeouts each have their own file (see endpoint_impl.hpp).
#include "rpc/endpoint.hpp"

#include <algorithm>

#include "env/tsc.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

const char* to_string(Malformed m) {
  switch (m) {
    case Malformed::kShort: return "shorter than its headers";
    case Malformed::kMagic: return "bad magic or version";
    case Malformed::kSource: return "unknown source endpoint";
    case Malformed::kCount: return "bad message count";
    case Malformed::kLength: return "payload past the end";
    case Malformed::kKind: return "unknown message kind";
    case Malformed::kHandler: return "handler id out of range";
    case Malformed::kCount_: break;
  }
  return "?";
}

const char* to_string(CallStatus s) {
  switch (s) {
    case CallStatus::kPending: return "pending";
    case CallStatus::kOk: return "ok";
    case CallStatus::kTimeout: return "timeout";
    case CallStatus::kNoHandler: return "no such handler at the destination";
    case CallStatus::kTooLarge: return "reply larger than the caller's buffer";
    case CallStatus::kSendFailed: return "could not be sent";
  }
  return "?";
}

uint64_t EndpointStats::malformed_total() const {
  uint64_t n = 0;
  for (uint64_t m : malformed) n += m;
  return n;
}

uint64_t Endpoint::recv_buffers_needed(const EndpointConfig& cfg, uint32_t max_peers) {
  return 2ull * cfg.credits * max_peers + kRepostBatch;
}

Result<void> Endpoint::check_config(const rdma::DeviceCaps& caps, const EndpointConfig& cfg, uint32_t max_peers) {
  if (max_peers == 0 || max_peers > kMaxEndpoints)
    return make_error(EINVAL, "rpc: %u endpoints, must be 1..%u", max_peers, kMaxEndpoints);
  if (cfg.credits == 0 || cfg.credits > kMaxCredits)
    return make_error(EINVAL, "rpc: credits = %u, must be 1..%u", cfg.credits, kMaxCredits);
  if (cfg.send_buffers < 2 || cfg.max_calls == 0 || cfg.signal_every == 0)
    return make_error(EINVAL, "rpc: send_buffers (%u) must be >= 2, max_calls (%u) and signal_every (%u) > 0",
                      cfg.send_buffers, cfg.max_calls, cfg.signal_every);
  const uint64_t need = recv_buffers_needed(cfg, max_peers);
  const uint64_t recv = std::max<uint64_t>(cfg.recv_buffers, need);
  const uint64_t limit = std::min<uint64_t>(caps.max_recv_wr, kMaxRecvBuffers);
  if (recv > limit)
    return make_error(EINVAL,
                      "rpc: %llu receive buffers per endpoint (%s) exceed %s (%llu)",
                      static_cast<unsigned long long>(recv),
                      recv == need ? "2 x credits x endpoints + 16" : "recv_buffers",
                      limit == caps.max_recv_wr ? "the device's receive queue" : "the cap kMaxRecvBuffers",
                      static_cast<unsigned long long>(limit));
  if (2ull * cfg.send_buffers > caps.max_send_wr)
    return make_error(EINVAL, "rpc: %u send buffers need a send queue of %u, the device's holds %u", cfg.send_buffers,
                      2 * cfg.send_buffers, caps.max_send_wr);
  if (2ull * cfg.send_buffers + recv > caps.max_cqe)
    return make_error(EINVAL, "rpc: a completion queue of %llu (2 x %u send buffers + %llu receive buffers) exceeds "
                      "the device's %u", static_cast<unsigned long long>(2ull * cfg.send_buffers + recv),
                      cfg.send_buffers, static_cast<unsigned long long>(recv), caps.max_cqe);
  if (caps.max_msg_size < kDatagramOverhead + 8)
    return make_error(EINVAL, "rpc: device message size %u is too small", caps.max_msg_size);
  return {};
}

Result<std::unique_ptr<Endpoint>> Endpoint::create(rdma::Device& dev, uint32_t id, uint32_t max_peers,
                                                   const EndpointConfig& config) {
  const auto& caps = dev.caps();
  if (id >= max_peers) return make_error(EINVAL, "rpc endpoint id %u must be below max_peers %u", id, max_peers);
  if (auto ok = check_config(caps, config, max_peers); !ok.ok())
    return make_error(ok.error().code, "rpc endpoint %u: %s", id, ok.error().message.c_str());
  EndpointConfig cfg = config;
  cfg.recv_buffers = static_cast<uint32_t>(std::max<uint64_t>(cfg.recv_buffers, recv_buffers_needed(cfg, max_peers)));

  std::unique_ptr<Endpoint> ep(new Endpoint());
  ep->impl_ = std::make_unique<Impl>();
  Impl& m = *ep->impl_;
  m.cfg = cfg;
  ep->id_ = id;
  ep->device_ = &dev;
  ep->mtu_ = caps.max_msg_size & ~7u;
  ep->configuration_ = cfg.configuration;
  m.mr_stride = ep->mtu_;
  m.max_inline = caps.max_inline;

  auto cq = dev.create_cq(2 * cfg.send_buffers + cfg.recv_buffers);
  if (!cq.ok()) return cq.error();
  m.cq = std::move(*cq);
  rdma::QpInit init;
  init.type = rdma::QpType::kUd;
  init.send_cq = m.cq.get();
  init.recv_cq = m.cq.get();
  init.max_send_wr = 2 * cfg.send_buffers;
  init.max_recv_wr = cfg.recv_buffers;
  init.max_inline = std::min<uint32_t>(caps.max_inline, 256);
  m.max_inline = init.max_inline;
  auto qp = dev.create_qp(init);
  if (!qp.ok()) return qp.error();
  ep->qp_ = std::move(*qp);

  size_t bytes = static_cast<size_t>(cfg.recv_buffers + cfg.send_buffers) * ep->mtu_;
  auto mem = dev.alloc_memory(bytes);
  if (!mem.ok()) return mem.error();
  m.mem = std::move(*mem);
  auto mr = dev.reg_mr(m.mem->data(), m.mem->size(), rdma::kLocalWrite);
  if (!mr.ok()) return mr.error();
  m.mr = *mr;
  m.recv_base = static_cast<std::byte*>(m.mem->data());
  m.send_base = m.recv_base + static_cast<size_t>(cfg.recv_buffers) * ep->mtu_;

  std::vector<rdma::RecvRequest> rr(cfg.recv_buffers);
  for (uint32_t i = 0; i < cfg.recv_buffers; ++i)
    rr[i] = {i, i + 1 < cfg.recv_buffers ? &rr[i + 1] : nullptr, m.recv_buf(i), ep->mtu_, m.mr.lkey};
  rdma::RecvRequest* bad = nullptr;
  if (int rc = ep->qp_->post_recv(rr.data(), &bad); rc != 0)
    return make_error(-rc, "rpc endpoint %u: cannot post %u receive buffers", id, cfg.recv_buffers);

  for (uint32_t i = cfg.send_buffers; i-- > 0;) m.free_bufs.push_back(i);
  m.inflight.resize(cfg.send_buffers);
  m.peers.resize(max_peers);
  for (auto& p : m.peers) p.credits = cfg.credits;
  m.active.reserve(max_peers);
  m.owing.reserve(max_peers);
  m.buf_len.resize(cfg.send_buffers);
  m.buf_next.resize(cfg.send_buffers);
  m.wrs.resize(std::min<size_t>(max_peers + kBurst, cfg.send_buffers));
  m.wr_buf.resize(m.wrs.size());
  m.credit_return_at = std::max(1u, cfg.credits / 2);
  m.header = {kMagic, kVersion, 0, static_cast<uint16_t>(id), 0, 0, 0};
  m.calls.resize(cfg.max_calls);
  for (uint32_t i = cfg.max_calls; i-- > 0;) m.free_calls.push_back(i);
  m.timeout_tsc = env::ns_to_tsc(cfg.timeout_ns);
  m.max_timeout_tsc = std::max(m.timeout_tsc, env::ns_to_tsc(cfg.max_timeout_ns));
  for (auto& p : m.peers) p.rtt.rto = m.timeout_tsc;
  ep->stats_.timeout_max_ns = cfg.timeout_ns;
  m.passive_delay_tsc = env::ns_to_tsc(cfg.passive_delay_ns);
  m.scan_interval_tsc = std::min(m.timeout_tsc / 4 + 1, env::ns_to_tsc(1'000'000));
  m.scratch.resize(ep->max_payload());
  ep->published_.emplace(endpoint_list(), "ep" + std::to_string(id));
  return ep;
}

Endpoint::~Endpoint() {
  // The QP goes before the CQ and memory it uses.
  qp_.reset();
  if (impl_) impl_->peers.clear();
}

Result<void> Endpoint::connect(uint32_t peer, const rdma::QpAddress& addr) {
  Impl& m = *impl_;
  if (peer >= m.peers.size())
    return make_error(EINVAL, "rpc endpoint %u: peer id %u is not below max_peers %zu", id_, peer, m.peers.size());
  auto ah = device_->create_ah(addr);
  if (!ah.ok()) return ah.error();
  m.peers[peer].ah = std::move(*ah);
  return {};
}

Result<void> Endpoint::register_handler(HandlerId h, std::string name, Handler fn) {
  Impl& m = *impl_;
  if (h >= kMaxHandlers) return make_error(EINVAL, "rpc handler '%s': id %u is not below %u", name.c_str(), h, kMaxHandlers);
  if (m.handlers[h])
    return make_error(EEXIST, "rpc handler '%s': id %u is already taken by '%s'", name.c_str(), h,
                      m.handler_names[h].c_str());
  m.handlers[h] = std::move(fn);
  m.handler_names[h] = std::move(name);
  return {};
}

uint64_t Endpoint::start_call(uint32_t dest, Reply* reply, runtime::WaitGroup* wg, uint64_t timeout_tsc) {
  Impl& m = *impl_;
  if (m.free_calls.empty()) return 0;
  uint32_t idx = m.free_calls.back();
  m.free_calls.pop_back();
  Impl::Call& c = m.calls[idx];
  c.state = reply ? CallState::kWaiting : CallState::kPassive;
  c.dest = dest;
  c.reply = reply;
  c.wg = wg;
  const uint64_t now = env::tsc();
  const uint64_t adaptive = dest < m.peers.size() ? m.timeout_for(m.peers[dest]) : m.timeout_tsc;
  c.deadline = now + std::max(timeout_tsc, adaptive);
  c.sent = now;
  c.sample = timeout_tsc == 0;
  if (idx >= m.calls_high) m.calls_high = idx + 1;
  if (reply) {
    reply->status = CallStatus::kPending;
    reply->len = 0;
    ++calls_in_flight_;
  } else {
    ++passive_outstanding_;
  }
  return make_cookie(idx, c.gen);
}

uint32_t Endpoint::credits(uint32_t peer) const {
  return peer < impl_->peers.size() ? impl_->peers[peer].credits : 0;
}

uint64_t Endpoint::settled_timeout_ns() const {
  const Impl& m = *impl_;
  uint64_t t = m.timeout_tsc;
  for (const Impl::Peer& p : m.peers) t = std::max(t, p.rtt.rto);
  return env::tsc_to_ns(t);
}

uint32_t Endpoint::recv_buffers() const { return impl_->cfg.recv_buffers; }

// One pass of the worker's poller: receive and dispatch a burst, post the
// replies and acks that should go, expire overdue calls.
int Endpoint::poll() {
  Impl& m = *impl_;
  const uint64_t now = env::tsc();  // one clock read for the whole pass
  // A pass after a long gap (the thread was descheduled: one thread running
  // every node stops them all) receives before it expires anything, and
  // does not count the gap beyond a scan interval against the peers.
  if (now - m.last_poll_tsc > m.scan_interval_tsc && m.last_poll_tsc != 0)
    not_polled(now - m.last_poll_tsc - m.scan_interval_tsc);
  m.last_poll_tsc = now;
  int work = receive(now);
  if (m.flush_due(now)) flush(now);
  // The scan is due a few times per timeout: decided here, without a call.
  if (calls_in_flight_ + passive_outstanding_ == 0 && m.active.empty()) return work;
  if (now < m.next_scan_tsc) return work;
  return work + expire_calls(now);
}

void Batch::set_timeout_ns(uint64_t ns) { timeout_tsc_ = ns == 0 ? 0 : env::ns_to_tsc(ns); }

bool Batch::call(uint32_t dest, HandlerId h, std::span<const std::byte> req, Reply* reply, bool lazy) {
  uint64_t cookie = ep_.start_call(dest, reply, &wg_, timeout_tsc_);
  if (cookie == 0 ||
      !ep_.append(dest, lazy ? Kind::kLazyRequest : Kind::kRequest, h, WireStatus::kOk, cookie, req, true)) {
    if (cookie != 0) {
      auto& m = *ep_.impl_;
      uint32_t idx = cookie_slot(cookie);
      --ep_.calls_in_flight_;
      m.release_call(idx);
    }
    reply->status = CallStatus::kSendFailed;
    return false;
  }
  ++ep_.stats_.calls;
  wg_.add(1);
  return true;
}

bool Batch::oneway(uint32_t dest, HandlerId h, std::span<const std::byte> req) {
  if (!ep_.append(dest, Kind::kOneway, h, WireStatus::kOk, 0, req, true)) return false;
  ++ep_.stats_.oneways;
  return true;
}

bool Batch::passive(uint32_t dest, HandlerId h, std::span<const std::byte> req) {
  uint64_t cookie = ep_.start_call(dest, nullptr, nullptr);
  if (cookie == 0 || !ep_.append(dest, Kind::kPassive, h, WireStatus::kOk, cookie, req, true)) {
    if (cookie != 0) {
      auto& m = *ep_.impl_;
      uint32_t idx = cookie_slot(cookie);
      --ep_.passive_outstanding_;
      m.release_call(idx);
    }
    return false;
  }
  ++ep_.stats_.passives;
  return true;
}

runtime::WaitGroup::Ref Batch::send() {
  const uint64_t now = env::tsc();
  if (ep_.impl_->flush_due(now)) ep_.flush(now);
  return wg_.wait();
}

}  // namespace rdtx::rpc
