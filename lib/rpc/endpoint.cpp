#include "rpc/endpoint.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "env/log.hpp"
#include "env/tsc.hpp"

namespace rdtx::rpc {

namespace {

const env::LogType& log() {
  static const env::LogType type("rdtx.rpc");
  return type;
}

constexpr int kBurst = 32;
constexpr uint32_t kNoBuffer = UINT32_MAX;

enum class CallState : uint8_t { kFree, kWaiting, kPassive };

}  // namespace

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

struct Endpoint::Impl {
  EndpointConfig cfg;
  std::unique_ptr<rdma::CompletionQueue> cq;
  std::unique_ptr<rdma::DeviceMemory> mem;
  rdma::MemoryRegion mr;
  uint32_t max_inline = 0;

  // Receive side: buffer i at recv_base + i * mtu, wr_id = i.
  std::byte* recv_base = nullptr;
  std::array<rdma::RecvRequest, kBurst> repost{};

  // Send side: datagram buffers, free stack, and those in flight in post
  // order (released when a later signaled SEND completes).
  std::byte* send_base = nullptr;
  std::vector<uint32_t> free_bufs;
  struct InFlight {
    uint64_t seq;
    uint32_t buf;
  };
  std::vector<InFlight> inflight;  // ring of send_buffers entries
  size_t inflight_head = 0, inflight_size = 0;
  uint64_t post_seq = 0;

  // Per peer: its address handle and the datagram being built for it.
  struct Peer {
    std::unique_ptr<rdma::AddressHandle> ah;
    uint32_t buf = kNoBuffer;
    uint32_t len = 0;
    uint8_t count = 0;
    bool urgent = false;
    bool open = false;
    uint64_t since_tsc = 0;  // first lazy (passive ack) message, 0 if none
  };
  std::vector<Peer> peers;
  std::vector<uint32_t> open;  // peers with a datagram being built
  std::vector<rdma::WorkRequest> wrs;
  std::vector<uint32_t> wr_buf;  // buffer of wrs[i], or kNoBuffer if inline

  struct Call {
    uint32_t gen = 1;
    CallState state = CallState::kFree;
    uint32_t dest = 0;
    Reply* reply = nullptr;
    runtime::WaitGroup* wg = nullptr;
    uint64_t deadline = 0;
  };
  std::vector<Call> calls;
  std::vector<uint32_t> free_calls;
  uint64_t timeout_tsc = 0, passive_delay_tsc = 0, scan_interval_tsc = 0, next_scan_tsc = 0;

  std::array<Handler, kMaxHandlers> handlers;
  std::array<std::string, kMaxHandlers> handler_names;
  std::vector<std::byte> scratch;  // a handler's reply is written here

  uint64_t last_malformed_log = 0;
  uint64_t malformed_since_log = 0;

