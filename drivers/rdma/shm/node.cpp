#include "node.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "env/tsc.hpp"
#include "shared_word.hpp"
#include "shm.hpp"
#include "shm_log.hpp"

namespace rdtx::rdma::shm {

namespace {
constexpr int kOpenAttempts = 40;
constexpr useconds_t kLockRetryUs = 500;  // peers hold a shared lock for microseconds to test liveness
constexpr uint32_t kMaxQpSeq = kQpSeqMask;

bool process_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

int owner_pid(int fd) {
  SegmentHeader h{};
  if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) return 0;
  return h.pid;
}

// Removes every file of a node but its control segment. Only called while
// holding the node's lock, so none of them belongs to a live owner.
void remove_node_files(const std::string& fabric, uint32_t node_id) {
  std::string prefix = node_file_prefix(fabric, node_id);
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) unlinkat(dirfd(dir), e->d_name, 0);
  }
  closedir(dir);
}

}  // namespace

// Reclaims the nodes of every fabric whose owners died (SIGKILL, the OOM
// killer): such a node keeps its files in /dev/shm, taking memory that
// later runs, which meet in fabrics of their own, would never reclaim. A
// node is its owner's while the owner holds the lock on its control
// segment, so a segment that is sized (created) and can be locked is a dead
// owner's; one being created (size 0) is left alone. Peers still mapping
// its files keep their mappings.
void reclaim_dead_nodes() {
  DIR* dir = opendir(kShmDir);
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    // A control segment: "rdtx.<fabric>.n<node>", nothing after the number.
    const std::string name = e->d_name;
    if (name.rfind("rdtx.", 0) != 0) continue;
    const size_t n = name.rfind(".n");
    if (n == std::string::npos || n <= 5 || n + 2 == name.size() ||
        name.find_first_not_of("0123456789", n + 2) != std::string::npos)
      continue;
    const std::string fabric = name.substr(5, n - 5);
    const unsigned long id = std::strtoul(name.c_str() + n + 2, nullptr, 10);
    if (!valid_fabric_name(fabric) || id > UINT32_MAX) continue;
    int fd = openat(dirfd(dir), e->d_name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;
    struct stat mine {}, named {};
    if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &mine) == 0 && mine.st_size != 0 &&
        fstatat(dirfd(dir), e->d_name, &named, AT_SYMLINK_NOFOLLOW) == 0 && mine.st_ino == named.st_ino &&
        mine.st_dev == named.st_dev) {
      RDTX_LOG(shm_log(), Notice, "reclaiming node %lu of fabric %s left by pid %d, which is gone", id,
               fabric.c_str(), owner_pid(fd));
      remove_node_files(fabric, static_cast<uint32_t>(id));
      unlinkat(dirfd(dir), e->d_name, 0);
    }
    close(fd);  // releases the lock
  }
  closedir(dir);
}

