#include "verbs_device.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "verbs_cq.hpp"
#include "verbs_log.hpp"
#include "verbs_memory.hpp"
#include "verbs_qp.hpp"

namespace rdtx::rdma::verbs {

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

namespace {

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// The CQ must be one of this device's: its ibv_cq belongs to our context.
Result<std::shared_ptr<CqCore>> own_cq(CompletionQueue* cq, const Context* ctx, const char* which) {
  auto* vcq = dynamic_cast<VerbsCq*>(cq);
  if (vcq == nullptr || vcq->core()->context() != ctx)
    return make_error(EINVAL, "create_qp: %s is %s", which,
                      cq == nullptr ? "missing" : "not a CQ of this verbs device");
  return vcq->core();
}

}  // namespace

Result<std::unique_ptr<Device>> VerbsDevice::open(const VerbsConfig& cfg, uint32_t node_id, const std::string& fabric) {
  auto ctx = Context::open(cfg, node_id, fabric);
  if (!ctx.ok()) return ctx.error();
  const Context& c = **ctx;
  DeviceCaps caps;
  caps.driver = "verbs";
  caps.name = c.name();
  // Only IBV_ATOMIC_GLOB promises atomicity with the CPU's own atomics;
  // IBV_ATOMIC_HCA covers other NIC atomics only, and without atomics
  // post_send refuses CAS/FAA.
  caps.atomics_coherent_with_cpu = c.attr().atomic_cap == IBV_ATOMIC_GLOB;
  caps.max_inline = c.max_inline();
  caps.max_send_wr = static_cast<uint32_t>(c.attr().max_qp_wr);
  caps.max_recv_wr = static_cast<uint32_t>(c.attr().max_qp_wr);
  caps.max_cqe = static_cast<uint32_t>(c.attr().max_cqe);
  caps.max_msg_size = c.mtu_bytes();
  caps.max_mr_size = c.attr().max_mr_size;
  // Regions over reserved memory are registered with on-demand paging.
  caps.lazy_memory = c.odp();
  caps.stall_ns = c.stall_ns();
  return std::unique_ptr<Device>(std::make_unique<VerbsDevice>(std::move(*ctx), std::move(caps), fabric));
}

Result<std::unique_ptr<Device>> VerbsDevice::open_context() {
  return open(ctx_->config(), ctx_->node_id(), fabric_);
}

Result<std::unique_ptr<DeviceMemory>> VerbsDevice::alloc_memory(size_t bytes) {
  if (bytes == 0) return make_error(EINVAL, "alloc_memory(0): nothing to allocate");
  if (bytes > caps_.max_mr_size)
    return make_error(EINVAL, "alloc_memory(%zu): more than max_mr_size %llu", bytes,
                      static_cast<unsigned long long>(caps_.max_mr_size));
  const HugePages huge = ctx_->config().huge;
  if (huge != HugePages::kOff) {
    size_t mapped = round_up(bytes, VerbsMemory::kHugePage);
    void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      ctx_->note_pages(true, "");
      return std::unique_ptr<DeviceMemory>(std::make_unique<VerbsMemory>(ctx_, p, mapped, bytes, true));
    }
    if (huge == HugePages::kOn)
      return make_error(ENOMEM,
                        "alloc_memory(%zu) on %s: huge=on, but %zu MiB of 2 MiB huge pages are not free (%s; see "
                        "HugePages_Free in /proc/meminfo, reserve with 'echo N > /proc/sys/vm/nr_hugepages', or "
                        "use huge=auto)",
                        bytes, ctx_->name().c_str(), mapped >> 20, std::strerror(errno));
  }
  size_t mapped = round_up(bytes, VerbsMemory::kSmallPage);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return make_error(errno, "alloc_memory(%zu) on %s: mmap failed: %s", bytes, ctx_->name().c_str(),
                      std::strerror(errno));
  ctx_->note_pages(false, huge == HugePages::kAuto ? ": no free 2 MiB huge page for the request" : "");
  return std::unique_ptr<DeviceMemory>(std::make_unique<VerbsMemory>(ctx_, p, mapped, bytes, false));
}

Result<std::unique_ptr<DeviceMemory>> VerbsDevice::reserve_memory(size_t reserve, size_t commit) {
  if (!caps_.lazy_memory)
    return make_error(ENOTSUP,
                      "reserve_memory on %s: the device does not support on-demand paging (ODP) for RC READ, WRITE "
                      "and ATOMIC, so registered memory cannot be committed later",
                      ctx_->name().c_str());
  if (reserve == 0) return make_error(EINVAL, "reserve_memory(0): nothing to reserve");
  if (reserve > caps_.max_mr_size)
    return make_error(EINVAL, "reserve_memory(%zu): more than max_mr_size %llu", reserve,
                      static_cast<unsigned long long>(caps_.max_mr_size));
  if (commit > reserve) return make_error(EINVAL, "reserve_memory(%zu, %zu): commit exceeds reserve", reserve, commit);
  // Normal pages: huge pages would commit 2 MiB at a time and need a pool.
  size_t mapped = round_up(reserve, VerbsMemory::kSmallPage);
  void* p = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    return make_error(e, "reserve_memory(%zu) on %s: mmap of %zu bytes of address space failed: %s%s", reserve,
                      ctx_->name().c_str(), mapped, std::strerror(e),
                      e == ENOMEM ? " (with vm.overcommit_memory=2 a reservation counts in full)" : "");
  }
  // The range is lazy (VerbsMemory's constructor) before anything can
  // register a region over it.
  auto mem = std::make_unique<VerbsMemory>(ctx_, p, mapped, reserve, false, true);
  RDTX_TRY(mem->commit(0, commit));
  return std::unique_ptr<DeviceMemory>(std::move(mem));
}

