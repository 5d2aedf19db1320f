// One opened rdma-core device port: the ibv_context, its protection domain,
// the port's addressing (link layer, LID, source GID, active MTU), the
// device's limits, and the table of memory regions registered through it.
// Every object made from a verbs Device (QPs, CQs, AHs, memory) holds the
// Context through a shared_ptr, so any of them may outlive the Device; the
// device is closed when the last one goes.
// Thread-safety: immutable after open(), except the region table (a mutex:
// registration is a control-path call any thread of the node may make). The
// lazy ranges are process-wide, under their own mutex.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "address_wire.hpp"
#include "base/result.hpp"
#include "rdma/rdma.hpp"
#include "verbs_config.hpp"

namespace rdtx::rdma::verbs {

class Context {
 public:
  // Opens cfg.dev (or the first device), checks the port is active and has
  // the addressing it needs (IB: a LID; RoCE: a GID), allocates the PD and
  // probes the largest inline payload. Errors say what is missing and how to
  // look (device list, port state, GID index and port).
  static Result<std::shared_ptr<Context>> open(const VerbsConfig& cfg, uint32_t node_id, const std::string& fabric);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const VerbsConfig& config() const { return cfg_; }
  // How long a signaled RC request may wait for a completion before the
  // QP is taken as stalled: twice what the transport's retries take
  // (4.096 us x 2^timeout per try, retry_cnt + 1 tries), at least 1 s.
  uint64_t stall_ns() const {
    const uint64_t tries = uint64_t{cfg_.retry_cnt} + 1;
    return std::max<uint64_t>(1'000'000'000ull, 2 * tries * (uint64_t{4096} << cfg_.timeout));
  }
  const std::string& name() const { return name_; }
  const ibv_device_attr& attr() const { return attr_; }
  uint8_t port() const { return static_cast<uint8_t>(cfg_.port); }
  LinkLayer link() const { return link_; }
  uint16_t lid() const { return lid_; }
  int gid_index() const { return gid_index_; }
  const uint8_t* gid() const { return gid_; }
  bool grh_required() const { return grh_required_; }
  uint8_t mtu() const { return mtu_; }  // enum ibv_mtu
  uint32_t mtu_bytes() const { return 128u << mtu_; }
  uint32_t qkey() const { return qkey_; }
  uint32_t node_id() const { return node_id_; }
  bool atomics() const { return attr_.atomic_cap != IBV_ATOMIC_NONE; }
  // On-demand paging for RC READ, WRITE and ATOMIC (ibv_query_device_ex):
  // a region may cover memory that is not backed yet (lazy memory).
  bool odp() const { return odp_; }
  uint32_t max_inline() const { return max_inline_; }
  // "mlx5_0 port 1 (RoCE v2 GID 3 ::ffff:10.0.0.1)": for messages.
  const std::string& describe() const { return description_; }

  // Where UD receives put the 40-byte GRH, and where the part of a message
  // that does not fit its receive buffer goes (mtu bytes), under one lkey.
  uint64_t grh_scratch() const { return reinterpret_cast<uint64_t>(scratch_.get()); }
  uint64_t overflow_sink() const { return reinterpret_cast<uint64_t>(scratch_.get()) + kGrhBytes; }
  uint32_t scratch_lkey() const { return scratch_mr_->lkey; }
  static constexpr uint32_t kGrhBytes = 40;

  Result<MemoryRegion> reg_mr(void* addr, size_t length, uint32_t access);
  Result<void> dereg_mr(const MemoryRegion& mr);
  // Deregisters every region that starts inside [base, base + length).
  void dereg_inside(const void* base, size_t length);
  // Logs, once per kind, which pages alloc_memory() got.
  void note_pages(bool huge, const char* why);

  // Memory from reserve_memory() is committed piecewise after it is
  // registered, so a region over it must not pin it: reg_mr registers a
  // region that overlaps a lazy range with IBV_ACCESS_ON_DEMAND. The ranges
  // are process-wide, not per Context, since memory of one context of the
  // node is registered with the others (each worker's) too.
  static void add_lazy_range(const void* base, size_t length);
  static void remove_lazy_range(const void* base);
  static bool overlaps_lazy_range(const void* addr, size_t length);

  // Filled in by open().
  Context() = default;

 private:
  VerbsConfig cfg_;
  std::string name_;
  std::string description_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_device_attr attr_{};
  LinkLayer link_ = LinkLayer::kIb;
  uint16_t lid_ = 0;
  int gid_index_ = -1;
  uint8_t gid_[16] = {};
  bool grh_required_ = false;
  uint8_t mtu_ = IBV_MTU_1024;
  uint32_t qkey_ = 0;
  uint32_t node_id_ = 0;
  uint32_t max_inline_ = 0;
  bool odp_ = false;
  std::unique_ptr<uint8_t[]> scratch_;
  ibv_mr* scratch_mr_ = nullptr;
  std::atomic<bool> told_huge_{false};
  std::atomic<bool> told_small_{false};

  std::mutex mu_;
  std::unordered_map<uint32_t, ibv_mr*> regions_;  // by lkey
};

// Text for an ibv_qp_state ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR").
const char* qp_state_name(int state);

}  // namespace rdtx::rdma::verbs