Result<std::shared_ptr<Node>> Node::open(const ShmConfig& cfg, uint32_t node_id, const std::string& fabric) {
  if (!valid_fabric_name(fabric))
    return make_error(EINVAL, "fabric name '%s' is invalid: use 1 to %zu characters of [A-Za-z0-9_-]", fabric.c_str(),
                      kMaxFabricName);
  std::string path = node_path(fabric, node_id);
  reclaim_dead_nodes();
  for (int attempt = 0; attempt < kOpenAttempts; ++attempt) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return make_error(errno, "cannot create %s: %s", path.c_str(), strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      int pid = owner_pid(fd);
      close(fd);
      if (err != EWOULDBLOCK) return make_error(err, "cannot lock %s: %s", path.c_str(), strerror(err));
      // Retry while the holder may be an owner mid-creation (no pid yet) or a
      // peer testing a stale segment's liveness (dead pid).
      if (attempt + 1 < kOpenAttempts && !process_alive(pid)) {
        usleep(kLockRetryUs);
        continue;
      }
      return make_error(EBUSY, "node %u of fabric %s is already in use by pid %d", node_id, fabric.c_str(), pid);
    }
    // The lock is ours, but the name may have been unlinked (by an owner
    // closing, or a reclaim) between our open and our lock: start again.
    struct stat mine {}, named {};
    if (fstat(fd, &mine) != 0 || stat(path.c_str(), &named) != 0 || mine.st_ino != named.st_ino ||
        mine.st_dev != named.st_dev) {
      close(fd);
      continue;
    }
    if (mine.st_size != 0) {
      // Nobody holds the lock, so the owner died: reclaim under a fresh
      // inode, so that peers still mapping the old one never fault.
      RDTX_LOG(shm_log(), Notice, "reclaiming stale node %u of fabric %s left by pid %d", node_id, fabric.c_str(),
               owner_pid(fd));
      remove_node_files(fabric, node_id);
      unlink(path.c_str());
      close(fd);
      continue;
    }
    // A leftover memory or queue file of a crash during creation.
    remove_node_files(fabric, node_id);
    auto seg = MappedFile::adopt(fd, path, kSegmentSize);
    if (!seg.ok()) return seg.error();
    // The NIC state (a calendar per resource, 512 KiB), with the RNIC model
    // only: off, the model leaves no trace. Zero: every resource free.
    MappedFile nic;
    if (cfg.nic.any()) {
      auto f = MappedFile::create(nic_path(fabric, node_id), round_up(sizeof(NicShared), kPageSize));
      if (!f.ok()) return f.error();
      nic = std::move(*f);
      store_word(reinterpret_cast<NicShared*>(nic.data())->magic, NicShared::kMagic, std::memory_order_release);
    }
    // The atomic unit, with atomics=hca only (zero: every stripe free).
    MappedFile atomics;
    if (cfg.atomics == AtomicsMode::kHca) {
      auto f = MappedFile::create(atomics_path(fabric, node_id), round_up(sizeof(HcaAtomicUnit), kPageSize));
      if (!f.ok()) return f.error();
      atomics = std::move(*f);
      store_word(reinterpret_cast<HcaAtomicUnit*>(atomics.data())->magic, HcaAtomicUnit::kMagic,
                 std::memory_order_release);
    }
    uint64_t token = random_u64();
    auto* h = reinterpret_cast<SegmentHeader*>(seg->data());
    h->version = kLayoutVersion;
    h->node_id = node_id;
    h->fabric_hash = shm::fabric_hash(fabric);
    h->node_token = token;
    h->process_token = process_token();
    h->pid = getpid();
    h->segment_size = kSegmentSize;
    std::memcpy(h->fabric, fabric.c_str(), fabric.size() + 1);
    // Release: a peer that validates the magic sees the header.
    store_word(h->magic, kSegmentMagic, std::memory_order_release);
    RDTX_LOG(shm_log(), Info, "node %u of fabric %s open (%s)", node_id, fabric.c_str(), path.c_str());
    uint64_t seed = cfg.seed_given ? cfg.seed : random_u64();
    if (cfg.needs_seed())
      RDTX_LOG(shm_log(), Notice,
               "node %u of fabric %s: adversarial modes on (read_order=%s write_order=%s ud_drop=%g ud_dup=%g "
               "ud_delay=%g), seed=%llu%s",
               node_id, fabric.c_str(), to_string(cfg.read_order), to_string(cfg.write_order), cfg.ud_drop,
               cfg.ud_dup, cfg.ud_delay, static_cast<unsigned long long>(seed),
               cfg.seed_given ? "" : " (drawn: pass it as seed= to repeat the choices)");
    if (cfg.has_pause && cfg.pause_node == node_id)
      RDTX_LOG(shm_log(), Notice, "node %u of fabric %s will stop from %llu ms to %llu ms after now", node_id,
               fabric.c_str(), static_cast<unsigned long long>(cfg.pause_at_ms),
               static_cast<unsigned long long>(cfg.pause_at_ms + cfg.pause_ms));
    if (cfg.atomics == AtomicsMode::kHca)
      RDTX_LOG(shm_log(), Notice,
               "node %u of fabric %s: atomics=hca: remote CAS/FAA on its memory are atomic with respect to each "
               "other only, not to CPU atomics (as IBV_ATOMIC_HCA)",
               node_id, fabric.c_str());
    return std::make_shared<Node>(std::move(*seg), std::move(nic), std::move(atomics), cfg, node_id, fabric, token,
                                  seed);
  }
  return make_error(EAGAIN, "could not claim node %u of fabric %s: %s keeps changing", node_id, fabric.c_str(),
                    path.c_str());
}

