#include "verbs_context.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "gid.hpp"
#include "verbs_log.hpp"

namespace rdtx::rdma::verbs {

namespace {

// Largest inline payload probed; more would only make WQEs bigger.
constexpr uint32_t kMaxInlineProbe = 1024;
// Scratch for UD receives: the GRH, then a sink for up to a 4096-byte MTU.
constexpr size_t kScratchBytes = Context::kGrhBytes + 4096;

const char* port_state_name(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP:
      return "NOP";
    case IBV_PORT_DOWN:
      return "DOWN";
    case IBV_PORT_INIT:
      return "INIT (no subnet manager has configured it yet)";
    case IBV_PORT_ARMED:
      return "ARMED";
    case IBV_PORT_ACTIVE:
      return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "ACTIVE_DEFER";
  }
  return "?";
}

// The physical state as ibv_devinfo prints it.
const char* phys_state_name(uint8_t s) {
  switch (s) {
    case 1:
      return "SLEEP";
    case 2:
      return "POLLING (no link partner: cable, switch port or peer down)";
    case 3:
      return "DISABLED";
    case 4:
      return "PORT_CONFIGURATION_TRAINING";
    case 5:
      return "LINK_UP";
    case 6:
      return "LINK_ERROR_RECOVERY";
    case 7:
      return "PHY_TEST";
  }
  return "unknown";
}

// Q_Keys of one fabric (OpenOptions::fabric) are equal, so datagrams of
// another cluster on the same network are dropped by the receiving NIC. The
// top bit stays clear: Q_Keys with it set are privileged.
uint32_t fabric_qkey(const std::string& fabric) {
  uint32_t h = 2166136261u;  // FNV-1a
  for (unsigned char c : fabric) h = (h ^ c) * 16777619u;
  return fabric.empty() ? 0x5244'5458u : (h & 0x7fff'ffffu) | 1u;
}

std::string memlock_hint() {
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return "";
  return "; the locked-memory limit (ulimit -l) is " + std::to_string(rl.rlim_cur / 1024) +
         " KiB: raise it (see doc/deployment.md, Troubleshooting verbs errors)";
}

// Binary search for the largest inline payload a QP of `type` accepts.
// Returns -1 if not even a QP without inline data can be created.
int probe_max_inline(ibv_pd* pd, ibv_cq* cq, ibv_qp_type type, int* err) {
  auto try_create = [&](uint32_t inline_bytes) {
    ibv_qp_init_attr ia{};
    ia.send_cq = cq;
    ia.recv_cq = cq;
    ia.qp_type = type;
    ia.cap.max_send_wr = 1;
    ia.cap.max_recv_wr = 1;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = inline_bytes;
    ibv_qp* qp = ibv_create_qp(pd, &ia);
    if (qp == nullptr) {
      *err = errno;
      return false;
    }
    ibv_destroy_qp(qp);
    return true;
  };
  if (!try_create(0)) return -1;
  uint32_t lo = 0, hi = kMaxInlineProbe;  // lo works; find the largest that does
  if (try_create(hi)) return static_cast<int>(hi);
  while (hi - lo > 1) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (try_create(mid))
      lo = mid;
    else
      hi = mid;
  }
  return static_cast<int>(lo);
}

// Peers reach tables with RC READ, WRITE, CAS and FAA: on-demand paging
// must serve all three for lazy memory.
constexpr uint32_t kRcOdpNeeded = IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_ATOMIC;

// Whether the device pages RC READ, WRITE and ATOMIC on demand; if not,
// *why says what is missing.
bool query_odp(ibv_context* ctx, std::string* why) {
  ibv_device_attr_ex ax{};
  if (int rc = ibv_query_device_ex(ctx, nullptr, &ax); rc != 0) {
    *why = std::string("ibv_query_device_ex failed: ") + std::strerror(rc);
    return false;
  }
  if ((ax.odp_caps.general_caps & IBV_ODP_SUPPORT) == 0) {
    *why = "the device has no on-demand paging";
    return false;
  }
  const uint32_t rc_caps = ax.odp_caps.per_transport_caps.rc_odp_caps;
  if ((rc_caps & kRcOdpNeeded) != kRcOdpNeeded) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "its RC on-demand paging lacks READ, WRITE or ATOMIC (rc_odp_caps 0x%x)", rc_caps);
    *why = buf;
    return false;
  }
  return true;
}

