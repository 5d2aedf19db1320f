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
  // A sparse file of `size` bytes of which only [0, commit) is backed (and
  // pre-faulted) now; commit() backs more. Keeps the file open for that.
  static Result<MappedFile> create_sparse(const std::string& path, size_t size, size_t commit);
  // Maps an owner's file: all of it, read-only or read-write. Fails unless it
  // is at least `min_size` bytes. `populate`: pre-fault it (never for a
  // sparse file: a fault in a hole would allocate what the owner has not
  // committed).
  static Result<MappedFile> open(const std::string& path, bool writable, size_t min_size, bool populate = true);
  // create_sparse() files: backs and pre-faults the pages of [offset,
  // offset + length). ENOSPC names /dev/shm; EINVAL outside the file or on
  // a file not from create_sparse().
  Result<void> commit(size_t offset, size_t length);
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
  int fd_ = -1;  // kept open by adopt() (it carries the owner's flock) and create_sparse() (commit())
  std::string path_;
  bool owner_ = false;
};

}  // namespace rdtx::rdma::shm