  std::byte* send_buf(uint32_t i) const { return send_base + static_cast<size_t>(i) * mr_stride; }
  std::byte* recv_buf(uint64_t i) const { return recv_base + static_cast<size_t>(i) * mr_stride; }
  uint32_t mr_stride = 0;  // == mtu
};

Result<std::unique_ptr<Endpoint>> Endpoint::create(rdma::Device& dev, uint32_t id, uint32_t max_peers,
                                                   const EndpointConfig& cfg) {
  const auto& caps = dev.caps();
  if (id >= max_peers) return make_error(EINVAL, "rpc endpoint id %u must be below max_peers %u", id, max_peers);
  if (cfg.recv_buffers == 0 || cfg.send_buffers == 0 || cfg.max_calls == 0 || cfg.signal_every == 0)
    return make_error(EINVAL, "rpc endpoint %u: recv_buffers, send_buffers, max_calls, signal_every must be > 0", id);
  if (cfg.recv_buffers > caps.max_recv_wr || 2 * cfg.send_buffers > caps.max_send_wr)
    return make_error(EINVAL, "rpc endpoint %u: %u receive / %u send buffers exceed the device's queues (%u / %u)", id,
                      cfg.recv_buffers, 2 * cfg.send_buffers, caps.max_recv_wr, caps.max_send_wr);
  if (caps.max_msg_size < kDatagramOverhead + 8)
    return make_error(EINVAL, "rpc endpoint %u: device message size %u is too small", id, caps.max_msg_size);

  std::unique_ptr<Endpoint> ep(new Endpoint());
  ep->impl_ = std::make_unique<Impl>();
  Impl& m = *ep->impl_;
  m.cfg = cfg;
  ep->id_ = id;
  ep->device_ = &dev;
  ep->mtu_ = caps.max_msg_size & ~7u;
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
  m.open.reserve(max_peers);
  m.wrs.resize(max_peers);
  m.wr_buf.resize(max_peers);
  m.calls.resize(cfg.max_calls);
  for (uint32_t i = cfg.max_calls; i-- > 0;) m.free_calls.push_back(i);
  m.timeout_tsc = env::ns_to_tsc(cfg.timeout_ns);
  m.passive_delay_tsc = env::ns_to_tsc(cfg.passive_delay_ns);
  m.scan_interval_tsc = std::min(m.timeout_tsc / 4 + 1, env::ns_to_tsc(1'000'000));
  m.scratch.resize(ep->max_payload());
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

uint64_t Endpoint::start_call(uint32_t dest, Reply* reply, runtime::WaitGroup* wg) {
  Impl& m = *impl_;
  if (m.free_calls.empty()) return 0;
  uint32_t idx = m.free_calls.back();
  m.free_calls.pop_back();
  Impl::Call& c = m.calls[idx];
  c.state = reply ? CallState::kWaiting : CallState::kPassive;
  c.dest = dest;
  c.reply = reply;
  c.wg = wg;
  c.deadline = env::tsc() + m.timeout_tsc;
  if (reply) {
    reply->status = CallStatus::kPending;
    reply->len = 0;
    ++calls_in_flight_;
  } else {
    ++passive_outstanding_;
  }
  return (static_cast<uint64_t>(c.gen) << 32) | idx;
}

namespace {
// Ends a call: bumps the generation so a late reply is recognised as stale.
void release_call(std::vector<uint32_t>& free_calls, auto& c, uint32_t idx) {
  c.state = CallState::kFree;
  c.reply = nullptr;
  c.wg = nullptr;
  if (++c.gen == 0) c.gen = 1;  // cookie 0 is never valid
  free_calls.push_back(idx);
}
}  // namespace

bool Endpoint::append(uint32_t dest, Kind kind, HandlerId h, WireStatus st, uint64_t cookie,
                      std::span<const std::byte> payload, bool urgent) {
  Impl& m = *impl_;
  if (dest >= m.peers.size() || !m.peers[dest].ah) return false;
  const uint32_t need = sizeof(MsgHeader) + pad8(static_cast<uint32_t>(payload.size()));
  if (payload.size() > max_payload()) return false;
  Impl::Peer& p = m.peers[dest];
  if (p.buf != kNoBuffer && (p.len + need > mtu_ || p.count == UINT8_MAX)) {
    // The datagram being built is full: send it now, alone.
    p.urgent = true;
    flush(false);
  }
  if (p.buf == kNoBuffer) {
    if (m.free_bufs.empty()) {
      ++stats_.send_failures;
      return false;
    }
    p.buf = m.free_bufs.back();
    m.free_bufs.pop_back();
    p.len = sizeof(DatagramHeader);
    p.count = 0;
    p.urgent = false;
    p.since_tsc = 0;
    if (!p.open) {
      p.open = true;
      m.open.push_back(dest);
    }
  }
  std::byte* base = m.send_buf(p.buf);
  MsgHeader mh{kind, h, st, 0, static_cast<uint32_t>(payload.size()), cookie};
  std::memcpy(base + p.len, &mh, sizeof mh);
  if (!payload.empty()) std::memcpy(base + p.len + sizeof mh, payload.data(), payload.size());
  p.len += need;
  ++p.count;
  if (urgent) {
    p.urgent = true;
  } else if (p.since_tsc == 0) {
    p.since_tsc = env::tsc();
  }
  return true;
}

void Endpoint::flush(bool all) {
  Impl& m = *impl_;
  if (m.open.empty()) return;
  const uint64_t now = env::tsc();
  size_t n = 0, keep = 0;
  for (uint32_t dest : m.open) {
    Impl::Peer& p = m.peers[dest];
    bool aged = p.since_tsc != 0 && now - p.since_tsc >= m.passive_delay_tsc;
    if (!(all || p.urgent || aged)) {
      m.open[keep++] = dest;  // a lazy ack waits for a ride or for its delay
      continue;
    }
    std::byte* base = m.send_buf(p.buf);
    DatagramHeader dh{kMagic, kVersion, p.count, id_};
    std::memcpy(base, &dh, sizeof dh);
    rdma::WorkRequest& wr = m.wrs[n];
    wr = {};
    wr.opcode = rdma::Opcode::kSend;
    wr.ah = p.ah.get();
    wr.local = base;
    wr.length = p.len;
    wr.lkey = m.mr.lkey;
    wr.wr_id = ++m.post_seq;
    if (p.len <= m.max_inline) {
      wr.flags |= rdma::kInline;
      m.wr_buf[n] = kNoBuffer;
      m.free_bufs.push_back(p.buf);  // copied at post time
    } else {
      m.wr_buf[n] = p.buf;
    }
    if (m.post_seq % m.cfg.signal_every == 0) wr.flags |= rdma::kSignaled;
    if (n > 0) m.wrs[n - 1].next = &wr;
    ++n;
    p.buf = kNoBuffer;
    p.open = false;
  }
  m.open.resize(keep);
  if (n == 0) return;
  rdma::WorkRequest* bad = nullptr;
  int rc = qp_->post_send(m.wrs.data(), &bad);
  ++stats_.doorbells;
  size_t posted = rc == 0 ? n : static_cast<size_t>(bad - m.wrs.data());
  stats_.datagrams_sent += posted;
  for (size_t i = 0; i < n; ++i) {
    if (m.wr_buf[i] == kNoBuffer) continue;
    if (i < posted) {
      size_t tail = (m.inflight_head + m.inflight_size++) % m.inflight.size();
      m.inflight[tail] = {m.wrs[i].wr_id, m.wr_buf[i]};
    } else {
      m.free_bufs.push_back(m.wr_buf[i]);
    }
  }
  if (posted < n) {
    // The messages are lost; their calls end by timeout.
    stats_.send_failures += n - posted;
    RDTX_LOG(log(), Warning, "endpoint %u: %zu datagram(s) not posted: %s", id_, n - posted, std::strerror(-rc));
  }
}

bool Endpoint::reply(const Deferred& d, std::span<const std::byte> bytes) {
  if (!d.valid()) return false;
  return append(d.src, Kind::kReply, 0, WireStatus::kOk, d.cookie, bytes, d.kind == Kind::kRequest);
}

namespace {
// First pass over a datagram: every header and length checked before any
// message is acted on, so a bad datagram is dropped whole.
std::optional<Malformed> validate(const std::byte* d, uint32_t len, size_t npeers, bool (*known)(const void*, uint32_t),
                                  const void* ctx) {
  if (len < sizeof(DatagramHeader) + sizeof(MsgHeader)) return Malformed::kShort;
  DatagramHeader dh;
  std::memcpy(&dh, d, sizeof dh);
  if (dh.magic != kMagic || dh.version != kVersion) return Malformed::kMagic;
  if (dh.src >= npeers || !known(ctx, dh.src)) return Malformed::kSource;
  if (dh.count == 0) return Malformed::kCount;
  uint32_t off = sizeof dh;
  for (unsigned i = 0; i < dh.count; ++i) {
    if (len - off < sizeof(MsgHeader)) return Malformed::kCount;
    MsgHeader mh;
    std::memcpy(&mh, d + off, sizeof mh);
    if (mh.len > len - off - sizeof(MsgHeader)) return Malformed::kLength;
    switch (mh.kind) {
      case Kind::kRequest:
      case Kind::kOneway:
      case Kind::kPassive:
        if (mh.handler >= kMaxHandlers) return Malformed::kHandler;
        break;
      case Kind::kReply:
        break;
      default:
        return Malformed::kKind;
    }
    uint32_t step = sizeof(MsgHeader) + pad8(mh.len);
    off = step > len - off ? len : off + step;
  }
  return std::nullopt;
}
}  // namespace

int Endpoint::poll() {
  Impl& m = *impl_;
  rdma::Completion wc[kBurst];
  int n = m.cq->poll(wc, kBurst);
  int nrepost = 0;
  for (int i = 0; i < n; ++i) {
    if (wc[i].opcode != rdma::Opcode::kRecv) {
      // A signaled SEND (or any failed one): everything posted up to it is done.
      if (wc[i].status != rdma::Status::kSuccess) {
        ++stats_.send_failures;
        RDTX_LOG(log(), Warning, "endpoint %u: SEND failed: %s", id_, rdma::to_string(wc[i].status));
        if (wc[i].status != rdma::Status::kFlushed) (void)qp_->connect(qp_->address());
      }
      while (m.inflight_size > 0 && m.inflight[m.inflight_head].seq <= wc[i].wr_id) {
        m.free_bufs.push_back(m.inflight[m.inflight_head].buf);
        m.inflight_head = (m.inflight_head + 1) % m.inflight.size();
        --m.inflight_size;
      }
      continue;
    }
    if (wc[i].wr_id >= m.cfg.recv_buffers) continue;  // not ours: never repost it
    rdma::RecvRequest& rr = m.repost[nrepost++];
    rr = {wc[i].wr_id, nullptr, m.recv_buf(wc[i].wr_id), mtu_, m.mr.lkey};
    if (nrepost > 1) m.repost[nrepost - 2].next = &rr;
    if (wc[i].status != rdma::Status::kSuccess) continue;  // e.g. flushed: nothing arrived
    ++stats_.datagrams_received;
    const std::byte* d = m.recv_buf(wc[i].wr_id);
    const uint32_t len = std::min(wc[i].byte_len, mtu_);
    auto bad = validate(d, len, m.peers.size(),
                        [](const void* ctx, uint32_t src) { return static_cast<const Impl*>(ctx)->peers[src].ah != nullptr; },
                        &m);
    if (bad) {
      ++stats_.malformed[static_cast<unsigned>(*bad)];
      ++m.malformed_since_log;
      uint64_t now = env::tsc();
      if (now - m.last_malformed_log >= env::tsc_hz()) {
        RDTX_LOG(log(), Warning, "endpoint %u: dropped %llu malformed datagram(s), latest: %s", id_,
                 static_cast<unsigned long long>(m.malformed_since_log), to_string(*bad));
        m.last_malformed_log = now;
        m.malformed_since_log = 0;
      }
      continue;
    }
    DatagramHeader dh;
    std::memcpy(&dh, d, sizeof dh);
    uint32_t off = sizeof dh;
    for (unsigned k = 0; k < dh.count; ++k) {
      MsgHeader mh;
      std::memcpy(&mh, d + off, sizeof mh);
      std::span<const std::byte> payload(d + off + sizeof mh, mh.len);
      off += sizeof mh + pad8(mh.len);
      if (mh.kind == Kind::kReply) {
        ++stats_.replies_received;
        uint32_t idx = static_cast<uint32_t>(mh.cookie);
        uint32_t gen = static_cast<uint32_t>(mh.cookie >> 32);
        if (idx >= m.calls.size() || m.calls[idx].gen != gen || m.calls[idx].state == CallState::kFree ||
            m.calls[idx].dest != dh.src) {
          ++stats_.stale_replies;
          continue;
        }
        Impl::Call& c = m.calls[idx];
        if (c.state == CallState::kPassive) {
          --passive_outstanding_;
          if (mh.status != WireStatus::kOk) ++stats_.passive_failures;
        } else {
          Reply* r = c.reply;
          bool ok = mh.status == WireStatus::kOk && mh.len <= r->capacity;
          r->status = mh.status != WireStatus::kOk ? CallStatus::kNoHandler
                      : ok                         ? CallStatus::kOk
                                                   : CallStatus::kTooLarge;
          r->len = ok ? mh.len : 0;
          if (ok && mh.len > 0) std::memcpy(r->buf, payload.data(), mh.len);
          --calls_in_flight_;
          c.wg->done(ok);
        }
        release_call(m.free_calls, c, idx);
        continue;
      }
      ++stats_.requests_handled;
      const Handler& h = m.handlers[mh.handler];
      if (!h) {
        if (mh.kind != Kind::kOneway)
          append(dh.src, Kind::kReply, mh.handler, WireStatus::kNoHandler, mh.cookie, {}, mh.kind == Kind::kRequest);
        continue;
      }
      Request req;
      req.src_ = dh.src;
      req.handler_ = mh.handler;
      req.kind_ = mh.kind;
      req.cookie_ = mh.cookie;
      req.payload_ = payload;
      req.reply_ = std::span<std::byte>(m.scratch);
      h(req);
      if (mh.kind == Kind::kOneway || req.deferred_) continue;
      uint32_t rlen = std::min<uint32_t>(req.reply_len_, static_cast<uint32_t>(m.scratch.size()));
      append(dh.src, Kind::kReply, mh.handler, WireStatus::kOk, mh.cookie,
             std::span<const std::byte>(m.scratch.data(), rlen), mh.kind == Kind::kRequest);
    }
  }
  if (nrepost > 0) {
    rdma::RecvRequest* bad = nullptr;
    if (qp_->post_recv(m.repost.data(), &bad) != 0)
      RDTX_LOG(log(), Error, "endpoint %u: cannot repost receive buffers", id_);
  }
  flush(false);

  // Calls past their deadline fail; scanned a few times per timeout.
  int work = n;
  if (calls_in_flight_ + passive_outstanding_ > 0) {
    uint64_t now = env::tsc();
    if (now >= m.next_scan_tsc) {
      m.next_scan_tsc = now + m.scan_interval_tsc;
      for (uint32_t idx = 0; idx < m.calls.size(); ++idx) {
        Impl::Call& c = m.calls[idx];
        if (c.state == CallState::kFree || now < c.deadline) continue;
        if (c.state == CallState::kWaiting) {
          ++stats_.timeouts;
          --calls_in_flight_;
          c.reply->status = CallStatus::kTimeout;
          c.wg->done(false);
        } else {
          ++stats_.passive_timeouts;
          --passive_outstanding_;
        }
        release_call(m.free_calls, c, idx);
        ++work;
      }
    }
  }
  return work;
}

bool Batch::call(uint32_t dest, HandlerId h, std::span<const std::byte> req, Reply* reply) {
  uint64_t cookie = ep_.start_call(dest, reply, &wg_);
  if (cookie == 0 || !ep_.append(dest, Kind::kRequest, h, WireStatus::kOk, cookie, req, true)) {
    if (cookie != 0) {
      auto& m = *ep_.impl_;
      uint32_t idx = static_cast<uint32_t>(cookie);
      --ep_.calls_in_flight_;
      release_call(m.free_calls, m.calls[idx], idx);
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
      uint32_t idx = static_cast<uint32_t>(cookie);
      --ep_.passive_outstanding_;
      release_call(m.free_calls, m.calls[idx], idx);
    }
    return false;
  }
  ++ep_.stats_.passives;
  return true;
}

runtime::WaitGroup::Ref Batch::send() {
  ep_.flush(false);
  return wg_.wait();
}

}  // namespace rdtx::rpc