// The lazy ranges of the process (Context::add_lazy_range), and the devices
// whose ODP support was logged at notice level. Never destroyed: memory may
// be freed by static destructors that run after this one's would.
struct LazyState {
  std::mutex mu;
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;  // [base, end)
  std::vector<std::string> told_odp;
};

LazyState& lazy_state() {
  static LazyState* state = new LazyState;
  return *state;
}

// True the first time per device name in this process: every worker's
// context opens the device again, and one notice per device is enough.
bool first_odp_notice(const std::string& name) {
  LazyState& st = lazy_state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (std::find(st.told_odp.begin(), st.told_odp.end(), name) != st.told_odp.end()) return false;
  st.told_odp.push_back(name);
  return true;
}

Error device_list_error(int list_errno) {
  // The exact leading sentence is what the conformance suite's skip prints.
  std::string why;
  if (list_errno == ENOSYS)
    why = " (the kernel has no RDMA support loaded: /sys/class/infiniband does not exist)";
  else if (list_errno != 0)
    why = std::string(" (") + std::strerror(list_errno) + ")";
  return make_error(ENODEV,
                    "no RDMA device: ibv_get_device_list returned 0 devices; see doc/deployment.md for Soft-RoCE%s",
                    why.c_str());
}

}  // namespace

const char* qp_state_name(int state) {
  switch (state) {
    case IBV_QPS_RESET:
      return "RESET";
    case IBV_QPS_INIT:
      return "INIT";
    case IBV_QPS_RTR:
      return "RTR";
    case IBV_QPS_RTS:
      return "RTS";
    case IBV_QPS_SQD:
      return "SQD";
    case IBV_QPS_SQE:
      return "SQE";
    case IBV_QPS_ERR:
      return "ERR";
    default:
      return "?";
  }
}

