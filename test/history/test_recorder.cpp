// Recorder (bounded, allocation-free hot path, truncation), the file format
// round trip, and the reader's handling of corrupt and mismatched files.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "history/checker.hpp"
#include "history/checksum.hpp"
#include "history/reader.hpp"
#include "history/recorder.hpp"
#include "temp_dir.hpp"

// Counts heap allocations, to show the recording hot path makes none. Not
// inlined: GCC would otherwise pair a `new` it sees with the free() below
// and warn about a mismatch that is not one.
namespace {
std::atomic<uint64_t> g_allocations{0};
}
[[gnu::noinline]] void* operator new(size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}
[[gnu::noinline]] void* operator new(size_t n) {
  if (void* p = operator new(n, std::nothrow)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace rdtx::history::test {
namespace {

NameTables names() { return {{"checking", "savings"}, {"WriteCheck", "Amalgamate"}, {"conflict", "user"}}; }

RecorderOptions options(uint16_t node = 0, uint16_t worker = 0, size_t capacity = 1 << 20) {
  RecorderOptions o;
  o.run_id = 42;
  o.node = node;
  o.worker = worker;
  o.cluster_nodes = 2;
  o.node_workers = 2;
  o.capacity_bytes = capacity;
  o.record_aborted = true;
  o.names = names();
  return o;
}

Recorder make(const RecorderOptions& o) {
  auto r = Recorder::create(o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
  return std::move(*r);
}

// A serial little history on one worker: attempt i increments one of five
// checking keys of the worker's own (read-modify-write over the previous
// writer) and reads a shared savings key; every fourth one aborts.
void record_some(Recorder& rec, uint32_t n) {
  const RecorderOptions& o = rec.options();
  TxnTrace t(8);
  std::vector<Version> cur(5);
  for (uint32_t i = 0; i < n; ++i) {
    const TxnId id = make_txn_id(o.node, o.worker, i % 3, 1 + i);
    t.begin(id, static_cast<uint16_t>(i % 2), 10 + i, 1000 + i);
    const uint64_t k = i % 5, own_key = (o.node * 16 + o.worker) * 5 + k;
    t.read(1, k, kInitialVersion);
    if (i % 4 == 3) {
      t.write(0, own_key, cur[k]);
      rec.abort(t, 1);
      continue;
    }
    t.read_modify_write(0, own_key, cur[k], cur[k]);
    cur[k] = {id, 0};
    rec.commit(t, 10 + i);
  }
}

TEST(Recorder, RecordsCommitsAndAbortsOnlyWhenAsked) {
  RecorderOptions o = options();
  o.record_aborted = false;
  Recorder rec = make(o);
  TxnTrace t(4);
  t.begin(make_txn_id(0, 0, 1, 1), 1, 5);
  t.read(0, 7, kInitialVersion);
  t.read_modify_write(1, 7, kInitialVersion, kInitialVersion);
  rec.commit(t, 6);
  t.begin(make_txn_id(0, 0, 1, 2), 0);
  t.write(0, 8, kInitialVersion);
  rec.abort(t, 0);
  EXPECT_EQ(rec.txn_count(), 1u);
  EXPECT_EQ(rec.access_count(), 2u);
  EXPECT_EQ(rec.bytes_used(), sizeof(TxnRecord) + 2 * sizeof(AccessRecord));

  History h;
  ASSERT_TRUE(rec.append_to(h).ok());
  ASSERT_EQ(h.size(), 1u);
  const TxnRecord& r = h.txn(0);
  EXPECT_EQ(r.id, make_txn_id(0, 0, 1, 1));
  EXPECT_TRUE(r.committed());
  EXPECT_EQ(r.type, 1);
  EXPECT_EQ(r.start_ts, 5u);
  EXPECT_EQ(r.commit_ts, 6u);
  EXPECT_NE(r.commit_tsc, 0u);
  ASSERT_EQ(h.accesses(0).size(), 2u);
  EXPECT_EQ(h.accesses(0)[1].op, static_cast<uint8_t>(Op::kWrite));
  EXPECT_TRUE(h.accesses(0)[1].reads());
  EXPECT_EQ(h.accesses(0)[1].table, 1u);
  EXPECT_EQ(h.sources.size(), 1u);
  EXPECT_FALSE(h.sources[0].aborts_recorded);
}

TEST(Recorder, RecordingAllocatesNothing) {
  Recorder rec = make(options(0, 0, 64 << 20));
  TxnTrace t(16);
  const uint64_t before = g_allocations.load();
  for (uint32_t i = 1; i <= 100'000; ++i) {
    t.begin(make_txn_id(0, 0, 0, i), 0, i);
    for (uint64_t k = 0; k < 4; ++k) t.read_modify_write(0, k, kInitialVersion, kInitialVersion);
    if (i % 10 == 0)
      rec.abort(t, 0);
    else
      rec.commit(t, i);
  }
  EXPECT_EQ(g_allocations.load(), before);
  EXPECT_EQ(rec.txn_count(), 100'000u);
  EXPECT_FALSE(rec.truncated());
}

TEST(Recorder, StreamsAHistoryLargerThanItsBuffer) {
  // A 4 KiB buffer (two 2 KiB halves) and about 1 MiB of history: it all
  // streams to the file, half a buffer at a time, and certifies: written
  // by the recording thread (polled or not), or by the background writer
  // (polled every other transaction, so that both halves often fill while
  // the writer still writes one).
  enum Mode { kInline, kPolled, kBackground };
  for (Mode mode : {kInline, kPolled, kBackground}) {
    SCOPED_TRACE(mode);
    const bool poll = mode == kPolled;
    Recorder rec = make(options(0, 0, 4096));
    if (mode == kBackground) {
      ASSERT_TRUE(rec.stream_in_background().ok());
    }
    const RecorderOptions& o = rec.options();
    TxnTrace t(8);
    std::vector<Version> cur(5);
    for (uint32_t i = 0; i < 10'000; ++i) {
      const TxnId id = make_txn_id(o.node, o.worker, i % 3, 1 + i);
      t.begin(id, 0);
      t.read(1, i % 7, kInitialVersion);
      t.read_modify_write(0, i % 5, cur[i % 5], cur[i % 5]);
      cur[i % 5] = {id, 0};
      rec.commit(t);
      if (poll) rec.flush_pending();  // as the engine's poller does, between transactions
      if (poll) {
        EXPECT_FALSE(rec.write_pending());
      }
      if (mode == kBackground && i % 2 == 0) rec.flush_pending();
    }
    if (mode == kBackground) {
      TempDir early;
      auto busy = rec.write_file(early.path() + "/h");
      ASSERT_FALSE(busy.ok()) << "a file written while the writer may still write";
      EXPECT_NE(busy.error().message.find("end_streaming"), std::string::npos) << busy.error().message;
      rec.end_streaming();
      EXPECT_FALSE(rec.write_pending());
    }
    EXPECT_FALSE(rec.truncated()) << rec.stream_error();
    EXPECT_EQ(rec.txn_count(), 10'000u);
    EXPECT_EQ(rec.dropped_txns(), 0u);
    EXPECT_EQ(rec.bytes_used(), 10'000 * (sizeof(TxnRecord) + 2 * sizeof(AccessRecord)));
    EXPECT_GE(rec.bytes_streamed(), rec.bytes_used() - 4096) << "all but the buffer is in the file";

    TempDir dir;
    const std::string path = dir.path() + "/" + Recorder::file_name(0, 0);
    ASSERT_TRUE(rec.write_file(path).ok());
    auto loaded = load_history({path});
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    History mem;
    ASSERT_TRUE(rec.append_to(mem).ok());
    ASSERT_EQ(loaded->size(), 10'000u);
    ASSERT_EQ(mem.size(), 10'000u);
    for (size_t i = 0; i < mem.size(); ++i) {
      ASSERT_EQ(loaded->txn(i).id, make_txn_id(0, 0, static_cast<uint32_t>(i % 3), static_cast<uint32_t>(1 + i)));
      ASSERT_EQ(mem.txn(i).id, loaded->txn(i).id);
      ASSERT_EQ(mem.accesses(i)[1].replaced_txn, loaded->accesses(i)[1].replaced_txn);
    }
    for (const History* h : {&*loaded, &mem}) {
      auto r = check(*h);
      ASSERT_TRUE(r.ok());
      EXPECT_TRUE(r->certified) << format_report(*r, 3);
      EXPECT_EQ(r->stats.committed, 10'000u);
    }
  }
}

// A stop request (rdtx-bench's SIGINT or SIGTERM, issue 46) ends writing
// the file (none is left, not even the .tmp), reading the stream back and
// loading files, with ECANCELED; without one all three work.
TEST(Recorder, AStopRequestEndsWritingAndReading) {
  Recorder rec = make(options(0, 0, 4096));
  record_some(rec, 5'000);  // streamed, a half buffer at a time
  ASSERT_GT(rec.bytes_streamed(), 0u);
  const StopFn stop = [] { return true; };
  TempDir dir;
  const std::string path = dir.path() + "/" + Recorder::file_name(0, 0);
  auto w = rec.write_file(path, stop);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, ECANCELED) << w.error().message;
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  History mem;
  auto a = rec.append_to(mem, stop);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, ECANCELED) << a.error().message;

  ASSERT_TRUE(rec.write_file(path).ok());
  auto stopped = load_history({path}, 0, stop);
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.error().code, ECANCELED) << stopped.error().message;
  const StopFn never = [] { return false; };
  auto loaded = load_history({path}, 0, never);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->size(), 5'000u);
  History again;
  ASSERT_TRUE(rec.append_to(again, never).ok());
  EXPECT_EQ(again.size(), 5'000u);
}

TEST(Recorder, AnAttemptLargerThanHalfTheBufferTruncates) {
  // Halves of three 2-access attempts and a bit: a 20-access attempt does
  // not fit in one, and neither is a small one after it recorded.
  const size_t one = sizeof(TxnRecord) + 2 * sizeof(AccessRecord);
  Recorder rec = make(options(0, 0, 2 * (3 * one + sizeof(TxnRecord))));
  TxnTrace t(32);
  for (uint32_t i = 1; i <= 4; ++i) {
    t.begin(make_txn_id(0, 0, 0, i), 0);
    t.read(0, i, kInitialVersion);
    t.write(1, i, kInitialVersion);
    rec.commit(t);
  }
  t.begin(make_txn_id(0, 0, 0, 5), 0);
  for (uint64_t k = 0; k < 20; ++k) t.read(0, 100 + k, kInitialVersion);
  rec.commit(t);
  t.begin(make_txn_id(0, 0, 0, 6), 0);
  rec.commit(t);
  EXPECT_TRUE(rec.truncated());
  EXPECT_EQ(rec.txn_count(), 4u);
  EXPECT_EQ(rec.dropped_txns(), 2u);
  EXPECT_EQ(rec.bytes_used(), 4 * one);

  History h;
  ASSERT_TRUE(rec.append_to(h).ok());
  EXPECT_TRUE(h.truncated());
  EXPECT_EQ(h.size(), 4u);
  auto r = check(h);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->certified);
  EXPECT_EQ(r->verdict(), "NOT CERTIFIED serializable: history truncated: cannot certify");
  CheckOptions prefix;
  prefix.allow_truncated = true;
  EXPECT_TRUE(check(h, prefix)->certified);
}

TEST(Recorder, RefusesAnOverLargeCapacityBeforeAllocating) {
  // history.capacity_mb = 30000 used to throw std::bad_alloc out of the
  // engine; SIZE_MAX / 4 would throw (or be killed) wherever it is tried.
  for (size_t capacity : {size_t{30000} << 20, SIZE_MAX / 4}) {
    RecorderOptions o = options(0, 0, capacity);
    Result<Recorder> r = Recorder::create(o);  // must not throw
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code, EINVAL);
    EXPECT_NE(r.error().message.find("history.capacity_mb"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("over the limit"), std::string::npos) << r.error().message;
  }
  EXPECT_TRUE(Recorder::create(options(0, 0, Recorder::kMaxCapacityBytes / 64)).ok());
}

TEST(Recorder, AStreamFileThatCannotBeCreatedIsAClearError) {
  RecorderOptions o = options();
  o.spill_dir = "/nonexistent-rdtx-dir";
  Result<Recorder> r = Recorder::create(o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("cannot create a stream file in /nonexistent-rdtx-dir"), std::string::npos)
      << r.error().message;
}

TEST(Recorder, AnAttemptLargerThanItsTraceTruncates) {
  Recorder rec = make(options());
  TxnTrace t(2);
  t.begin(make_txn_id(0, 0, 0, 1), 0);
  for (uint64_t k = 0; k < 3; ++k) t.read(0, k, kInitialVersion);
  EXPECT_TRUE(t.overflowed());
  EXPECT_EQ(t.size(), 2u);
  rec.commit(t);
  EXPECT_TRUE(rec.truncated());
  EXPECT_EQ(rec.txn_count(), 0u);
  t.begin(make_txn_id(0, 0, 0, 2), 0);
  EXPECT_FALSE(t.overflowed()) << "begin() starts afresh";
}

TEST(Recorder, CreateRejectsBadOptions) {
  RecorderOptions o = options();
  o.worker = 1024;
  o.node_workers = 0;
  EXPECT_FALSE(Recorder::create(o).ok());
  o = options();
  o.worker = 2;  // of 2
  EXPECT_NE(Recorder::create(o).error().message.find("worker 2, but the node has 2 workers"), std::string::npos);
  o = options();
  o.capacity_bytes = 90;  // two halves of 45 bytes
  EXPECT_NE(Recorder::create(o).error().message.find("holds no transaction"), std::string::npos);
  o = options();
  o.names.types.push_back(std::string(300, 'x'));
  EXPECT_NE(Recorder::create(o).error().message.find("type name 2 is 300 bytes"), std::string::npos);
}

// --- files --------------------------------------------------------------------

TEST(HistoryFile, RoundTripGivesTheSameHistory) {
  TempDir dir;
  History expected;
  const Clock clock{7, 2'000'000'000, 123, 456};  // real time recorded: begins kept, clock in the header
  for (uint16_t n = 0; n < 2; ++n)
    for (uint16_t w = 0; w < 2; ++w) {
      RecorderOptions o = options(n, w);
      o.clock = clock;
      Recorder rec = make(o);
      record_some(rec, 50 + n * 10 + w);
      ASSERT_TRUE(rec.write_file(dir.path() + "/" + Recorder::file_name(n, w)).ok());
      ASSERT_TRUE(rec.append_to(expected).ok());
    }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/history-n0-w0.rdtxh.tmp"));

  auto loaded = load_history({dir.path()});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const History& h = *loaded;
  EXPECT_TRUE(h.check_complete().ok());
  EXPECT_EQ(h.run_id, 42u);
  EXPECT_EQ(h.cluster_nodes, 2);
  EXPECT_EQ(h.names, names());
  ASSERT_EQ(h.sources.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(h.sources[i].path, dir.path() + "/" + Recorder::file_name(i / 2, i % 2));
    EXPECT_EQ(h.sources[i].node, expected.sources[i].node);
    EXPECT_EQ(h.sources[i].worker, expected.sources[i].worker);
    EXPECT_EQ(h.sources[i].txns, expected.sources[i].txns);
    EXPECT_TRUE(h.sources[i].aborts_recorded);
    EXPECT_EQ(h.sources[i].clock, clock);
  }
  EXPECT_EQ(h.txn(1).begin_tsc, 1001u);
  ASSERT_EQ(h.size(), expected.size());
  ASSERT_EQ(h.access_count(), expected.access_count());
  for (size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(std::memcmp(&h.txn(i), &expected.txn(i), sizeof(TxnRecord)), 0) << "transaction " << i;
  EXPECT_EQ(
      std::memcmp(h.all_accesses().data(), expected.all_accesses().data(), h.access_count() * sizeof(AccessRecord)), 0);
  auto r = check(h);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->certified) << format_report(*r, 3);
  EXPECT_GT(r->stats.aborted, 0u);
  CheckOptions strict;
  strict.isolation = Isolation::kStrictSerializable;
  r = check(h, strict);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->certified) << format_report(*r, 3);
  EXPECT_TRUE(r->stats.real_time);
}

// Vector snapshots (kFileSnapshotVectors): every committed attempt's
// vector and commit slot go through the file and the recorder's own
// append_to unchanged, and the history is checked on them.
TEST(HistoryFile, SnapshotVectorsRoundTrip) {
  TempDir dir;
  RecorderOptions o = options(0, 0);
  o.cluster_nodes = 1;
  o.node_workers = 1;
  o.snapshot_vectors = true;
  Recorder rec = make(o);
  // Slot 0 is this coroutine's: attempt i commits at ts i + 1 with every
  // earlier commit in its snapshot; slot 1 shows i * 3, a writer the
  // history does not hold. Every fourth attempt aborts (no vector).
  TxnTrace t(8);
  std::vector<Version> cur(5);
  std::vector<std::vector<uint64_t>> vectors;
  uint64_t ts = 0;
  for (uint32_t i = 0; i < 40; ++i) {
    const TxnId id = make_txn_id(0, 0, 0, 1 + i);
    t.begin(id, 0);
    std::vector<uint64_t> v = {ts, uint64_t{i} * 3};
    t.set_snapshot(v, 0);
    const uint64_t k = i % 5;
    t.read_modify_write(0, k, cur[k], cur[k]);
    if (i % 4 == 3) {
      rec.abort(t, 1);
      continue;
    }
    cur[k] = {id, 0};
    rec.commit(t, ++ts);
    vectors.push_back(v);
  }
  ASSERT_TRUE(rec.write_file(dir.path() + "/" + Recorder::file_name(0, 0)).ok());
  History appended;
  ASSERT_TRUE(rec.append_to(appended).ok());
  auto loaded = load_history({dir.path()});
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  for (const History* h : {&*loaded, &appended}) {
    ASSERT_TRUE(h->sources[0].snapshot_vectors);
    size_t c = 0;
    for (size_t i = 0; i < h->size(); ++i) {
      const std::span<const uint64_t> v = h->snapshot(i);
      if (!h->txn(i).committed()) {
        EXPECT_TRUE(v.empty()) << "an abort carries no vector";
        continue;
      }
      ASSERT_LT(c, vectors.size());
      EXPECT_EQ(std::vector<uint64_t>(v.begin(), v.end()), vectors[c]) << "attempt " << i;
      EXPECT_EQ(h->txn(i).commit_slot, 0u);
      EXPECT_EQ(h->txn(i).commit_ts, c + 1);
      ++c;
    }
    EXPECT_EQ(c, vectors.size());
    CheckOptions si;
    si.isolation = Isolation::kSnapshot;
    auto r = check(*h, si);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->certified) << format_report(*r, 3);
    EXPECT_EQ(r->stats.snapshot_slots, 2u);
  }
}

TEST(HistoryFile, FilesThatDoNotBelongTogether) {
  TempDir dir;
  auto write = [&](RecorderOptions o, const std::string& name) {
    Recorder rec = make(o);
    record_some(rec, 5);
    std::string p = dir.path() + "/" + name;
    EXPECT_TRUE(rec.write_file(p).ok());
    return p;
  };
  std::string a = write(options(0, 0), "a.rdtxh");
  RecorderOptions other_run = options(0, 1);
  other_run.run_id = 43;
  std::string b = write(other_run, "b.rdtxh");
  RecorderOptions other_names = options(0, 1);
  other_names.names.tables.push_back("extra");
  std::string c = write(other_names, "c.rdtxh");
  std::string d = write(options(0, 1), "d.rdtxh");
  RecorderOptions timed = options(0, 1);
  timed.clock = Clock{7, 1'000'000'000, 1, 1};
  std::string e = write(timed, "e.rdtxh");

  auto err = [](const std::vector<std::string>& paths) {
    auto r = load_history(paths);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.error().message;
  };
  EXPECT_EQ(err({a, b}), b + ": run id 0x2b differs from " + a + " (0x2a): files of different runs");
  EXPECT_EQ(err({a, c}), c + ": table, type or abort reason names differ from " + a);
  EXPECT_EQ(err({a, a}), a + ": a second history of n0.w0 (the first is " + a + ")");
  EXPECT_EQ(err({a, e}), e + ": records real time, but " + a + " does not");
  EXPECT_EQ(err({dir.path() + "/none.rdtxh"}).rfind(dir.path() + "/none.rdtxh: ", 0), 0u);
  TempDir empty;
  EXPECT_EQ(err({empty.path()}), empty.path() + ": no .rdtxh history file in this directory");

  auto partial = load_history({a, d});
  ASSERT_TRUE(partial.ok());
  auto complete = partial->check_complete();
  ASSERT_FALSE(complete.ok());
  EXPECT_EQ(complete.error().message, "incomplete history: no file of node 1 (the run has 2 nodes)");
}

// A valid file to corrupt: two attempts of n0.w0, the second aborted.
class CorruptFile : public ::testing::Test {
 protected:
  void SetUp() override {
    Recorder rec = make(options());
    TxnTrace t(4);
    t.begin(make_txn_id(0, 0, 0, 1), 1);
    t.read(0, 1, kInitialVersion);
    t.read_modify_write(1, 1, kInitialVersion, kInitialVersion);
    rec.commit(t);
    t.begin(make_txn_id(0, 0, 0, 2), 0);
    t.write(0, 1, kInitialVersion);
    rec.abort(t, 1);
    const std::string path = dir_.path() + "/recorded.rdtxh";
    ASSERT_TRUE(rec.write_file(path).ok());
    std::ifstream in(path, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
    std::memcpy(&header_, bytes_.data(), sizeof header_);
    log_ = sizeof(FileHeader) + header_.names_bytes;
    ASSERT_EQ(bytes_.size(), log_ + 2 * sizeof(TxnRecord) + 3 * sizeof(AccessRecord));
  }

  template <typename V>
  void put(size_t offset, V v) {
    std::memcpy(bytes_.data() + offset, &v, sizeof v);
  }
  size_t txn(int i) const { return log_ + (i == 0 ? 0 : sizeof(TxnRecord) + 2 * sizeof(AccessRecord)); }
  size_t access(int i) const { return log_ + sizeof(TxnRecord) + i * sizeof(AccessRecord); }

  // Writes the bytes to a new file (truncating one in place makes ext4
  // flush it to disk, slowly) and returns its path.
  std::string write_bytes() {
    const std::string p = dir_.path() + "/h" + std::to_string(files_++) + ".rdtxh";
    std::ofstream(p, std::ios::binary).write(bytes_.data(), static_cast<std::streamsize>(bytes_.size()));
    return p;
  }

  // Recomputes both checksums over the (changed) bytes, so that what is
  // tested is the validation behind them.
  void seal() {
    if (bytes_.size() < sizeof(FileHeader)) return;
    FileHeader h;
    std::memcpy(&h, bytes_.data(), sizeof h);
    h.body_crc = crc32c_extend(0, bytes_.data() + sizeof h, bytes_.size() - sizeof h);
    h.header_crc = header_checksum(h);
    std::memcpy(bytes_.data(), &h, sizeof h);
  }

  // Writes the (corrupted) bytes, with their checksums made to match
  // unless `sealed` is false, and returns the reader's error.
  std::string load_error(bool sealed = true) {
    if (sealed) seal();
    const std::string p = write_bytes();
    auto r = load_history({p});
    EXPECT_FALSE(r.ok()) << "a corrupt file loaded";
    if (r.ok()) return "";
    EXPECT_EQ(r.error().message.rfind(p + ": ", 0), 0u) << "the message names the file: " << r.error().message;
    return r.error().message.substr(p.size() + 2);
  }

  TempDir dir_;
  std::vector<char> bytes_;
  FileHeader header_;
  size_t log_ = 0;
  int files_ = 0;
};

TEST_F(CorruptFile, Unchanged) { EXPECT_TRUE(load_history({write_bytes()}).ok()); }

TEST_F(CorruptFile, Header) {
  std::vector<char> good = bytes_;
  bytes_[0] = 'X';
  EXPECT_EQ(load_error(), "bad magic: not an rdtx history file");
  bytes_ = good;
  put<uint32_t>(offsetof(FileHeader, format_version), 1);
  EXPECT_EQ(load_error(), "format version 1, this reader knows version " + std::to_string(kFormatVersion));
  bytes_ = good;
  put<uint32_t>(offsetof(FileHeader, flags), 0x80);
  EXPECT_EQ(load_error(), "unknown flags 128 in the header");
  bytes_ = good;
  put<uint64_t>(offsetof(FileHeader, txn_count), 3);
  EXPECT_EQ(load_error(), "the header's counts (3 transactions, 3 accesses) do not match its log size of " +
                              std::to_string(2 * sizeof(TxnRecord) + 3 * sizeof(AccessRecord)) + " bytes");
  bytes_ = good;
  put<uint64_t>(offsetof(FileHeader, tsc_hz), 1000);
  EXPECT_EQ(load_error(), "the header has a clock, but does not say real time is recorded");
  bytes_ = good;
  put<uint32_t>(offsetof(FileHeader, flags), header_.flags | kFileRealTime);
  EXPECT_EQ(load_error(), "the header says real time is recorded, but its clock rate is 0");
  bytes_ = good;
  put<uint64_t>(offsetof(FileHeader, access_count), uint64_t{1} << 62);
  EXPECT_NE(load_error().find("do not match its log size"), std::string::npos) << "overflowing counts";
  bytes_ = good;
  put<uint64_t>(offsetof(FileHeader, names_bytes), header_.names_bytes + 8);
  EXPECT_EQ(load_error(), "truncated file: the header announces " + std::to_string(bytes_.size() + 8) +
                              " bytes, the file has " + std::to_string(bytes_.size()));
}

TEST_F(CorruptFile, AFlippedByteFailsTheChecksum) {
  // A key byte: no field check can tell (the sealed copy loads), only the
  // checksum.
  std::vector<char> good = bytes_;
  bytes_[access(1) + offsetof(AccessRecord, key)] ^= 0x10;
  EXPECT_EQ(load_error(false).rfind("checksum mismatch in the names or the log (CRC32C ", 0), 0u);
  seal();
  EXPECT_TRUE(load_history({write_bytes()}).ok()) << "a plausible key: only the checksum catches it";
  // A name byte.
  bytes_ = good;
  bytes_[sizeof(FileHeader) + 8] ^= 1;
  EXPECT_EQ(load_error(false).rfind("checksum mismatch in the names or the log", 0), 0u);
  // The run id in the header.
  bytes_ = good;
  bytes_[offsetof(FileHeader, run_id)] ^= 1;
  const std::string e = load_error(false);
  EXPECT_EQ(e.rfind("header checksum mismatch (CRC32C ", 0), 0u) << e;
  EXPECT_NE(e.find("the file is corrupt"), std::string::npos) << e;
  // A damaged record that also fails validation is reported as damage.
  bytes_ = good;
  put<uint8_t>(access(0) + offsetof(AccessRecord, op), 9);
  EXPECT_EQ(load_error(false).rfind("checksum mismatch in the names or the log", 0), 0u);
}

TEST_F(CorruptFile, DroppedWithoutTruncatedIsRejected) {
  put<uint64_t>(offsetof(FileHeader, dropped_txns), 5);
  EXPECT_EQ(load_error(),
            "the header says 5 transactions were not recorded, but the history is not marked truncated");
  put<uint32_t>(offsetof(FileHeader, flags), header_.flags | kFileTruncated);
  seal();
  EXPECT_TRUE(load_history({write_bytes()}).ok()) << "with the truncated flag, dropped attempts are fine";
}

TEST_F(CorruptFile, TruncatedOrExtended) {
  std::vector<char> good = bytes_;
  bytes_.resize(100);
  EXPECT_EQ(load_error(), "truncated file: 100 bytes, shorter than the 128-byte header");
  bytes_ = good;
  bytes_.resize(good.size() - 10);
  EXPECT_EQ(load_error(), "truncated file: the header announces " + std::to_string(good.size()) +
                              " bytes, the file has " + std::to_string(good.size() - 10));
  bytes_ = good;
  bytes_.resize(good.size() + 8, 0);
  EXPECT_EQ(load_error(), "8 unexpected bytes after the log");
}

TEST_F(CorruptFile, Names) {
  put<uint32_t>(sizeof(FileHeader), 1000);  // 1000 table names
  EXPECT_NE(load_error().find("runs past the end of the names section"), std::string::npos);
}

TEST_F(CorruptFile, Transactions) {
  std::vector<char> good = bytes_;
  put<uint32_t>(txn(0) + offsetof(TxnRecord, access_count), 7);
  EXPECT_EQ(load_error(), "transaction 0 (n0.w0.c0#1) has 7 accesses, past the end of the log (3 left)");
  bytes_ = good;
  put<uint32_t>(txn(0) + offsetof(TxnRecord, access_count), 1);
  EXPECT_NE(load_error(), "") << "records read out of step are caught too";
  bytes_ = good;
  put<uint16_t>(txn(0) + offsetof(TxnRecord, type), 2);
  EXPECT_EQ(load_error(), "transaction 0 (n0.w0.c0#1): type 2 is out of range (2 type names)");
  bytes_ = good;
  put<uint16_t>(txn(1) + offsetof(TxnRecord, abort_reason), 2);
  EXPECT_EQ(load_error(), "transaction 1 (n0.w0.c0#2): abort reason 2 is out of range (2 reason names)");
  bytes_ = good;
  put<uint8_t>(txn(1) + offsetof(TxnRecord, outcome), 3);
  EXPECT_EQ(load_error(), "transaction 1 (n0.w0.c0#2): outcome 3 is neither committed (1) nor aborted (2)");
  bytes_ = good;
  put<uint64_t>(txn(1) + offsetof(TxnRecord, id), make_txn_id(1, 0, 0, 2));
  EXPECT_EQ(load_error(), "transaction 1 (n1.w0.c0#2) belongs to another worker than the file's n0.w0");
  bytes_ = good;
  put<uint64_t>(txn(0) + offsetof(TxnRecord, id), 0);
  EXPECT_EQ(load_error(), "transaction 0 has id 0, the initial data's");
  bytes_ = good;
  put<uint32_t>(offsetof(FileHeader, flags), 0);
  EXPECT_EQ(load_error(), "transaction 1 (n0.w0.c0#2) is aborted, but the header says aborts are not recorded");
}

TEST_F(CorruptFile, SnapshotVectors) {
  std::vector<char> good = bytes_;
  put<uint32_t>(offsetof(FileHeader, flags), header_.flags | kFileSnapshotVectors);
  EXPECT_EQ(load_error(),
            "transaction 0 (n0.w0.c0#1) committed without its snapshot vector, which the header says is recorded");
  bytes_ = good;
  put<uint16_t>(txn(0) + offsetof(TxnRecord, snapshot_words), 2);
  EXPECT_EQ(load_error(),
            "transaction 0 (n0.w0.c0#1) has a snapshot vector (2 words, slot 0), but the header says snapshot vectors "
            "are not recorded");
  bytes_ = good;
  put<uint8_t>(txn(0) + offsetof(TxnRecord, reserved), 1);
  EXPECT_EQ(load_error(), "transaction 0 (n0.w0.c0#1): reserved bytes are not zero");
}

TEST_F(CorruptFile, Accesses) {
  std::vector<char> good = bytes_;
  put<uint32_t>(access(1) + offsetof(AccessRecord, table), 2);
  EXPECT_EQ(load_error(), "transaction 0 (n0.w0.c0#1), access 1: table 2 is out of range (2 table names)");
  bytes_ = good;
  put<uint8_t>(access(0) + offsetof(AccessRecord, op), 9);
  EXPECT_EQ(load_error(),
            "transaction 0 (n0.w0.c0#1), access 0: op 9 is not read (1), write (2), insert (3) or delete (4)");
  bytes_ = good;
  put<uint8_t>(access(0) + offsetof(AccessRecord, flags), 0);
  EXPECT_EQ(load_error(), "transaction 0 (n0.w0.c0#1), access 0: a read without the version it read");
  bytes_ = good;
  put<uint8_t>(access(0) + offsetof(AccessRecord, flags), 0x41);
  EXPECT_EQ(load_error(), "transaction 0 (n0.w0.c0#1), access 0: unknown flags 65");
}

TEST_F(CorruptFile, RandomDamageNeverCrashes) {
  // Random byte changes and cuts: the reader accepts or names a problem, and
  // the checker copes with whatever loads (ASan watches for the rest).
  std::mt19937_64 rng(7);
  const std::vector<char> good = bytes_;
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    bytes_ = good;
    if (i % 10 == 0) {
      bytes_.resize(rng() % good.size());
    } else {
      for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n)
        bytes_[rng() % bytes_.size()] = static_cast<char>(rng());
    }
    if (i % 2 == 0) seal();  // half of them past the checksums, into the validation
    const std::string p = write_bytes();
    auto h = load_history({p});
    std::filesystem::remove(p);
    if (!h.ok()) {
      ++rejected;
      EXPECT_EQ(h.error().message.rfind(p + ": ", 0), 0u) << h.error().message;
      continue;
    }
    EXPECT_TRUE(check(*h).ok());
  }
  EXPECT_GT(rejected, 500) << "the damage must mostly hit validated fields";
}

}  // namespace
}  // namespace rdtx::history::test
