#include "peer_node.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstring>

#include "shm_log.hpp"

namespace rdtx::rdma::shm {

namespace {
// True if nobody holds the owner's lock, i.e. the owner is gone. A shared
// lock taken (and dropped) here only makes a concurrent owner retry.
bool owner_gone(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return true;
  bool gone = flock(fd, LOCK_SH | LOCK_NB) == 0;
  close(fd);  // drops the lock, if taken
  return gone;
}
}  // namespace

Result<std::shared_ptr<PeerNode>> PeerNode::open(const std::string& fabric, uint32_t node_id, uint64_t expected_token,
                                                 bool map_nic, bool map_atomics) {
  std::string path = node_path(fabric, node_id);
  auto seg = MappedFile::open(path, false, kSegmentSize);
  if (!seg.ok()) {
    if (seg.error().code == ENOENT)
      return make_error(ENOENT, "node %u of fabric %s is not open (no %s)", node_id, fabric.c_str(), path.c_str());
    return seg.error();
  }
  const auto* h = reinterpret_cast<const SegmentHeader*>(seg->data());
  if (load_word(h->magic, std::memory_order_acquire) != kSegmentMagic)
    return make_error(EAGAIN, "node %u of fabric %s is still initialising (%s)", node_id, fabric.c_str(), path.c_str());
  if (h->version != kLayoutVersion || h->node_id != node_id || h->fabric_hash != fabric_hash(fabric) ||
      h->segment_size != kSegmentSize || seg->size() != kSegmentSize)
    return make_error(EPROTO, "%s is not a valid rdtx shm segment of this version for node %u", path.c_str(), node_id);
  if (h->node_token != expected_token)
    return make_error(ESTALE, "the address of node %u of fabric %s is stale: the node was restarted (pid %d)",
                      node_id, fabric.c_str(), h->pid);
  if (owner_gone(path))
    return make_error(EHOSTDOWN, "node %u of fabric %s is not running (stale segment left by pid %d)", node_id,
                      fabric.c_str(), h->pid);
  bool same = h->pid == getpid() && h->process_token == process_token();
  MappedFile nic;
  if (map_nic) {
    auto f = MappedFile::open(nic_path(fabric, node_id), true, sizeof(NicShared));
    if (!f.ok()) {
      if (f.error().code == ENOENT)
        return make_error(EINVAL, "node %u of fabric %s runs without the RNIC model (no %s): open every node with "
                          "the same nic devargs", node_id, fabric.c_str(), nic_path(fabric, node_id).c_str());
      return f.error();
    }
    if (load_word(reinterpret_cast<const NicShared*>(f->data())->magic, std::memory_order_acquire) != NicShared::kMagic)
      return make_error(EPROTO, "%s is not the NIC state of node %u", nic_path(fabric, node_id).c_str(), node_id);
    nic = std::move(*f);
  }
  MappedFile atomics;
  if (map_atomics) {
    const std::string path = atomics_path(fabric, node_id);
    auto f = MappedFile::open(path, true, sizeof(HcaAtomicUnit));
    if (!f.ok()) {
      if (f.error().code == ENOENT)
        return make_error(EINVAL,
                          "node %u of fabric %s runs with atomics=cpu (no %s): open every node with the same "
                          "atomics devargs",
                          node_id, fabric.c_str(), path.c_str());
      return f.error();
    }
    if (load_word(reinterpret_cast<const HcaAtomicUnit*>(f->data())->magic, std::memory_order_acquire) !=
        HcaAtomicUnit::kMagic)
      return make_error(EPROTO, "%s is not the atomic unit of node %u", path.c_str(), node_id);
    atomics = std::move(*f);
  }
  return std::make_shared<PeerNode>(std::move(*seg), std::move(nic), std::move(atomics), fabric, node_id,
                                    expected_token, same);
}

PeerNode::PeerNode(MappedFile segment, MappedFile nic, MappedFile atomics, std::string fabric, uint32_t node_id,
                   uint64_t token, bool same_process)
    : segment_(std::move(segment)),
      nic_file_(std::move(nic)),
      nic_(nic_file_.data() != nullptr ? reinterpret_cast<NicShared*>(nic_file_.data()) : nullptr),
      atomics_file_(std::move(atomics)),
      atomic_unit_(reinterpret_cast<HcaAtomicUnit*>(atomics_file_.data())),
      // The mapping is read-only and RegionTable only reads through lookup().
      regions_(reinterpret_cast<RegionEntry*>(segment_.data() + kRegionsOffset)),
      mems_(reinterpret_cast<const MemEntry*>(segment_.data() + kMemsOffset)),
      fabric_(std::move(fabric)),
      node_id_(node_id),
      token_(token),
      same_process_(same_process) {}

void PeerNode::map_live_memory() const {
  if (same_process_) return;
  for (uint32_t id = 0; id < kMaxMemFiles; ++id) {
    uint32_t gen = load_word(mems_[id].gen, std::memory_order_acquire);
    const MemMapping* m = mem_[id].load(std::memory_order_acquire);
    if (gen != 0 && (m == nullptr || m->gen != gen)) map_memory(id, gen);
  }
}

const PeerNode::MemMapping* PeerNode::map_memory(uint32_t id, uint32_t gen) const {
  std::lock_guard lock(map_mu_);
  const MemMapping* cur = mem_[id].load(std::memory_order_relaxed);
  if (cur != nullptr && cur->gen == gen) return cur;  // another thread mapped it meanwhile
  // Acquire pairs with the owner's release of the entry's generation.
  if (load_word(mems_[id].gen, std::memory_order_acquire) != gen) return nullptr;  // freed since
  size_t size = load_word(mems_[id].size, std::memory_order_relaxed);
  const bool sparse = (load_word(mems_[id].flags, std::memory_order_relaxed) & kMemSparse) != 0;
  auto file = MappedFile::open(mem_path(fabric_, node_id_, id, gen), true, size, !sparse);
  if (!file.ok()) {
    RDTX_LOG(shm_log(), Warning, "node %u: cannot map memory file %u: %s", node_id_, id, file.error().message.c_str());
    return nullptr;
  }
  mappings_.push_back(std::make_unique<MemMapping>(MemMapping{gen, std::move(*file)}));
  const MemMapping* m = mappings_.back().get();
  mem_[id].store(m, std::memory_order_release);  // readers see a complete MemMapping
  return m;
}

}  // namespace rdtx::rdma::shm