Result<std::shared_ptr<Context>> Context::open(const VerbsConfig& cfg, uint32_t node_id, const std::string& fabric) {
  auto c = std::make_shared<Context>();
  c->cfg_ = cfg;
  c->node_id_ = node_id;
  c->qkey_ = fabric_qkey(fabric);

  // Find the device.
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  int list_errno = errno;
  if (list == nullptr || n == 0) {
    if (list != nullptr) ibv_free_device_list(list);
    if (!cfg.dev.empty()) {
      Error e = device_list_error(list_errno);
      return make_error(ENODEV, "verbs dev=%s: %s", cfg.dev.c_str(), e.message.c_str());
    }
    return device_list_error(list_errno);
  }
  ibv_device* dev = nullptr;
  std::string names;
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    names += (names.empty() ? "" : ", ") + std::string(name);
    if (dev == nullptr && (cfg.dev.empty() || cfg.dev == name)) dev = list[i];
  }
  if (dev == nullptr) {
    ibv_free_device_list(list);
    return make_error(ENODEV, "verbs: no RDMA device named '%s' (devices here: %s; list them with ibv_devices)",
                      cfg.dev.c_str(), names.c_str());
  }
  c->name_ = ibv_get_device_name(dev);
  c->ctx_ = ibv_open_device(dev);
  int open_errno = errno;
  ibv_free_device_list(list);
  if (c->ctx_ == nullptr)
    return make_error(open_errno != 0 ? open_errno : EIO,
                      "verbs dev=%s: ibv_open_device failed: %s (can this user open /dev/infiniband/uverbs*?)",
                      c->name_.c_str(), std::strerror(open_errno));

  // Device and port.
  const char* dname = c->name_.c_str();
  if (int rc = ibv_query_device(c->ctx_, &c->attr_); rc != 0)
    return make_error(rc, "verbs dev=%s: ibv_query_device failed: %s", dname, std::strerror(rc));
  if (cfg.port < 1 || cfg.port > c->attr_.phys_port_cnt)
    return make_error(EINVAL, "verbs dev=%s: port %u does not exist (the device has %u port%s)", dname, cfg.port,
                      c->attr_.phys_port_cnt, c->attr_.phys_port_cnt == 1 ? "" : "s");
  ibv_port_attr pa{};
  if (int rc = ibv_query_port(c->ctx_, c->port(), &pa); rc != 0)
    return make_error(rc, "verbs dev=%s port=%u: ibv_query_port failed: %s", dname, cfg.port, std::strerror(rc));
  if (pa.state != IBV_PORT_ACTIVE)
    return make_error(ENETDOWN,
                      "verbs dev=%s port=%u is not active: state %s, physical state %s (check with ibv_devinfo -d %s; "
                      "for Soft-RoCE the netdev must be up)",
                      dname, cfg.port, port_state_name(pa.state), phys_state_name(pa.phys_state), dname);
  c->link_ = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? LinkLayer::kEthernet : LinkLayer::kIb;
  c->lid_ = pa.lid;
  c->mtu_ = static_cast<uint8_t>(pa.active_mtu);
  c->grh_required_ = (pa.flags & IBV_QPF_GRH_REQUIRED) != 0;

  // Addressing: IB needs a LID; RoCE (and IB ports that require a GRH) a GID.
  const bool roce = c->link_ == LinkLayer::kEthernet;
  if (!roce && c->lid_ == 0)
    return make_error(EADDRNOTAVAIL,
                      "verbs dev=%s port=%u: InfiniBand port has LID 0: no subnet manager has assigned one (run "
                      "opensm on the fabric)",
                      dname, cfg.port);
  GidType gid_type = GidType::kIb;
  if (roce || c->grh_required_ || cfg.gid_index != VerbsConfig::kAutoGid) {
    int index = cfg.gid_index;
    if (index != VerbsConfig::kAutoGid && index >= pa.gid_tbl_len)
      return make_error(EINVAL,
                        "verbs dev=%s port=%u: GID index %d is out of range (the port's GID table has %d entries)",
                        dname, cfg.port, index, pa.gid_tbl_len);
    std::vector<GidEntry> entries;
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
      if (index != VerbsConfig::kAutoGid && i != index) continue;
      ibv_gid_entry ge{};
      if (ibv_query_gid_ex(c->ctx_, cfg.port, static_cast<uint32_t>(i), &ge, 0) != 0) continue;  // ENODATA: empty
      GidEntry e;
      e.index = static_cast<uint32_t>(i);
      e.type = static_cast<GidType>(ge.gid_type);
      std::memcpy(e.raw, ge.gid.raw, 16);
      entries.push_back(e);
    }
    if (!roce && index == VerbsConfig::kAutoGid) index = 0;  // IB: GID 0 is the port GUID's
    if (index == VerbsConfig::kAutoGid) {
      index = pick_gid(entries);
      if (index < 0)
        return make_error(EADDRNOTAVAIL,
                          "verbs dev=%s port=%u: RoCE port has no GID: give its netdev an IP address and bring it up "
                          "(ls /sys/class/infiniband/%s/ports/%u/gids; see doc/deployment.md)",
                          dname, cfg.port, dname, cfg.port);
    }
    const GidEntry* chosen = nullptr;
    for (const GidEntry& e : entries)
      if (e.index == static_cast<uint32_t>(index)) chosen = &e;
    if (chosen == nullptr || gid_is_zero(chosen->raw))
      return make_error(EADDRNOTAVAIL,
                        "verbs dev=%s port=%u: GID index %d is empty%s (the valid ones: cat "
                        "/sys/class/infiniband/%s/ports/%u/gids/*, types in .../gid_attrs/types/*; or drop gid_index "
                        "to pick a RoCE v2 IPv4 GID automatically)",
                        dname, cfg.port, index, roce ? ": RoCE needs a GID (an IP address on the netdev)" : "", dname,
                        cfg.port);
    c->gid_index_ = index;
    gid_type = chosen->type;
    std::memcpy(c->gid_, chosen->raw, 16);
  }

  // Protection domain, scratch for UD receives, inline limits.
  c->pd_ = ibv_alloc_pd(c->ctx_);
  if (c->pd_ == nullptr)
    return make_error(errno != 0 ? errno : ENOMEM, "verbs dev=%s: ibv_alloc_pd failed: %s", dname,
                      std::strerror(errno));
  c->scratch_ = std::make_unique<uint8_t[]>(kScratchBytes);
  c->scratch_mr_ = ibv_reg_mr(c->pd_, c->scratch_.get(), kScratchBytes, IBV_ACCESS_LOCAL_WRITE);
  if (c->scratch_mr_ == nullptr)
    return make_error(errno != 0 ? errno : ENOMEM, "verbs dev=%s: cannot register %zu bytes of scratch memory: %s%s",
                      dname, kScratchBytes, std::strerror(errno), memlock_hint().c_str());
  ibv_cq* probe_cq = ibv_create_cq(c->ctx_, 4, nullptr, nullptr, 0);
  if (probe_cq == nullptr)
    return make_error(errno != 0 ? errno : ENOMEM, "verbs dev=%s: ibv_create_cq failed: %s", dname,
                      std::strerror(errno));
  int rc_err = 0, ud_err = 0;
  int rc_inline = probe_max_inline(c->pd_, probe_cq, IBV_QPT_RC, &rc_err);
  int ud_inline = rc_inline < 0 ? -1 : probe_max_inline(c->pd_, probe_cq, IBV_QPT_UD, &ud_err);
  ibv_destroy_cq(probe_cq);
  if (rc_inline < 0)
    return make_error(rc_err != 0 ? rc_err : EIO, "verbs dev=%s: cannot create an RC queue pair: %s", dname,
                      std::strerror(rc_err));
  if (ud_inline < 0)
    return make_error(ud_err != 0 ? ud_err : EOPNOTSUPP,
                      "verbs dev=%s: cannot create a UD queue pair (%s): rdtx's RPC needs UD (iWARP devices have none)",
                      dname, std::strerror(ud_err));
  c->max_inline_ = static_cast<uint32_t>(std::min(rc_inline, ud_inline));

  char desc[256];
  if (c->gid_index_ >= 0)
    std::snprintf(desc, sizeof desc, "%s port %u (%s, %s GID %d %s)", dname, cfg.port, roce ? "RoCE" : "InfiniBand",
                  to_string(gid_type), c->gid_index_, format_gid(c->gid_).c_str());
  else
    std::snprintf(desc, sizeof desc, "%s port %u (InfiniBand, LID %u)", dname, cfg.port, c->lid_);
  c->description_ = desc;
  const char* atomics = c->attr_.atomic_cap == IBV_ATOMIC_GLOB  ? "GLOB (coherent with CPU atomics)"
                        : c->attr_.atomic_cap == IBV_ATOMIC_HCA ? "HCA (not coherent with CPU atomics)"
                                                                : "none";
  RDTX_LOG(verbs_log(), Info, "node %u: opened %s: MTU %u, atomics %s, max_inline %u, max_qp_wr %d, max_cqe %d",
           node_id, desc, c->mtu_bytes(), atomics, c->max_inline_, c->attr_.max_qp_wr, c->attr_.max_cqe);
  std::string no_odp;
  c->odp_ = query_odp(c->ctx_, &no_odp);
  const std::string odp_note =
      c->odp_ ? std::string("lazy memory (ODP) available: growing tables can grow")
              : "no lazy memory (ODP): " + no_odp + "; growing tables stay at their initial capacity";
  if (first_odp_notice(c->name_))
    RDTX_LOG(verbs_log(), Notice, "%s: %s", dname, odp_note.c_str());
  else
    RDTX_LOG(verbs_log(), Debug, "%s: %s", dname, odp_note.c_str());
  if (c->attr_.atomic_cap == IBV_ATOMIC_NONE)
    RDTX_LOG(verbs_log(), Warning,
             "%s reports no remote atomics (IBV_ATOMIC_NONE): CAS and FAA are refused at post_send (-EINVAL); use "
             "RPC for locks",
             dname);
  return c;
}

