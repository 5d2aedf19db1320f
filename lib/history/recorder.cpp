#include "history/recorder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <new>
#include <utility>
#include <vector>

#include "env/eal.hpp"
#include "env/tsc.hpp"
#include "history/checksum.hpp"

namespace rdtx::history {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

uint64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// Writes all of [p, p + n) at `off`; false with errno set on failure.
bool pwrite_all(int fd, const void* p, size_t n, uint64_t off) {
  const auto* b = static_cast<const std::byte*>(p);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, b, n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    b += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return true;
}

bool pread_all(int fd, void* p, size_t n, uint64_t off) {
  auto* b = static_cast<std::byte*>(p);
  while (n > 0) {
    const ssize_t r = ::pread(fd, b, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = EIO;
      return false;
    }
    b += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

// Copies n bytes of `in` from `in_off` to the end of `out` (at out_off): in
// the kernel where it can (copy_file_range), else through a buffer; in
// steps of at most 64 MiB, before each of which `stop` may end it (false,
// errno ECANCELED). False with errno set on failure.
bool copy_range(int in, uint64_t in_off, int out, uint64_t out_off, uint64_t n, const StopFn& stop) {
  constexpr uint64_t kStep = 64 * kMiB;
  auto stopped = [&] {
    if (!stop || !stop()) return false;
    errno = ECANCELED;
    return true;
  };
  while (n > 0) {
    if (stopped()) return false;
    auto io = static_cast<loff_t>(in_off), oo = static_cast<loff_t>(out_off);
    const ssize_t c = ::copy_file_range(in, &io, out, &oo, std::min(n, kStep), 0);
    if (c < 0 && errno == EINTR) continue;
    if (c <= 0) break;  // not supported here (EXDEV, ENOSYS, ...): copy by hand
    in_off += static_cast<uint64_t>(c);
    out_off += static_cast<uint64_t>(c);
    n -= static_cast<uint64_t>(c);
  }
  std::vector<std::byte> buf(n == 0 ? 0 : std::min<uint64_t>(n, 4 * kMiB));
  for (uint64_t since_poll = 0; n > 0;) {
    if (since_poll >= kStep) {
      if (stopped()) return false;
      since_poll = 0;
    }
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n, buf.size()));
    if (!pread_all(in, buf.data(), k, in_off) || !pwrite_all(out, buf.data(), k, out_off)) return false;
    since_poll += k;
    in_off += k;
    out_off += k;
    n -= k;
  }
  return true;
}

// Adds the whole records in `log` to h; returns the bytes used (a record
// cut at the end of `log` is left for the next piece).
size_t add_records(std::span<const std::byte> log, History& h) {
  size_t pos = 0;
  while (log.size() - pos >= sizeof(TxnRecord)) {
    TxnRecord rec;
    std::memcpy(&rec, log.data() + pos, sizeof rec);
    const size_t bytes =
        sizeof rec + size_t{rec.access_count} * sizeof(AccessRecord) + size_t{rec.snapshot_words} * 8;
    if (log.size() - pos < bytes) break;
    std::span<AccessRecord> dst = h.add_uninitialized(rec);
    if (!dst.empty()) std::memcpy(dst.data(), log.data() + pos + sizeof rec, dst.size_bytes());
    std::span<uint64_t> snap = h.mutable_snapshot(h.size() - 1);
    if (!snap.empty()) std::memcpy(snap.data(), log.data() + pos + sizeof rec + dst.size_bytes(), snap.size_bytes());
    pos += bytes;
  }
  return pos;
}

}  // namespace

Clock host_clock() {
  // The boot id names this boot of this host: processes that share it read
  // one TSC (invariant and synchronised across CPUs on the machines rdtx
  // runs on). FNV-1a of its text; 1 if it cannot be read (one host assumed
  // per run then: a cross-host run has it).
  uint64_t domain = 1;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    domain = 0xcbf29ce484222325ULL;
    for (int c; (c = std::fgetc(f)) != EOF && c != '\n';) domain = (domain ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
    std::fclose(f);
    if (domain == 0) domain = 1;
  }
  timespec ts{};
  const uint64_t tsc = env::hw_tsc();
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return Clock{domain, env::hw_tsc_hz(), tsc, static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec)};
}