Node::Node(MappedFile segment, MappedFile nic, MappedFile atomics, const ShmConfig& cfg, uint32_t node_id,
           const std::string& fabric, uint64_t token, uint64_t seed)
    : cfg_(cfg),
      latency_(cfg.latency_ns, cfg.bw_gbps),
      nic_model_(cfg.nic, env::tsc_hz()),
      node_id_(node_id),
      fabric_(fabric),
      fabric_hash_(shm::fabric_hash(fabric)),
      token_(token),
      seed_(seed),
      timed_(latency_.enabled() || nic_model_.enabled() || (cfg.has_pause && cfg.pause_node == node_id) ||
             cfg.ud_delay > 0 || cfg.rc_stall > 0),
      segment_(std::move(segment)),
      nic_file_(std::move(nic)),
      nic_(reinterpret_cast<NicShared*>(nic_file_.data())),  // nullptr without the model
      atomics_file_(std::move(atomics)),
      atomic_unit_(reinterpret_cast<HcaAtomicUnit*>(atomics_file_.data())),  // nullptr with atomics=cpu
      regions_(reinterpret_cast<RegionEntry*>(segment_.data() + kRegionsOffset)),
      mems_(reinterpret_cast<MemEntry*>(segment_.data() + kMemsOffset)),
      region_gen_(kMaxRegions, 0) {
  // Hand out low slots first (pop from the back).
  for (uint32_t i = kMaxRegions; i-- > 0;) free_regions_.push_back(i);
  for (uint32_t i = kMaxMemFiles; i-- > 0;) free_mem_ids_.push_back(i);
  if (cfg.has_pause && cfg.pause_node == node_id) {
    // The window counts from now, the device's open, on this node's clock.
    pause_start_ = env::tsc() + env::ns_to_tsc(cfg.pause_at_ms * 1'000'000);
    pause_len_ = std::max<uint64_t>(env::ns_to_tsc(cfg.pause_ms * 1'000'000), 1);
  }
}

Result<MemoryRegion> Node::reg_mr(void* addr, size_t length, uint32_t access, uint32_t pd) {
  if (addr == nullptr || length == 0)
    return make_error(EINVAL, "reg_mr(%p, %zu): empty region", addr, length);
  if ((access & ~uint32_t{kAccessAll}) != 0)
    return make_error(EINVAL, "reg_mr: unknown access bits 0x%x", access & ~uint32_t{kAccessAll});
  if ((access & (kRemoteWrite | kRemoteAtomic)) != 0 && (access & kLocalWrite) == 0)
    return make_error(EINVAL, "reg_mr: remote write or atomic access requires kLocalWrite (as in verbs)");
  uint64_t base = reinterpret_cast<uint64_t>(addr);
  if (base + length < base) return make_error(EINVAL, "reg_mr(%p, %zu): range wraps around", addr, length);

  std::lock_guard lock(mu_);
  if (free_regions_.empty())
    return make_error(ENOSPC, "node %u: all %u memory regions are registered", node_id_, kMaxRegions);
  Region r;
  r.base = base;
  r.length = length;
  r.access = access;
  r.pd = pd;
  // Backed by one of our memory files? Then peers in other processes can
  // reach it through their mapping of that file.
  auto it = memory_.upper_bound(base);
  if (it != memory_.begin()) {
    --it;
    if (base - it->first <= it->second.size && length <= it->second.size - (base - it->first)) {
      r.mem_id = it->second.id;
      r.mem_gen = it->second.gen;
      r.mem_offset = base - it->first;
    }
  }
  uint32_t index = free_regions_.back();
  free_regions_.pop_back();
  uint32_t gen = region_gen_[index] % kMaxRegionGen + 1;  // 1..kMaxRegionGen: keys are never 0
  region_gen_[index] = gen;
  uint32_t key = make_key(index, gen);
  regions_.publish(key, r);
  live_regions_[index] = LiveRegion{key, r.mem_id, r.mem_gen, pd};
  RDTX_LOG(shm_log(), Debug, "node %u: registered [%p, +%zu) access 0x%x key 0x%x%s", node_id_, addr, length, access,
           key, r.mem_id == kNoMemFile ? " (process-local memory)" : "");
  MemoryRegion mr;
  mr.addr = addr;
  mr.length = length;
  mr.lkey = key;
  mr.rkey = key;
  return mr;
}

Result<void> Node::dereg_mr(const MemoryRegion& mr, uint32_t pd) {
  std::lock_guard lock(mu_);
  uint32_t index = mr.rkey & kRegionIndexMask;
  auto it = live_regions_.find(index);
  if (it == live_regions_.end() || it->second.key != mr.rkey)
    return make_error(EINVAL, "dereg_mr: key 0x%x is not a registered region of node %u", mr.rkey, node_id_);
  if (it->second.pd != pd)
    return make_error(EINVAL, "dereg_mr: key 0x%x of node %u was registered by another device context", mr.rkey,
                      node_id_);
  regions_.retire(mr.rkey);
  live_regions_.erase(it);
  free_regions_.push_back(index);
  return {};
}

