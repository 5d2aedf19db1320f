#include "history/recorder.hpp"

#include <cassert>
#include <cstdio>
#include <cstring>
#include <utility>

#include "env/tsc.hpp"

namespace rdtx::history {

Result<Recorder> Recorder::create(RecorderOptions o) {
  if (o.worker >= kMaxWorkers || o.node_workers > kMaxWorkers)
    return make_error(EINVAL, "history recorder: worker %u of %u: at most %u workers per node", o.worker,
                      o.node_workers, kMaxWorkers);
  if (o.node_workers != 0 && o.worker >= o.node_workers)
    return make_error(EINVAL, "history recorder: worker %u, but the node has %u workers", o.worker, o.node_workers);
  if (o.cluster_nodes != 0 && o.node >= o.cluster_nodes)
    return make_error(EINVAL, "history recorder: node %u, but the run has %u nodes", o.node, o.cluster_nodes);
  if (o.capacity_bytes < sizeof(TxnRecord))
    return make_error(EINVAL, "history recorder: capacity of %zu bytes holds no transaction (a record is %zu bytes)",
                      o.capacity_bytes, sizeof(TxnRecord));
  if (auto r = o.names.validate(); !r.ok())
    return make_error(EINVAL, "history recorder: %s", r.error().message.c_str());
  return Recorder(std::move(o));
}

Recorder::Recorder(RecorderOptions options)
    : options_(std::move(options)), buf_(std::make_unique_for_overwrite<std::byte[]>(options_.capacity_bytes)) {
  // Touch every page now so that the first pass over the buffer on the hot
  // path does not take a page fault per 4 KiB.
  std::memset(buf_.get(), 0, options_.capacity_bytes);
}

void Recorder::append(const TxnTrace& trace, Outcome outcome, uint16_t reason, uint64_t commit_ts) {
  // Ids from another worker would make the file unreadable; that is an
  // engine bug, caught here in debug builds and by the reader always.
  assert(txn_node(trace.id()) == options_.node && txn_worker(trace.id()) == options_.worker);
  std::span<const AccessRecord> acc = trace.accesses();
  const size_t bytes = sizeof(TxnRecord) + acc.size_bytes();
  if (truncated_ || trace.overflowed() || options_.capacity_bytes - used_ < bytes) {
    // Stop for good: a later, smaller attempt that still fitted would make
    // the history a non-prefix, which the checker could not reason about.
    truncated_ = true;
    ++dropped_;
    return;
  }
  TxnRecord rec = trace.record();
  rec.access_count = static_cast<uint32_t>(acc.size());
  rec.outcome = static_cast<uint8_t>(outcome);
  rec.abort_reason = reason;
  rec.commit_ts = commit_ts;
  rec.commit_tsc = env::tsc();
  std::memcpy(buf_.get() + used_, &rec, sizeof rec);
  std::memcpy(buf_.get() + used_ + sizeof rec, acc.data(), acc.size_bytes());
  used_ += bytes;
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
  h.flags = (truncated_ ? kFileTruncated : 0) | (options_.record_aborted ? kFileAbortsRecorded : 0);
  h.txn_count = txns_;
  h.access_count = accesses_;
  h.log_bytes = used_;
  h.dropped_txns = dropped_;
  h.capacity_bytes = options_.capacity_bytes;
  return h;
}

Result<void> Recorder::write_file(const std::string& path) const {
  std::vector<uint8_t> names = options_.names.encode();
  FileHeader h = header();
  h.names_bytes = names.size();
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return make_error(errno, "cannot create %s: %s", tmp.c_str(), std::strerror(errno));
  bool ok = std::fwrite(&h, sizeof h, 1, f) == 1 && std::fwrite(names.data(), 1, names.size(), f) == names.size() &&
            std::fwrite(buf_.get(), 1, used_, f) == used_;
  int err = errno;
  if (std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    return make_error(err, "cannot write %s: %s", tmp.c_str(), std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    std::remove(tmp.c_str());
    return make_error(err, "cannot rename %s to %s: %s", tmp.c_str(), path.c_str(), std::strerror(err));
  }
  return {};
}

Result<void> Recorder::append_to(History& h) const {
  Source src;
  src.node = options_.node;
  src.worker = options_.worker;
  src.node_workers = options_.node_workers;
  src.truncated = truncated_;
  src.aborts_recorded = options_.record_aborted;
  src.txns = txns_;
  src.dropped_txns = dropped_;
  RDTX_TRY(h.add_source(src, options_.run_id, options_.cluster_nodes, options_.names));
  size_t pos = 0;
  while (pos < used_) {
    TxnRecord rec;
    std::memcpy(&rec, buf_.get() + pos, sizeof rec);
    std::span<AccessRecord> dst = h.add_uninitialized(rec);
    if (!dst.empty()) std::memcpy(dst.data(), buf_.get() + pos + sizeof rec, dst.size_bytes());
    pos += sizeof rec + dst.size_bytes();
  }
  return {};
}

std::string Recorder::file_name(uint16_t node, uint16_t worker) {
  return "history-n" + std::to_string(node) + "-w" + std::to_string(worker) + kFileExtension;
}

}  // namespace rdtx::history
