// A UD destination: the peer node (for translating its receive buffers) and
// this process's mapping of the destination QP's receive queue.
// Copies share everything (a datagram held back by ud_delay keeps one).
// Thread-safety: immutable; may be used by any number of QPs and threads.
#pragma once

#include <memory>

#include "peer_node.hpp"
#include "recv_queue.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma::shm {

class ShmAh final : public AddressHandle {
 public:
  ShmAh(std::shared_ptr<PeerNode> peer, RemoteRecvQueue rq, uint32_t qpn, uint32_t pd)
      : peer_(std::move(peer)), rq_(std::move(rq)), qpn_(qpn), pd_(pd) {}
  ShmAh(const ShmAh&) = default;
  ShmAh& operator=(const ShmAh&) = default;

  const PeerNode& peer() const { return *peer_; }
  const RemoteRecvQueue& recv_queue() const { return rq_; }
  uint32_t qpn() const { return qpn_; }
  uint32_t pd() const { return pd_; }  // the destination QP's: its receive buffers' domain

 private:
  std::shared_ptr<PeerNode> peer_;
  RemoteRecvQueue rq_;
  uint32_t qpn_;
  uint32_t pd_;
};

}  // namespace rdtx::rdma::shm