Result<Node::MemFile> Node::alloc_memory(size_t bytes, size_t commit) {
  if (bytes == 0) return make_error(EINVAL, "alloc_memory(0): empty allocation");
  size_t size = round_up(bytes, kPageSize);
  const bool sparse = commit < bytes;
  std::lock_guard lock(mu_);
  if (free_mem_ids_.empty())
    return make_error(ENOSPC, "node %u: all %u memory allocations are in use", node_id_, kMaxMemFiles);
  uint32_t id = free_mem_ids_.back();
  uint32_t gen = ++mem_gen_ == 0 ? ++mem_gen_ : mem_gen_;  // 0 means free
  auto file = sparse ? MappedFile::create_sparse(mem_path(fabric_, node_id_, id, gen), size, commit)
                     : MappedFile::create(mem_path(fabric_, node_id_, id, gen), size);
  if (!file.ok()) return file.error();
  free_mem_ids_.pop_back();
  store_word(mems_[id].size, uint64_t{size}, std::memory_order_relaxed);
  store_word(mems_[id].flags, sparse ? kMemSparse : 0u, std::memory_order_relaxed);
  // Release: a peer that sees the generation sees the size.
  store_word(mems_[id].gen, gen, std::memory_order_release);
  memory_[reinterpret_cast<uintptr_t>(file->data())] = LiveMemory{id, gen, size};
  return MemFile{id, gen, std::move(*file)};
}

void Node::free_memory(uint32_t id, uint32_t gen, const uint8_t* base, size_t size) {
  std::lock_guard lock(mu_);
  int stale = 0;
  for (auto it = live_regions_.begin(); it != live_regions_.end();) {
    if (it->second.mem_id == id && it->second.mem_gen == gen) {
      regions_.retire(it->second.key);
      free_regions_.push_back(it->first);
      it = live_regions_.erase(it);
      ++stale;
    } else {
      ++it;
    }
  }
  if (stale > 0)
    RDTX_LOG(shm_log(), Debug, "node %u: memory [%p, +%zu) freed with %d region(s) still registered; deregistered them",
             node_id_, static_cast<const void*>(base), size, stale);
  store_word(mems_[id].gen, 0u, std::memory_order_release);
  memory_.erase(reinterpret_cast<uintptr_t>(base));
  free_mem_ids_.push_back(id);
}

Result<std::shared_ptr<PeerNode>> Node::peer(uint32_t node_id, uint64_t token) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(node_id);
  if (it == peers_.end() || it->second->token() != token) {
    auto p = PeerNode::open(fabric_, node_id, token, nic_model_.enabled(), cfg_.atomics == AtomicsMode::kHca);
    if (!p.ok()) return p.error();
    it = peers_.insert_or_assign(node_id, std::move(*p)).first;
  }
  it->second->map_live_memory();
  return it->second;
}

Result<RemoteRecvQueue> Node::remote_queue(uint32_t node_id, uint32_t qpn, uint64_t token) {
  const std::string path = qp_path(fabric_, node_id, qpn);
  std::lock_guard lock(mu_);
  std::weak_ptr<const MappedFile>& cached = remote_queues_[{node_id, qpn}];
  // A mapping still held is reused; attach() checks the token, so a queue
  // of an earlier incarnation is refused as stale, as open() would.
  if (auto file = cached.lock()) {
    auto q = RemoteRecvQueue::attach(std::move(file), path, qpn, token);
    if (q.ok() || q.error().code != ESTALE) return q;
  }
  auto q = RemoteRecvQueue::open(path, qpn, token);
  if (q.ok()) cached = q->file();
  return q;
}

void Node::set_refused(uint32_t qpn, bool refused) {
  auto* words = reinterpret_cast<uint64_t*>(segment_.data() + kRefusedOffset);
  const uint32_t seq = qpn & kQpSeqMask;
  const uint64_t bit = uint64_t{1} << (seq % 64);
  if (refused)
    __atomic_fetch_or(&words[seq / 64], bit, __ATOMIC_RELEASE);
  else
    __atomic_fetch_and(&words[seq / 64], ~bit, __ATOMIC_RELEASE);
}

Result<uint32_t> Node::next_qpn() {
  std::lock_guard lock(mu_);
  if (qp_seq_ == kMaxQpSeq) return make_error(ENOSPC, "node %u: QP numbers exhausted", node_id_);
  // Unique within a fabric of up to 4096 nodes, which helps reading traces.
  return (node_id_ << kQpSeqBits) | ++qp_seq_;
}

}  // namespace rdtx::rdma::shm
