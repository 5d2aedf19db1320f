#include "history/reader.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "history/checksum.hpp"

namespace rdtx::history {

namespace {

namespace fs = std::filesystem;

// Generous: three full name tables of long names fit.
constexpr uint64_t kMaxNamesBytes = uint64_t{64} << 20;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// A file whose header and names have been validated. It is closed in
// between and reopened for the log, so that a run with more workers than the
// process may have files open still loads.
struct OpenFile {
  std::string path;
  FileHeader h;
  NameTables names;
  uint32_t names_crc = 0;  // CRC32C of the names section, where body_crc starts
  uint64_t snapshot_words = 0;  // in the log, after the records (kFileSnapshotVectors)
};

// The log is read a piece at a time: few system calls, bounded memory.
constexpr size_t kPieceBytes = size_t{4} << 20;

std::string txn_label(TxnId id) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "n%u.w%u.c%u#%u", txn_node(id), txn_worker(id), txn_coroutine(id), txn_seq(id));
  return buf;
}

Error corrupt(const std::string& path, const std::string& what) {
  return make_error(EBADMSG, "%s: %s", path.c_str(), what.c_str());
}

bool read_exact(std::FILE* f, void* dst, size_t n) { return n == 0 || std::fread(dst, 1, n, f) == n; }

Result<OpenFile> open_file(const std::string& path) {
  OpenFile of;
  of.path = path;
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return make_error(ENOENT, "%s: %s", path.c_str(), ec.message().c_str());
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return make_error(errno, "%s: %s", path.c_str(), std::strerror(errno));

  FileHeader& h = of.h;
  if (size < sizeof h)
    return corrupt(path, "truncated file: " + std::to_string(size) + " bytes, shorter than the " +
                             std::to_string(sizeof h) + "-byte header");
  if (!read_exact(f.get(), &h, sizeof h)) return make_error(EIO, "%s: cannot read the header", path.c_str());
  if (std::memcmp(h.magic, kFileMagic, sizeof h.magic) != 0)
    return corrupt(path, "bad magic: not an rdtx history file");
  if (h.format_version != kFormatVersion)
    return corrupt(path, "format version " + std::to_string(h.format_version) + ", this reader knows version " +
                             std::to_string(kFormatVersion));
  if (h.header_bytes != sizeof h)
    return corrupt(path, "header size " + std::to_string(h.header_bytes) + ", expected " + std::to_string(sizeof h));
  // The checksum first: a damaged header is reported as damage, not as
  // whichever field the damage happened to hit.
  if (const uint32_t crc = header_checksum(h); crc != h.header_crc) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "header checksum mismatch (CRC32C %#010x, the header says %#010x): the file is corrupt",
                  crc, h.header_crc);
    return corrupt(path, msg);
  }
  if ((h.flags & ~kFileKnownFlags) != 0)
    return corrupt(path, "unknown flags " + std::to_string(h.flags & ~kFileKnownFlags) + " in the header");
  if ((h.flags & kFileTimestampOrder) && (h.flags & kFileSnapshotVectors))
    return corrupt(path, "the header says both timestamp order (flag 4) and snapshot vectors (flag 16)");
  if (h.reserved0 != 0) return corrupt(path, "reserved header bytes are not zero");
  if (h.flags & kFileRealTime) {
    if (h.tsc_hz == 0) return corrupt(path, "the header says real time is recorded, but its clock rate is 0");
  } else if (h.clock_domain != 0 || h.tsc_hz != 0 || h.clock_tsc != 0 || h.clock_unix_ns != 0) {
    return corrupt(path, "the header has a clock, but does not say real time is recorded");
  }
  if (h.dropped_txns != 0 && !(h.flags & kFileTruncated))
    return corrupt(path, "the header says " + std::to_string(h.dropped_txns) +
                             " transactions were not recorded, but the history is not marked truncated");
  if (h.names_bytes > kMaxNamesBytes || h.names_bytes % 8 != 0)
    return corrupt(path, "names section of " + std::to_string(h.names_bytes) + " bytes (a multiple of 8 up to " +
                             std::to_string(kMaxNamesBytes) + " expected)");
  // The log: the records, then (vector snapshots) whole words.
  uint64_t txn_bytes, acc_bytes, log_bytes, total;
  if (__builtin_mul_overflow(h.txn_count, sizeof(TxnRecord), &txn_bytes) ||
      __builtin_mul_overflow(h.access_count, sizeof(AccessRecord), &acc_bytes) ||
      __builtin_add_overflow(txn_bytes, acc_bytes, &log_bytes) || log_bytes > h.log_bytes ||
      (h.log_bytes - log_bytes) % 8 != 0 || (!(h.flags & kFileSnapshotVectors) && log_bytes != h.log_bytes))
    return corrupt(path, "the header's counts (" + std::to_string(h.txn_count) + " transactions, " +
                             std::to_string(h.access_count) + " accesses" +
                             ((h.flags & kFileSnapshotVectors) ? ", and snapshot words" : "") +
                             ") do not match its log size of " + std::to_string(h.log_bytes) + " bytes");
  of.snapshot_words = (h.log_bytes - log_bytes) / 8;
  if (__builtin_add_overflow(sizeof h + h.names_bytes, h.log_bytes, &total))
    return corrupt(path, "truncated file: the header announces more than 2^64 bytes");
  if (total > size)
    return corrupt(path, "truncated file: the header announces " + std::to_string(total) + " bytes, the file has " +
                             std::to_string(size));
  if (total < size) return corrupt(path, std::to_string(size - total) + " unexpected bytes after the log");

  std::vector<uint8_t> names(h.names_bytes);
  if (!read_exact(f.get(), names.data(), names.size()))
    return make_error(EIO, "%s: cannot read the names section", path.c_str());
  of.names_crc = crc32c_extend(0, names.data(), names.size());
  auto decoded = NameTables::decode(names);
  if (!decoded.ok()) return corrupt(path, decoded.error().message);
  of.names = std::move(*decoded);
  return of;
}