Result<Recorder> Recorder::create(RecorderOptions o) {
  if (o.worker >= kMaxWorkers || o.node_workers > kMaxWorkers)
    return make_error(EINVAL, "history recorder: worker %u of %u: at most %u workers per node", o.worker,
                      o.node_workers, kMaxWorkers);
  if (o.node_workers != 0 && o.worker >= o.node_workers)
    return make_error(EINVAL, "history recorder: worker %u, but the node has %u workers", o.worker, o.node_workers);
  if (o.cluster_nodes != 0 && o.node >= o.cluster_nodes)
    return make_error(EINVAL, "history recorder: node %u, but the run has %u nodes", o.node, o.cluster_nodes);
  // Sizes are checked before anything is allocated: an allocation of tens
  // of GiB would throw (or, overcommitted, be killed later) instead.
  if (o.capacity_bytes / 2 < sizeof(TxnRecord))
    return make_error(EINVAL,
                      "history.capacity_mb: a history buffer of %zu bytes holds no transaction (each of its two halves "
                      "must hold a %zu-byte record)",
                      o.capacity_bytes, sizeof(TxnRecord));
  if (o.capacity_bytes > kMaxCapacityBytes)
    return make_error(EINVAL,
                      "history.capacity_mb: a history buffer of %llu MiB per worker is over the limit of %llu MiB "
                      "(the history streams to its file; the buffer only batches the writes)",
                      static_cast<unsigned long long>(o.capacity_bytes / kMiB),
                      static_cast<unsigned long long>(kMaxCapacityBytes / kMiB));
  if (const uint64_t mem = physical_memory(); mem != 0 && o.capacity_bytes > mem / 4)
    return make_error(EINVAL,
                      "history.capacity_mb: a history buffer of %llu MiB per worker is over a quarter of this "
                      "machine's %llu MiB of memory",
                      static_cast<unsigned long long>(o.capacity_bytes / kMiB),
                      static_cast<unsigned long long>(mem / kMiB));
  if (auto r = o.names.validate(); !r.ok())
    return make_error(EINVAL, "history recorder: %s", r.error().message.c_str());

  std::unique_ptr<std::byte[]> buf;
  try {
    buf = std::make_unique_for_overwrite<std::byte[]>(o.capacity_bytes);
  } catch (const std::bad_alloc&) {
    return make_error(ENOMEM, "history.capacity_mb: cannot allocate a history buffer of %llu MiB",
                      static_cast<unsigned long long>(o.capacity_bytes / kMiB));
  }
  std::string dir = o.spill_dir;
  if (dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    dir = t && *t ? t : "/tmp";
  }
  std::string path = dir + "/rdtx-history-n" + std::to_string(o.node) + "-w" + std::to_string(o.worker) + "-XXXXXX";
  const int fd = ::mkostemp(path.data(), O_CLOEXEC);
  if (fd < 0)
    return make_error(errno, "history recorder: cannot create a stream file in %s: %s", dir.c_str(),
                      std::strerror(errno));
  // Unnamed from now on: the file goes with its descriptor.
  ::unlink(path.c_str());
  return Recorder(std::move(o), std::move(buf), fd, std::move(path));
}

Recorder::Recorder(RecorderOptions options, std::unique_ptr<std::byte[]> buf, int fd, std::string spill_path)
    : options_(std::move(options)),
      buf_(std::move(buf)),
      half_bytes_(options_.capacity_bytes / 2 / 8 * 8),
      fd_(fd),
      spill_path_(std::move(spill_path)) {
  // Touch every page now so that the first pass over the buffer on the hot
  // path does not take a page fault per 4 KiB.
  std::memset(buf_.get(), 0, options_.capacity_bytes);
  // The header's place stays a hole until write_file(); the names go now.
  const std::vector<uint8_t> names = options_.names.encode();
  names_bytes_ = names.size();
  body_crc_ = crc32c_extend(0, names.data(), names.size());
  if (!pwrite_all(fd_.get(), names.data(), names.size(), sizeof(FileHeader))) stream_failed(errno);
}

