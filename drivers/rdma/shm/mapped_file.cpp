#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "segment.hpp"

namespace rdtx::rdma::shm {

namespace {
// Sizes the file and reserves its blocks: tmpfs files are sparse, so a
// /dev/shm too small for them would otherwise fail later, as SIGBUS on a
// first touch, instead of here with ENOSPC.
Result<void> back(int fd, size_t offset, size_t length, const std::string& path) {
  if (int err = posix_fallocate(fd, static_cast<off_t>(offset), static_cast<off_t>(length)); err != 0)
    return make_error(err, "cannot reserve %zu bytes for %s: %s%s", length, path.c_str(), strerror(err),
                      err == ENOSPC ? " (the file system is full: df /dev/shm)" : "");
  return {};
}

Result<void> size_file(int fd, size_t size, size_t commit, const std::string& path) {
  if (ftruncate(fd, static_cast<off_t>(size)) != 0)
    return make_error(errno, "cannot size %s to %zu bytes: %s", path.c_str(), size, strerror(errno));
  return commit == 0 ? Result<void>{} : back(fd, 0, commit, path);
}

Result<uint8_t*> map(int fd, size_t size, bool writable, bool populate, const std::string& path) {
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = mmap(nullptr, size, prot, MAP_SHARED | (writable && populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    // ENOMEM is also what mmap returns when the process holds
    // vm.max_map_count mappings already, with memory to spare.
    return make_error(err, "cannot map %s (%zu bytes): %s%s", path.c_str(), size, strerror(err),
                      err == ENOMEM ? " (out of memory, or this process reached vm.max_map_count mappings: "
                                      "see /proc/sys/vm/max_map_count)"
                                    : "");
  }
  return static_cast<uint8_t*>(p);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14
#endif

// Pre-faults backed pages, as an RNIC pins registered memory. The touch
// adds 0 atomically: a peer may already write into the range.
void prefault(uint8_t* p, size_t length) {
  if (length == 0 || madvise(p, length, MADV_POPULATE_WRITE) == 0) return;
  for (size_t off = 0; off < length; off += kPageSize)
    __atomic_fetch_add(p + off, 0, __ATOMIC_RELAXED);
}
}  // namespace

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      fd_(std::exchange(o.fd_, -1)),
      path_(std::move(o.path_)),
      owner_(std::exchange(o.owner_, false)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    owner_ = std::exchange(o.owner_, false);
  }
  return *this;
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  // Unlink before closing: closing releases the owner's flock, and the name
  // must be gone by the time another process may claim it.
  if (owner_) unlink(path_.c_str());
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  fd_ = -1;
  owner_ = false;
}

Result<MappedFile> MappedFile::create(const std::string& path, size_t size) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return make_error(errno, "cannot create %s: %s", path.c_str(), strerror(errno));
  MappedFile f;
  f.path_ = path;
  f.owner_ = true;
  if (auto sized = size_file(fd, size, size, path); !sized.ok()) {
    close(fd);
    return sized.error();  // f's destructor unlinks the file
  }
  auto data = map(fd, size, true, true, path);
  close(fd);  // the mapping keeps the file alive
  if (!data.ok()) return data.error();
  f.data_ = *data;
  f.size_ = size;
  return f;
}

Result<MappedFile> MappedFile::create_sparse(const std::string& path, size_t size, size_t commit) {
  if (commit > size) return make_error(EINVAL, "%s: %zu bytes to commit of %zu", path.c_str(), commit, size);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return make_error(errno, "cannot create %s: %s", path.c_str(), strerror(errno));
  MappedFile f;
  f.path_ = path;
  f.owner_ = true;
  f.fd_ = fd;  // f's destructor closes it and unlinks the file
  RDTX_TRY(size_file(fd, size, commit, path));
  auto data = map(fd, size, true, false, path);
  if (!data.ok()) return data.error();
  f.data_ = *data;
  f.size_ = size;
  prefault(f.data_, round_up(commit, kPageSize));
  return f;
}

Result<void> MappedFile::commit(size_t offset, size_t length) {
  if (fd_ < 0 || offset > size_ || length > size_ - offset)
    return make_error(EINVAL, "%s: cannot commit [%zu, +%zu) of %zu bytes", path_.c_str(), offset, length, size_);
  const size_t first = offset / kPageSize * kPageSize;
  const size_t end = std::min(round_up(offset + length, kPageSize), size_);
  RDTX_TRY(back(fd_, first, end - first, path_));
  prefault(data_ + first, end - first);
  return {};
}

Result<MappedFile> MappedFile::open(const std::string& path, bool writable, size_t min_size, bool populate) {
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return make_error(errno, "cannot open %s: %s", path.c_str(), strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < min_size || st.st_size == 0) {
    close(fd);
    return make_error(EPROTO, "%s is %lld bytes, expected at least %zu", path.c_str(),
                      static_cast<long long>(st.st_size), min_size);
  }
  auto data = map(fd, static_cast<size_t>(st.st_size), writable, populate, path);
  close(fd);
  if (!data.ok()) return data.error();
  MappedFile f;
  f.data_ = *data;
  f.size_ = static_cast<size_t>(st.st_size);
  f.path_ = path;
  return f;
}

Result<MappedFile> MappedFile::adopt(int fd, const std::string& path, size_t size) {
  MappedFile f;
  f.fd_ = fd;
  f.path_ = path;
  f.owner_ = true;
  RDTX_TRY(size_file(fd, size, size, path));
  auto data = map(fd, size, true, true, path);
  if (!data.ok()) return data.error();
  f.data_ = *data;
  f.size_ = size;
  return f;
}

}  // namespace rdtx::rdma::shm