// Whether the i-th transaction record of `of` is valid: the checks of
// check_txn() without building its messages, which cost more than the rest
// of loading when done for every attempt.
bool txn_valid(const OpenFile& of, const TxnRecord& t, uint64_t accesses_left) {
  const bool committed = t.outcome == static_cast<uint8_t>(Outcome::kCommitted);
  const bool aborted = t.outcome == static_cast<uint8_t>(Outcome::kAborted);
  const bool vectors = (of.h.flags & kFileSnapshotVectors) != 0;
  return t.id != kInitialTxn && txn_node(t.id) == of.h.node && txn_worker(t.id) == of.h.worker &&
         (committed || aborted) && (committed || (of.h.flags & kFileAbortsRecorded)) &&
         (committed ? t.abort_reason == 0 : t.abort_reason < of.names.abort_reasons.size()) &&
         t.type < of.names.types.size() && t.reserved == 0 && t.access_count <= accesses_left &&
         (vectors && committed ? t.snapshot_words != 0 && (t.commit_ts == 0 || t.commit_slot < t.snapshot_words)
                               : t.snapshot_words == 0 &&
                                     (t.commit_slot == 0 || (committed && (of.h.flags & kFileTimestampOrder))));
}

bool access_valid(const OpenFile& of, const AccessRecord& a) {
  return a.op >= static_cast<uint8_t>(Op::kRead) && a.op <= static_cast<uint8_t>(Op::kDelete) &&
         (a.flags & ~kAccessKnownFlags) == 0 && (a.op != static_cast<uint8_t>(Op::kRead) || a.reads()) &&
         a.reserved == 0 && a.table < of.names.tables.size();
}

