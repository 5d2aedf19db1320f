// Send: messages are appended to the datagram being built for their
// destination (coalescing; lazy passive acks wait there for a ride), and
// flush() posts the datagrams that should go with one doorbell. Datagram
// buffers are released in post order when a later signaled SEND completes.
#include <cstring>

#include "env/tsc.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

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
    RDTX_LOG(rpc_log(), Warning, "endpoint %u: %zu datagram(s) not posted: %s", id_, n - posted, std::strerror(-rc));
  }
}

void Endpoint::on_send_completion(const rdma::Completion& wc) {
  Impl& m = *impl_;
  // A signaled SEND (or any failed one): everything posted up to it is done.
  if (wc.status != rdma::Status::kSuccess) {
    ++stats_.send_failures;
    RDTX_LOG(rpc_log(), Warning, "endpoint %u: SEND failed: %s", id_, rdma::to_string(wc.status));
    if (wc.status != rdma::Status::kFlushed) (void)qp_->connect(qp_->address());
  }
  while (m.inflight_size > 0 && m.inflight[m.inflight_head].seq <= wc.wr_id) {
    m.free_bufs.push_back(m.inflight[m.inflight_head].buf);
    m.inflight_head = (m.inflight_head + 1) % m.inflight.size();
    --m.inflight_size;
  }
}

bool Endpoint::reply(const Deferred& d, std::span<const std::byte> bytes) {
  if (!d.valid()) return false;
  return append(d.src, Kind::kReply, 0, WireStatus::kOk, d.cookie, bytes, d.kind == Kind::kRequest);
}

}  // namespace rdtx::rpc