Context::~Context() {
  for (auto& [lkey, mr] : regions_) ibv_dereg_mr(mr);
  if (scratch_mr_ != nullptr) ibv_dereg_mr(scratch_mr_);
  if (pd_ != nullptr) {
    if (int rc = ibv_dealloc_pd(pd_); rc != 0)
      RDTX_LOG(verbs_log(), Error, "%s: ibv_dealloc_pd failed: %s", name_.c_str(), std::strerror(rc));
  }
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

Result<MemoryRegion> Context::reg_mr(void* addr, size_t length, uint32_t access) {
  if (addr == nullptr || length == 0) return make_error(EINVAL, "reg_mr(%p, %zu): no memory to register", addr, length);
  if (length > attr_.max_mr_size)
    return make_error(EINVAL, "reg_mr(%p, %zu): more than the device's max_mr_size %llu", addr, length,
                      static_cast<unsigned long long>(attr_.max_mr_size));
  if ((access & ~uint32_t{kAccessAll}) != 0)
    return make_error(EINVAL, "reg_mr(%p, %zu): unknown access bits 0x%x", addr, length, access);
  if ((access & (kRemoteWrite | kRemoteAtomic)) != 0 && (access & kLocalWrite) == 0)
    return make_error(EINVAL,
                      "reg_mr(%p, %zu): remote write or atomic access needs kLocalWrite too (as verbs requires)", addr,
                      length);
  int flags = 0;
  if ((access & kLocalWrite) != 0) flags |= IBV_ACCESS_LOCAL_WRITE;
  if ((access & kRemoteRead) != 0) flags |= IBV_ACCESS_REMOTE_READ;
  if ((access & kRemoteWrite) != 0) flags |= IBV_ACCESS_REMOTE_WRITE;
  // A device without atomics refuses the flag; such a device never performs
  // an atomic on the region anyway.
  if ((access & kRemoteAtomic) != 0 && atomics()) flags |= IBV_ACCESS_REMOTE_ATOMIC;
  // Lazy memory is committed after registration: page it on demand instead
  // of pinning (which would commit all of it now).
  if (overlaps_lazy_range(addr, length)) {
    if (!odp_)
      return make_error(ENOTSUP,
                        "reg_mr(%p, %zu) on %s: the range is lazy memory (reserve_memory), which needs on-demand "
                        "paging, and this device has none",
                        addr, length, name_.c_str());
    flags |= IBV_ACCESS_ON_DEMAND;
  }
  ibv_mr* mr = ibv_reg_mr(pd_, addr, length, flags);
  if (mr == nullptr) {
    int e = errno != 0 ? errno : ENOMEM;
    std::string hint = e == ENOMEM || e == EAGAIN ? memlock_hint() : e == EFAULT ? "; the range is not mapped" : "";
    return make_error(e, "reg_mr(%p, %zu) on %s: ibv_reg_mr failed: %s%s", addr, length, name_.c_str(),
                      std::strerror(e), hint.c_str());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    regions_[mr->lkey] = mr;
  }
  MemoryRegion out;
  out.addr = addr;
  out.length = length;
  out.lkey = mr->lkey;
  out.rkey = mr->rkey;
  return out;
}

Result<void> Context::dereg_mr(const MemoryRegion& region) {
  ibv_mr* mr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = regions_.find(region.lkey);
    if (it == regions_.end() || it->second->addr != region.addr)
      return make_error(EINVAL, "dereg_mr(%p, lkey 0x%x): not a live region of %s (deregistered already?)", region.addr,
                        region.lkey, name_.c_str());
    mr = it->second;
    regions_.erase(it);
  }
  if (int rc = ibv_dereg_mr(mr); rc != 0)
    return make_error(rc, "dereg_mr(%p, lkey 0x%x): ibv_dereg_mr failed: %s", region.addr, region.lkey,
                      std::strerror(rc));
  return {};
}