// Validates the i-th transaction record of `of`.
Result<void> check_txn(const OpenFile& of, uint64_t i, const TxnRecord& t, uint64_t accesses_left) {
  std::string what = "transaction " + std::to_string(i);
  if (t.id == kInitialTxn) return corrupt(of.path, what + " has id 0, the initial data's");
  what += " (" + txn_label(t.id) + ")";
  if (txn_node(t.id) != of.h.node || txn_worker(t.id) != of.h.worker)
    return corrupt(of.path, what + " belongs to another worker than the file's n" + std::to_string(of.h.node) + ".w" +
                                std::to_string(of.h.worker));
  if (t.outcome != static_cast<uint8_t>(Outcome::kCommitted) && t.outcome != static_cast<uint8_t>(Outcome::kAborted))
    return corrupt(of.path,
                   what + ": outcome " + std::to_string(t.outcome) + " is neither committed (1) nor aborted (2)");
  if (!t.committed() && !(of.h.flags & kFileAbortsRecorded))
    return corrupt(of.path, what + " is aborted, but the header says aborts are not recorded");
  if (t.committed() && t.abort_reason != 0)
    return corrupt(of.path, what + " committed with abort reason " + std::to_string(t.abort_reason));
  if (!t.committed() && t.abort_reason >= of.names.abort_reasons.size())
    return corrupt(of.path, what + ": abort reason " + std::to_string(t.abort_reason) + " is out of range (" +
                                std::to_string(of.names.abort_reasons.size()) + " reason names)");
  if (t.type >= of.names.types.size())
    return corrupt(of.path, what + ": type " + std::to_string(t.type) + " is out of range (" +
                                std::to_string(of.names.types.size()) + " type names)");
  if (t.reserved != 0) return corrupt(of.path, what + ": reserved bytes are not zero");
  if (!(of.h.flags & kFileSnapshotVectors) || !t.committed()) {
    if (t.snapshot_words != 0 ||
        (t.commit_slot != 0 && !(t.committed() && (of.h.flags & kFileTimestampOrder))))
      return corrupt(of.path, what + " has a snapshot vector (" + std::to_string(t.snapshot_words) + " words, slot " +
                                  std::to_string(t.commit_slot) + "), but " +
                                  (t.committed() ? "the header says snapshot vectors are not recorded"
                                                 : "it did not commit"));
  } else if (t.snapshot_words == 0) {
    return corrupt(of.path, what + " committed without its snapshot vector, which the header says is recorded");
  } else if (t.commit_ts != 0 && t.commit_slot >= t.snapshot_words) {
    return corrupt(of.path, what + ": commit slot " + std::to_string(t.commit_slot) + " is outside its " +
                                std::to_string(t.snapshot_words) + "-word snapshot vector");
  }
  if (t.access_count > accesses_left)
    return corrupt(of.path, what + " has " + std::to_string(t.access_count) + " accesses, past the end of the log (" +
                                std::to_string(accesses_left) + " left)");
  return {};
}

Result<void> check_access(const OpenFile& of, uint64_t i, const TxnRecord& t, uint32_t j, const AccessRecord& a) {
  auto bad = [&](const std::string& msg) {
    return corrupt(of.path, "transaction " + std::to_string(i) + " (" + txn_label(t.id) + "), access " +
                                std::to_string(j) + ": " + msg);
  };
  if (a.op < static_cast<uint8_t>(Op::kRead) || a.op > static_cast<uint8_t>(Op::kDelete))
    return bad("op " + std::to_string(a.op) + " is not read (1), write (2), insert (3) or delete (4)");
  if ((a.flags & ~kAccessKnownFlags) != 0) return bad("unknown flags " + std::to_string(a.flags));
  if (a.op == static_cast<uint8_t>(Op::kRead) && !a.reads()) return bad("a read without the version it read");
  if (a.reserved != 0) return bad("reserved bytes are not zero");
  if (a.table >= of.names.tables.size())
    return bad("table " + std::to_string(a.table) + " is out of range (" + std::to_string(of.names.tables.size()) +
               " table names)");
  return {};
}

