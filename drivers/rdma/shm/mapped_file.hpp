// A file in /dev/shm mapped into this process: the unit every shared
// structure of the shm driver lives in. Owned files are unlinked when the
// owner drops them; peers' mappings stay valid after an unlink, so a peer
// never faults because an owner went away.
// Thread-safety: a plain value type; the mapped bytes follow the rules of
// whatever lives in them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/result.hpp"

namespace rdtx::rdma::shm {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Creates a new file (it must not exist) of `size` zero bytes, maps it
  // read-write and pre-faults it (as an RNIC pins registered memory). The
  // file is unlinked when this object is destroyed.
  static Result<MappedFile> create(const std::string& path, size_t size);
  // Maps an owner's file: all of it, read-only or read-write. Fails unless it
  // is at least `min_size` bytes.
  static Result<MappedFile> open(const std::string& path, bool writable, size_t min_size);
  // Takes over an open descriptor (and any flock on it), maps `size` bytes
  // read-write, and unlinks `path` on destruction before closing `fd`.
  static Result<MappedFile> adopt(int fd, const std::string& path, size_t size);

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();

  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;  // kept open only by adopt(): it carries the owner's flock
  std::string path_;
  bool owner_ = false;
};

}  // namespace rdtx::rdma::shm