void Context::dereg_inside(const void* base, size_t length) {
  auto lo = reinterpret_cast<uintptr_t>(base);
  std::vector<ibv_mr*> doomed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = regions_.begin(); it != regions_.end();) {
      auto a = reinterpret_cast<uintptr_t>(it->second->addr);
      if (a >= lo && a - lo < length) {
        doomed.push_back(it->second);
        it = regions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (ibv_mr* mr : doomed) {
    RDTX_LOG(verbs_log(), Debug, "%s: freeing memory deregisters region %p (+%zu, lkey 0x%x)", name_.c_str(), mr->addr,
             mr->length, mr->lkey);
    ibv_dereg_mr(mr);
  }
}

void Context::add_lazy_range(const void* base, size_t length) {
  LazyState& st = lazy_state();
  auto lo = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(st.mu);
  st.ranges.emplace_back(lo, lo + length);
}

void Context::remove_lazy_range(const void* base) {
  LazyState& st = lazy_state();
  auto lo = reinterpret_cast<uintptr_t>(base);
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = std::find_if(st.ranges.begin(), st.ranges.end(), [lo](const auto& r) { return r.first == lo; });
  if (it != st.ranges.end()) st.ranges.erase(it);
}

bool Context::overlaps_lazy_range(const void* addr, size_t length) {
  LazyState& st = lazy_state();
  auto lo = reinterpret_cast<uintptr_t>(addr);
  auto hi = lo + length;
  std::lock_guard<std::mutex> lock(st.mu);
  for (const auto& [base, end] : st.ranges)
    if (lo < end && base < hi) return true;
  return false;
}

void Context::note_pages(bool huge, const char* why) {
  std::atomic<bool>& told = huge ? told_huge_ : told_small_;
  if (told.exchange(true, std::memory_order_relaxed)) return;
  if (huge)
    RDTX_LOG(verbs_log(), Notice, "%s: alloc_memory uses 2 MiB huge pages (huge=%s)", name_.c_str(),
             to_string(cfg_.huge));
  else
    RDTX_LOG(verbs_log(), Notice, "%s: alloc_memory uses 4 KiB pages (huge=%s%s)", name_.c_str(), to_string(cfg_.huge),
             why);
}

}  // namespace rdtx::rdma::verbs