// Reads the log of `of` into the History's arrays from attempt `txn_base`
// and access `acc_base` (its range, made room for by the caller): files are
// read in parallel, each into its own range.
Result<void> read_log(const OpenFile& of, History& h, uint64_t txn_base, uint64_t acc_base, uint64_t snap_base,
                      const StopFn& stop) {
  File f(std::fopen(of.path.c_str(), "rb"));
  if (!f) return make_error(errno, "%s: %s", of.path.c_str(), std::strerror(errno));
  if (std::fseek(f.get(), static_cast<long>(sizeof(FileHeader) + of.h.names_bytes), SEEK_SET) != 0)
    return make_error(EIO, "%s: cannot seek to the log: %s", of.path.c_str(), std::strerror(errno));
  TxnRecord* const txns = h.txn_data() + txn_base;
  uint64_t* const firsts = h.first_data() + txn_base;
  AccessRecord* const accs = h.access_data() + acc_base;
  uint64_t* const snap_firsts = h.snapshot_first_data() + txn_base;
  uint64_t* const snaps = h.snapshot_data() + snap_base;
  // One pass: every piece goes into the checksum as it is read, and is
  // parsed until a record is found invalid; the rest is then only
  // checksummed, so that damage is reported as a checksum mismatch rather
  // than as whatever the damaged record happens to look like.
  uint32_t crc = of.names_crc;
  std::vector<std::byte> piece(static_cast<size_t>(std::min<uint64_t>(of.h.log_bytes, kPieceBytes)));
  uint64_t left = of.h.log_bytes, accesses_left = of.h.access_count, words_left = of.snapshot_words, i = 0;
  size_t carried = 0;
  Result<void> invalid;
  while (left > 0) {
    if (stop && stop()) return make_error(ECANCELED, "%s: reading stopped", of.path.c_str());
    if (carried == piece.size()) piece.resize(piece.size() * 2);  // one record larger than a piece
    const size_t k = static_cast<size_t>(std::min<uint64_t>(left, piece.size() - carried));
    if (!read_exact(f.get(), piece.data() + carried, k))
      return make_error(EIO, "%s: cannot read the log at byte %llu", of.path.c_str(),
                        static_cast<unsigned long long>(of.h.log_bytes - left));
    crc = crc32c_extend(crc, piece.data() + carried, k);
    left -= k;
    const size_t have = carried + k;
    size_t pos = 0;
    while (invalid.ok() && have - pos >= sizeof(TxnRecord)) {
      TxnRecord t;
      std::memcpy(&t, piece.data() + pos, sizeof t);
      if (i == of.h.txn_count) {
        invalid = corrupt(of.path, "the log has more than the header's " + std::to_string(of.h.txn_count) +
                                       " transactions");
        break;
      }
      // The messages are built only for an invalid record.
      if (!txn_valid(of, t, accesses_left)) {
        invalid = check_txn(of, i, t, accesses_left);
        if (invalid.ok()) invalid = corrupt(of.path, "transaction " + std::to_string(i) + " is invalid");
        break;
      }
      if (t.snapshot_words > words_left) {
        invalid = corrupt(of.path, "transaction " + std::to_string(i) + " has a snapshot vector of " +
                                       std::to_string(t.snapshot_words) + " words, past the end of the log (" +
                                       std::to_string(words_left) + " left)");
        break;
      }
      const size_t acc_bytes = size_t{t.access_count} * sizeof(AccessRecord);
      const size_t bytes = sizeof t + acc_bytes + size_t{t.snapshot_words} * 8;
      if (have - pos < bytes) break;
      const uint64_t first = of.h.access_count - accesses_left;
      const uint64_t first_word = of.snapshot_words - words_left;
      txns[i] = t;
      firsts[i] = acc_base + first;
      snap_firsts[i] = snap_base + first_word;
      if (t.snapshot_words != 0)
        std::memcpy(snaps + first_word, piece.data() + pos + sizeof t + acc_bytes, size_t{t.snapshot_words} * 8);
      words_left -= t.snapshot_words;
      AccessRecord* acc = accs + first;
      if (t.access_count != 0) std::memcpy(acc, piece.data() + pos + sizeof t, t.access_count * sizeof(AccessRecord));
      for (uint32_t j = 0; j < t.access_count && invalid.ok(); ++j)
        if (!access_valid(of, acc[j])) {
          invalid = check_access(of, i, t, j, acc[j]);
          if (invalid.ok()) invalid = corrupt(of.path, "transaction " + std::to_string(i) + " has an invalid access");
        }
      accesses_left -= t.access_count;
      pos += bytes;
      ++i;
    }
    if (!invalid.ok()) pos = have;  // only the checksum from here on
    carried = have - pos;
    std::memmove(piece.data(), piece.data() + pos, carried);
  }
  if (crc != of.h.body_crc) {
    char msg[200];
    std::snprintf(msg, sizeof msg,
                  "checksum mismatch in the names or the log (CRC32C %#010x, the header says %#010x): the file is "
                  "corrupt",
                  crc, of.h.body_crc);
    return corrupt(of.path, msg);
  }
  if (!invalid.ok()) return invalid;
  if (carried != 0 || i != of.h.txn_count)
    return corrupt(of.path, "the log holds " + std::to_string(i) + " whole transactions, the header says " +
                                std::to_string(of.h.txn_count));
  if (accesses_left != 0)
    return corrupt(of.path, "the transactions have " + std::to_string(of.h.access_count - accesses_left) +
                                " accesses, the header says " + std::to_string(of.h.access_count));
  if (words_left != 0)
    return corrupt(of.path, "the transactions have " + std::to_string(of.snapshot_words - words_left) +
                                " snapshot words, the log has room for " + std::to_string(of.snapshot_words));
  return {};
}

}  // namespace

