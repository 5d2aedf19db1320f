#include "segment.hpp"

#include <sys/random.h>
#include <unistd.h>

#include "env/tsc.hpp"

namespace rdtx::rdma::shm {

std::string node_file_prefix(const std::string& fabric, uint32_t node_id) {
  return "rdtx." + fabric + ".n" + std::to_string(node_id) + ".";
}

std::string node_path(const std::string& fabric, uint32_t node_id) {
  std::string prefix = node_file_prefix(fabric, node_id);
  prefix.pop_back();  // the control segment is the prefix without its dot
  return std::string(kShmDir) + "/" + prefix;
}

std::string mem_path(const std::string& fabric, uint32_t node_id, uint32_t id, uint32_t gen) {
  return std::string(kShmDir) + "/" + node_file_prefix(fabric, node_id) + "m" + std::to_string(id) + "-" +
         std::to_string(gen);
}

std::string nic_path(const std::string& fabric, uint32_t node_id) {
  return std::string(kShmDir) + "/" + node_file_prefix(fabric, node_id) + "nic";
}

std::string atomics_path(const std::string& fabric, uint32_t node_id) {
  return std::string(kShmDir) + "/" + node_file_prefix(fabric, node_id) + "atomics";
}

std::string qp_path(const std::string& fabric, uint32_t node_id, uint32_t qpn) {
  return std::string(kShmDir) + "/" + node_file_prefix(fabric, node_id) + "q" + std::to_string(qpn);
}

bool valid_fabric_name(const std::string& fabric) {
  if (fabric.empty() || fabric.size() > kMaxFabricName) return false;
  for (char c : fabric) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

uint64_t fabric_hash(const std::string& fabric) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : fabric) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) == sizeof v && v != 0) return v;
  // No entropy source: good enough to tell incarnations apart.
  return env::tsc() ^ (static_cast<uint64_t>(getpid()) << 32) ^ reinterpret_cast<uintptr_t>(&v);
}

uint64_t process_token() {
  static const uint64_t token = random_u64();
  return token;
}

}  // namespace rdtx::rdma::shm