Result<void> VerbsMemory::commit(size_t offset, size_t length) {
  if (!lazy_) return DeviceMemory::commit(offset, length);
  if (offset > size_ || length > size_ - offset)
    return make_error(EINVAL, "commit(%zu, %zu) on %s: outside the %zu bytes reserved", offset, length,
                      ctx_->name().c_str(), size_);
  if (length == 0) return {};
  const size_t first = offset / kSmallPage * kSmallPage;
  const size_t end = std::min(round_up(offset + length, kSmallPage), mapped_);
  auto* p = static_cast<uint8_t*>(base_) + first;
  const size_t bytes = end - first;
  int rc = 0;
  do {
    rc = madvise(p, bytes, MADV_POPULATE_WRITE);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return {};
  const int e = errno;
  if (e == EINVAL) {
    // A kernel before 5.14. Touch each page instead, adding 0 atomically: a
    // peer may write into the range already. Without memory the OOM killer,
    // not an error, is the answer then.
    for (size_t off = 0; off < bytes; off += kSmallPage) __atomic_fetch_add(p + off, 0, __ATOMIC_RELAXED);
    return {};
  }
  // Pages populated before the failure stay (zero); nothing else changed.
  return make_error(e == EFAULT || e == EAGAIN ? ENOMEM : e,
                    "commit(%zu, %zu) on %s: no memory to commit %zu bytes at offset %zu of the reservation: %s",
                    offset, length, ctx_->name().c_str(), bytes, first, std::strerror(e));
}

Result<MemoryRegion> VerbsDevice::reg_mr(void* addr, size_t length, uint32_t access) {
  return ctx_->reg_mr(addr, length, access);
}

Result<void> VerbsDevice::dereg_mr(const MemoryRegion& mr) { return ctx_->dereg_mr(mr); }

Result<std::unique_ptr<CompletionQueue>> VerbsDevice::create_cq(uint32_t depth) {
  if (depth == 0 || depth > caps_.max_cqe)
    return make_error(EINVAL, "create_cq(%u): depth must be in [1, %u]", depth, caps_.max_cqe);
  auto core = CqCore::create(ctx_, depth);
  if (!core.ok()) return core.error();
  return std::unique_ptr<CompletionQueue>(std::make_unique<VerbsCq>(std::move(*core)));
}

Result<std::unique_ptr<QueuePair>> VerbsDevice::create_qp(const QpInit& init) {
  if (init.type != QpType::kRc && init.type != QpType::kUd) return make_error(EINVAL, "create_qp: unknown QP type");
  if (init.max_send_wr == 0 || init.max_send_wr > caps_.max_send_wr)
    return make_error(EINVAL, "create_qp: max_send_wr %u is not in [1, %u]", init.max_send_wr, caps_.max_send_wr);
  if (init.max_inline > caps_.max_inline)
    return make_error(EINVAL, "create_qp: max_inline %u exceeds %s's %u", init.max_inline, caps_.name.c_str(),
                      caps_.max_inline);
  auto send_cq = own_cq(init.send_cq, ctx_.get(), "send_cq");
  if (!send_cq.ok()) return send_cq.error();
  std::shared_ptr<CqCore> recv_cq;
  if (init.type == QpType::kUd) {
    if (init.max_recv_wr == 0 || init.max_recv_wr > caps_.max_recv_wr)
      return make_error(EINVAL, "create_qp: max_recv_wr %u is not in [1, %u]", init.max_recv_wr, caps_.max_recv_wr);
    auto cq = own_cq(init.recv_cq, ctx_.get(), "recv_cq");
    if (!cq.ok()) return cq.error();
    recv_cq = std::move(*cq);
  }
  auto qp = VerbsQp::create(ctx_, init, std::move(*send_cq), std::move(recv_cq));
  if (!qp.ok()) return qp.error();
  return std::unique_ptr<QueuePair>(std::move(*qp));
}

Result<std::unique_ptr<AddressHandle>> VerbsDevice::create_ah(const QpAddress& remote) {
  AddressWire w;
  if (!AddressWire::decode(remote, &w)) return make_error(EINVAL, "create_ah: not a verbs QP address");
  if (w.type != QpType::kUd)
    return make_error(EINVAL, "create_ah: QP 0x%x of node %u is not a UD QP", w.qpn, w.node_id);
  RDTX_TRY(check_reachable(*ctx_, w, "create_ah"));
  ibv_ah_attr attr = make_ah_attr(*ctx_, w);
  ibv_ah* ah = ibv_create_ah(ctx_->pd(), &attr);
  if (ah == nullptr) {
    int e = errno != 0 ? errno : EINVAL;
    return make_error(e, "create_ah on %s for node %u's QP 0x%x: ibv_create_ah failed: %s", ctx_->describe().c_str(),
                      w.node_id, w.qpn, std::strerror(e));
  }
  return std::unique_ptr<AddressHandle>(std::make_unique<VerbsAh>(ctx_, ah, w.qpn, w.qkey));
}

}  // namespace rdtx::rdma::verbs
