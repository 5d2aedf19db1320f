#include "shm_device.hpp"

#include "qp_address.hpp"
#include "shm_ah.hpp"
#include "shm_cq.hpp"
#include "shm_memory.hpp"
#include "shm_qp.hpp"

namespace rdtx::rdma::shm {

namespace {
constexpr uint32_t kMaxInline = 1024;
constexpr uint32_t kMaxSendWr = 1u << 14;
constexpr uint32_t kMaxRecvWr = 1u << 14;
constexpr uint32_t kMaxCqe = 1u << 20;
constexpr uint64_t kMaxMrSize = 1ull << 40;

// The CQ must be one of this device context's, as verbs requires: a QP's
// completions and its latency model live in the CQ's node.
Result<std::shared_ptr<CqCore>> own_cq(CompletionQueue* cq, const Node* node, uint32_t pd, const char* which) {
  auto* shm_cq = dynamic_cast<ShmCq*>(cq);
  if (shm_cq == nullptr || shm_cq->core()->node() != node || shm_cq->core()->pd() != pd)
    return make_error(EINVAL, "create_qp: %s is %s", which,
                      cq == nullptr ? "missing" : "not a CQ of this shm device context");
  return shm_cq->core();
}
}  // namespace

Result<std::unique_ptr<Device>> ShmDevice::open(const ShmConfig& cfg, uint32_t node_id, const std::string& fabric) {
  auto node = Node::open(cfg, node_id, fabric);
  if (!node.ok()) return node.error();
  DeviceCaps caps;
  caps.driver = "shm";
  caps.name = "shm:node" + std::to_string(node_id);
  // atomics=cpu: both are CPU atomics on the same word; hca: not (hca_atomics.hpp).
  caps.atomics_coherent_with_cpu = cfg.atomics == AtomicsMode::kCpu;
  caps.max_inline = kMaxInline;
  caps.max_send_wr = kMaxSendWr;
  caps.max_recv_wr = kMaxRecvWr;
  caps.max_cqe = kMaxCqe;
  caps.max_msg_size = cfg.mtu;
  caps.max_mr_size = kMaxMrSize;
  caps.lazy_memory = true;
  caps.latency_ns = cfg.latency_ns;
  caps.one_ended_reconnect = true;
  caps.stall_ns = cfg.rc_stall > 0 ? cfg.stall_ms * 1'000'000 : 0;
  caps.bw_gbps = cfg.bw_gbps;
  caps.nic_model = (*node)->nic_model().enabled();
  uint32_t pd = (*node)->new_pd();
  return std::unique_ptr<Device>(std::make_unique<ShmDevice>(std::move(*node), std::move(caps), pd));
}

Device::ModelUnaccounted ShmDevice::model_unaccounted() const {
  const NicShared* nic = node_->nic();
  if (nic == nullptr) return {};
  return {nic->stale(), nic->overflow()};
}

Result<std::unique_ptr<Device>> ShmDevice::open_context() {
  // 16 bits of the QP address carry the domain.
  uint32_t pd = node_->new_pd();
  if (pd > UINT16_MAX) return make_error(ENOSPC, "node %u: no more device contexts (%u opened)", node_->id(), pd - 1);
  return std::unique_ptr<Device>(std::make_unique<ShmDevice>(node_, caps_, pd));
}

Result<std::unique_ptr<DeviceMemory>> ShmDevice::alloc_memory(size_t bytes) {
  if (bytes > caps_.max_mr_size)
    return make_error(EINVAL, "alloc_memory(%zu): more than max_mr_size %llu", bytes,
                      static_cast<unsigned long long>(caps_.max_mr_size));
  auto mem = node_->alloc_memory(bytes, bytes);
  if (!mem.ok()) return mem.error();
  return std::unique_ptr<DeviceMemory>(std::make_unique<ShmMemory>(node_, std::move(*mem), false));
}

Result<std::unique_ptr<DeviceMemory>> ShmDevice::reserve_memory(size_t reserve, size_t commit) {
  if (reserve > caps_.max_mr_size)
    return make_error(EINVAL, "reserve_memory(%zu): more than max_mr_size %llu", reserve,
                      static_cast<unsigned long long>(caps_.max_mr_size));
  if (commit > reserve) return make_error(EINVAL, "reserve_memory(%zu, %zu): commit exceeds reserve", reserve, commit);
  auto mem = node_->alloc_memory(reserve, commit);
  if (!mem.ok()) return mem.error();
  return std::unique_ptr<DeviceMemory>(std::make_unique<ShmMemory>(node_, std::move(*mem), commit < reserve));
}

Result<MemoryRegion> ShmDevice::reg_mr(void* addr, size_t length, uint32_t access) {
  if (length > caps_.max_mr_size)
    return make_error(EINVAL, "reg_mr(%p, %zu): more than max_mr_size %llu", addr, length,
                      static_cast<unsigned long long>(caps_.max_mr_size));
  return node_->reg_mr(addr, length, access, pd_);
}

Result<void> ShmDevice::dereg_mr(const MemoryRegion& mr) { return node_->dereg_mr(mr, pd_); }

Result<std::unique_ptr<CompletionQueue>> ShmDevice::create_cq(uint32_t depth) {
  if (depth == 0 || depth > caps_.max_cqe)
    return make_error(EINVAL, "create_cq(%u): depth must be in [1, %u]", depth, caps_.max_cqe);
  auto core = std::make_shared<CqCore>(node_.get(), pd_, depth, node_->timed());
  return std::unique_ptr<CompletionQueue>(std::make_unique<ShmCq>(std::move(core)));
}

Result<std::unique_ptr<QueuePair>> ShmDevice::create_qp(const QpInit& init) {
  if (init.type != QpType::kRc && init.type != QpType::kUd) return make_error(EINVAL, "create_qp: unknown QP type");
  if (init.max_send_wr == 0 || init.max_send_wr > caps_.max_send_wr)
    return make_error(EINVAL, "create_qp: max_send_wr %u is not in [1, %u]", init.max_send_wr, caps_.max_send_wr);
  if (init.max_inline > caps_.max_inline)
    return make_error(EINVAL, "create_qp: max_inline %u exceeds %u", init.max_inline, caps_.max_inline);
  auto send_cq = own_cq(init.send_cq, node_.get(), pd_, "send_cq");
  if (!send_cq.ok()) return send_cq.error();
  std::shared_ptr<CqCore> recv_cq;
  if (init.type == QpType::kUd) {
    if (init.max_recv_wr == 0 || init.max_recv_wr > caps_.max_recv_wr)
      return make_error(EINVAL, "create_qp: max_recv_wr %u is not in [1, %u]", init.max_recv_wr, caps_.max_recv_wr);
    auto cq = own_cq(init.recv_cq, node_.get(), pd_, "recv_cq");
    if (!cq.ok()) return cq.error();
    recv_cq = std::move(*cq);
  }
  auto qp = ShmQp::create(node_, pd_, init, std::move(*send_cq), std::move(recv_cq));
  if (!qp.ok()) return qp.error();
  return std::unique_ptr<QueuePair>(std::move(*qp));
}

Result<std::unique_ptr<AddressHandle>> ShmDevice::create_ah(const QpAddress& remote) {
  AddressWire w;
  if (!AddressWire::decode(remote, &w)) return make_error(EINVAL, "create_ah: not an shm QP address");
  if (w.fabric_hash != node_->fabric_hash())
    return make_error(EINVAL, "create_ah: node %u is in another fabric (this is fabric %s)", w.node_id,
                      node_->fabric().c_str());
  if (w.type != uint8_t(QpType::kUd))
    return make_error(EINVAL, "create_ah: qp %u of node %u is not a UD QP", w.qpn, w.node_id);
  auto peer = node_->peer(w.node_id, w.node_token);
  if (!peer.ok()) return peer.error();
  auto rq = node_->remote_queue(w.node_id, w.qpn, w.node_token);
  if (!rq.ok()) return rq.error();
  return std::unique_ptr<AddressHandle>(std::make_unique<ShmAh>(std::move(*peer), std::move(*rq), w.qpn, w.pd));
}

}  // namespace rdtx::rdma::shm