Result<std::vector<std::string>> expand_history_paths(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      out.push_back(p);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(p, ec))
      if (e.path().extension() == kFileExtension && e.is_regular_file(ec)) found.push_back(e.path().string());
    if (ec) return make_error(EIO, "%s: %s", p.c_str(), ec.message().c_str());
    if (found.empty()) return make_error(ENOENT, "%s: no %s history file in this directory", p.c_str(), kFileExtension);
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

Result<History> load_history(const std::vector<std::string>& paths, unsigned threads, const StopFn& stop) {
  auto files = expand_history_paths(paths);
  if (!files.ok()) return files.error();
  History h;
  // Headers first: cross-file checks fail fast, and the totals size the
  // arrays once instead of regrowing them per file.
  std::vector<OpenFile> open;
  uint64_t txns = 0, accesses = 0, words = 0;
  for (const std::string& path : *files) {
    auto of = open_file(path);
    if (!of.ok()) return of.error();
    Source src;
    src.path = path;
    src.node = of->h.node;
    src.worker = of->h.worker;
    src.node_workers = of->h.node_workers;
    src.truncated = (of->h.flags & kFileTruncated) != 0;
    src.aborts_recorded = (of->h.flags & kFileAbortsRecorded) != 0;
    src.timestamp_order = (of->h.flags & kFileTimestampOrder) != 0;
    src.snapshot_vectors = (of->h.flags & kFileSnapshotVectors) != 0;
    if (of->h.flags & kFileRealTime)
      src.clock = Clock{of->h.clock_domain, of->h.tsc_hz, of->h.clock_tsc, of->h.clock_unix_ns};
    src.txns = of->h.txn_count;
    src.dropped_txns = of->h.dropped_txns;
    if (auto r = h.add_source(src, of->h.run_id, of->h.cluster_nodes, of->names); !r.ok()) return r.error();
    txns += of->h.txn_count;
    accesses += of->h.access_count;
    words += of->snapshot_words;
    if (txns > History::kMaxTxns || accesses > History::kMaxAccesses)
      return make_error(EFBIG,
                        "%s: the history grows past %llu transactions or %llu accesses, more than the checker handles",
                        path.c_str(), static_cast<unsigned long long>(History::kMaxTxns),
                        static_cast<unsigned long long>(History::kMaxAccesses));
    open.push_back(std::move(*of));
  }
  // Each file into its own range of the arrays, on its own thread; the
  // first error in file order is reported, whatever the threads' order.
  h.append_uninitialized(txns, accesses, words);
  std::vector<uint64_t> txn_base(open.size() + 1, 0), acc_base(open.size() + 1, 0), snap_base(open.size() + 1, 0);
  for (size_t k = 0; k < open.size(); ++k) {
    txn_base[k + 1] = txn_base[k] + open[k].h.txn_count;
    acc_base[k + 1] = acc_base[k] + open[k].h.access_count;
    snap_base[k + 1] = snap_base[k] + open[k].snapshot_words;
  }
  std::vector<Result<void>> results(open.size());
  auto read_all = [&] {
    tbb::parallel_for(tbb::blocked_range<size_t>(0, open.size(), 1), [&](const tbb::blocked_range<size_t>& r) {
      for (size_t k = r.begin(); k < r.end(); ++k) results[k] = read_log(open[k], h, txn_base[k], acc_base[k], snap_base[k], stop);
    });
  };
  if (threads == 0) {
    read_all();
  } else {
    tbb::task_arena arena(static_cast<int>(threads));
    arena.execute(read_all);
  }
  for (Result<void>& r : results)
    if (!r.ok()) return r.error();
  return h;
}

}  // namespace rdtx::history