Recorder::Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

void Recorder::stream_failed(int err) {
  // What is in memory would follow a gap in the file: give it up, so that
  // the history stays a prefix of the worker's outcomes.
  const uint64_t lost = half_txns_[0] + half_txns_[1];
  txns_ -= lost;
  accesses_ -= half_accesses_[0] + half_accesses_[1];
  dropped_ += lost;
  half_txns_[0] = half_txns_[1] = half_accesses_[0] = half_accesses_[1] = 0;
  used_ = pending_ = 0;
  truncated_ = true;
  stream_error_ = "cannot write the history stream file " + spill_path_ + " (unlinked): " + std::strerror(err);
}

// The background writer: the owner hands a half over by storing its length
// in `req` (after half, offset and crc); the thread writes it, extends crc,
// sets err on failure, and stores 0 (release) when done. kStop ends it.
struct Recorder::Writer {
  static constexpr uint64_t kStop = UINT64_MAX;
  std::atomic<uint64_t> req{0};
  const std::byte* half = nullptr;
  uint64_t offset = 0;
  uint32_t crc = 0;
  int err = 0;
  int fd = -1;
  std::unique_ptr<env::ControlThread> thread;  // last: joined first

  void run() {
    for (;;) {
      const uint64_t n = req.load(std::memory_order_acquire);
      if (n == kStop) return;
      if (n == 0) {
        req.wait(0, std::memory_order_acquire);
        continue;
      }
      if (pwrite_all(fd, half, n, offset)) crc = crc32c_extend(crc, half, n);
      else err = errno != 0 ? errno : EIO;
      req.store(0, std::memory_order_release);
      req.notify_all();
    }
  }
  // Waits until the half handed over is written (or none is).
  void wait_idle() {
    for (uint64_t v; (v = req.load(std::memory_order_acquire)) != 0 && v != kStop;) req.wait(v, std::memory_order_acquire);
  }
  ~Writer() {
    if (thread) {
      wait_idle();
      req.store(kStop, std::memory_order_release);
      req.notify_all();
    }
  }
};

Recorder::~Recorder() = default;
Recorder::Recorder(Recorder&&) noexcept = default;
Recorder& Recorder::operator=(Recorder&&) noexcept = default;

Result<void> Recorder::stream_in_background() {
  if (writer_ || !buf_) return {};
  auto w = std::make_unique<Writer>();
  w->fd = fd_.get();
  Writer* raw = w.get();
  auto t = env::ControlThread::start("rdtx-hist-w" + std::to_string(options_.worker), [raw] { raw->run(); });
  if (!t.ok()) return make_error(t.error().code, "history: %s", t.error().message.c_str());
  w->thread = std::move(*t);
  writer_ = std::move(w);
  return {};
}

void Recorder::collect_written() {
  const int h = active_ ^ 1;
  if (writer_->err != 0) {
    stream_failed(writer_->err);
    writer_->err = 0;
    return;
  }
  body_crc_ = writer_->crc;
  streamed_ += pending_;
  pending_ = 0;
  half_txns_[h] = half_accesses_[h] = 0;
}

void Recorder::end_streaming() {
  if (!writer_) return;
  writer_->wait_idle();
  if (pending_ != 0) collect_written();
  writer_.reset();  // stops and joins the thread
}

bool Recorder::flush_pending() {
  if (pending_ == 0 || !buf_) return false;  // nothing waiting, or moved from
  if (writer_) {
    if (writer_->req.load(std::memory_order_acquire) != 0) return false;  // still writing
    collect_written();
    return true;
  }
  const int h = active_ ^ 1;
  if (!pwrite_all(fd_.get(), half(h), pending_, sizeof(FileHeader) + names_bytes_ + streamed_)) {
    stream_failed(errno);
    return true;
  }
  body_crc_ = crc32c_extend(body_crc_, half(h), pending_);
  streamed_ += pending_;
  pending_ = 0;
  half_txns_[h] = half_accesses_[h] = 0;
  return true;
}

