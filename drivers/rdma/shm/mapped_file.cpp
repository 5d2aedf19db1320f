#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

namespace rdtx::rdma::shm {

namespace {
// Sizes the file and reserves its blocks: tmpfs files are sparse, so a
// /dev/shm too small for them would otherwise fail later, as SIGBUS on a
// first touch, instead of here with ENOSPC.
Result<void> size_file(int fd, size_t size, const std::string& path) {
  if (ftruncate(fd, static_cast<off_t>(size)) != 0)
    return make_error(errno, "cannot size %s to %zu bytes: %s", path.c_str(), size, strerror(errno));
  if (int err = posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0)
    return make_error(err, "cannot reserve %zu bytes for %s: %s%s", size, path.c_str(), strerror(err),
                      err == ENOSPC ? " (the file system is full: df /dev/shm)" : "");
  return {};
}

Result<uint8_t*> map(int fd, size_t size, bool writable, const std::string& path) {
  int prot = PROT_READ | (writable ? PROT_WRITE : 0);
  void* p = mmap(nullptr, size, prot, MAP_SHARED | (writable ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) return make_error(errno, "cannot map %s (%zu bytes): %s", path.c_str(), size, strerror(errno));
  return static_cast<uint8_t*>(p);
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
  if (auto sized = size_file(fd, size, path); !sized.ok()) {
    close(fd);
    return sized.error();  // f's destructor unlinks the file
  }
  auto data = map(fd, size, true, path);
  close(fd);  // the mapping keeps the file alive
  if (!data.ok()) return data.error();
  f.data_ = *data;
  f.size_ = size;
  return f;
}

Result<MappedFile> MappedFile::open(const std::string& path, bool writable, size_t min_size) {
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return make_error(errno, "cannot open %s: %s", path.c_str(), strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < min_size || st.st_size == 0) {
    close(fd);
    return make_error(EPROTO, "%s is %lld bytes, expected at least %zu", path.c_str(),
                      static_cast<long long>(st.st_size), min_size);
  }
  auto data = map(fd, static_cast<size_t>(st.st_size), writable, path);
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
  RDTX_TRY(size_file(fd, size, path));
  auto data = map(fd, size, true, path);
  if (!data.ok()) return data.error();
  f.data_ = *data;
  f.size_ = size;
  return f;
}

}  // namespace rdtx::rdma::shm