void Recorder::append(const TxnTrace& trace, Outcome outcome, uint16_t reason, uint64_t commit_ts) {
  // Ids from another worker would make the file unreadable; that is an
  // engine bug, caught here in debug builds and by the reader always.
  assert(txn_node(trace.id()) == options_.node && txn_worker(trace.id()) == options_.worker);
  std::span<const AccessRecord> acc = trace.accesses();
  // A snapshot vector with committed attempts of a recorder that records
  // them: an engine that promises them and gives none is caught by the
  // reader (a committed record without one).
  std::span<const uint64_t> snap =
      options_.snapshot_vectors && outcome == Outcome::kCommitted ? trace.snapshot() : std::span<const uint64_t>{};
  if (snap.size() > kMaxSnapshotWords) snap = {};
  const size_t bytes = sizeof(TxnRecord) + acc.size_bytes() + snap.size_bytes();
  // Once truncated, stop for good: a later attempt that still fitted would
  // make the history a non-prefix, which the checker could not reason about.
  if (truncated_ || trace.overflowed() || bytes > half_bytes_) return drop();
  if (half_bytes_ - used_ < bytes) {
    // Hand the full half over; if the previous one is still waiting (no
    // poller got to it), write that now, or wait for the writer.
    if (pending_ != 0) {
      if (writer_) writer_->wait_idle();
      flush_pending();
    }
    if (truncated_) return drop();
    pending_ = used_;
    active_ ^= 1;
    used_ = 0;
    if (writer_) {
      writer_->half = half(active_ ^ 1);
      writer_->offset = sizeof(FileHeader) + names_bytes_ + streamed_;
      writer_->crc = body_crc_;
      writer_->req.store(pending_, std::memory_order_release);
      writer_->req.notify_one();
    }
  }
  TxnRecord rec = trace.record();
  rec.access_count = static_cast<uint32_t>(acc.size());
  rec.outcome = static_cast<uint8_t>(outcome);
  rec.abort_reason = reason;
  rec.commit_ts = commit_ts;
  rec.commit_tsc = env::tsc();
  rec.snapshot_words = static_cast<uint16_t>(snap.size());
  if (snap.empty() && !options_.timestamp_order) rec.commit_slot = 0;
  if (!options_.clock.recorded()) rec.begin_tsc = 0;
  std::byte* dst = half(active_) + used_;
  std::memcpy(dst, &rec, sizeof rec);
  std::memcpy(dst + sizeof rec, acc.data(), acc.size_bytes());
  if (!snap.empty()) std::memcpy(dst + sizeof rec + acc.size_bytes(), snap.data(), snap.size_bytes());
  used_ += bytes;
  ++half_txns_[active_];
  half_accesses_[active_] += acc.size();
  ++txns_;
  accesses_ += acc.size();
}

FileHeader Recorder::header() const {
  FileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof h.magic);
  h.format_version = kFormatVersion;
  h.header_bytes = sizeof(FileHeader);
  h.run_id = options_.run_id;
  h.node = options_.node;
  h.worker = options_.worker;
  h.cluster_nodes = options_.cluster_nodes;
  h.node_workers = options_.node_workers;
  h.flags = (truncated_ ? kFileTruncated : 0) | (options_.record_aborted ? kFileAbortsRecorded : 0) |
            (options_.timestamp_order ? kFileTimestampOrder : 0) | (options_.clock.recorded() ? kFileRealTime : 0) |
            (options_.snapshot_vectors ? kFileSnapshotVectors : 0);
  h.clock_domain = options_.clock.domain;
  h.tsc_hz = options_.clock.tsc_hz;
  h.clock_tsc = options_.clock.tsc;
  h.clock_unix_ns = options_.clock.unix_ns;
  h.txn_count = txns_;
  h.access_count = accesses_;
  h.names_bytes = names_bytes_;
  h.log_bytes = bytes_used();
  h.dropped_txns = dropped_;
  h.capacity_bytes = options_.capacity_bytes;
  uint32_t crc = crc32c_extend(body_crc_, half(active_ ^ 1), pending_);
  h.body_crc = crc32c_extend(crc, half(active_), used_);
  h.header_crc = header_checksum(h);
  return h;
}

Result<void> Recorder::write_file(const std::string& path, const StopFn& stop) const {
  if (writer_) return make_error(EBUSY, "%s: the history is still streaming (end_streaming() first)", path.c_str());
  if (!stream_error_.empty()) return make_error(EIO, "%s: %s", path.c_str(), stream_error_.c_str());
  const FileHeader h = header();
  const std::string tmp = path + ".tmp";
  const int out = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) return make_error(errno, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
  const uint64_t streamed_end = sizeof h + names_bytes_ + streamed_;
  bool ok = pwrite_all(out, &h, sizeof h, 0) &&
            copy_range(fd_.get(), sizeof h, out, sizeof h, names_bytes_ + streamed_, stop) &&
            pwrite_all(out, half(active_ ^ 1), pending_, streamed_end) &&
            pwrite_all(out, half(active_), used_, streamed_end + pending_);
  int err = errno;
  if (::close(out) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    if (err == ECANCELED) return make_error(ECANCELED, "writing %s: stopped", path.c_str());
    return make_error(err, "cannot write %s: %s", tmp.c_str(), std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return make_error(err, "cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), std::strerror(err));
  }
  return {};
}

Result<void> Recorder::append_to(History& h, const StopFn& stop) const {
  if (writer_) return make_error(EBUSY, "history: still streaming (end_streaming() first)");
  if (!stream_error_.empty()) return make_error(EIO, "%s", stream_error_.c_str());
  Source src;
  src.node = options_.node;
  src.worker = options_.worker;
  src.node_workers = options_.node_workers;
  src.truncated = truncated_;
  src.aborts_recorded = options_.record_aborted;
  src.timestamp_order = options_.timestamp_order;
  src.snapshot_vectors = options_.snapshot_vectors;
  src.clock = options_.clock;
  src.txns = txns_;
  src.dropped_txns = dropped_;
  RDTX_TRY(h.add_source(src, options_.run_id, options_.cluster_nodes, options_.names));
  // The streamed part, a piece at a time; a record cut at a piece's end is
  // carried to the front of the next.
  std::vector<std::byte> piece(streamed_ == 0 ? 0 : std::min<uint64_t>(streamed_, 8 * kMiB));
  uint64_t off = sizeof(FileHeader) + names_bytes_, left = streamed_;
  size_t carried = 0;
  while (left > 0) {
    if (stop && stop())
      return make_error(ECANCELED, "reading the history stream file %s back: stopped", spill_path_.c_str());
    if (carried == piece.size()) piece.resize(piece.size() * 2);  // one record larger than a piece
    const size_t k = static_cast<size_t>(std::min<uint64_t>(left, piece.size() - carried));
    if (!pread_all(fd_.get(), piece.data() + carried, k, off))
      return make_error(errno, "cannot read the history stream file %s back: %s", spill_path_.c_str(),
                        std::strerror(errno));
    off += k;
    left -= k;
    const size_t have = carried + k;
    const size_t used = add_records({piece.data(), have}, h);
    carried = have - used;
    std::memmove(piece.data(), piece.data() + used, carried);
  }
  if (carried != 0)
    return make_error(EIO, "history stream file %s: %zu bytes of a cut record at its end", spill_path_.c_str(),
                      carried);
  add_records({half(active_ ^ 1), pending_}, h);
  add_records({half(active_), used_}, h);
  return {};
}

std::string Recorder::file_name(uint16_t node, uint16_t worker) {
  return "history-n" + std::to_string(node) + "-w" + std::to_string(worker) + kFileExtension;
}

}  // namespace rdtx::history
