// CALVIN's input log (calvin.cpp describes the protocol; inputs.hpp the
// file format): a coordinator's input batches recorded to a file
// (calvin.inputs: record_batch(), write_recording()), and read back,
// checked, for a replay (calvin.replay: read_inputs(), load_replay(), and
// preflight_of() before anything is loaded).
#include "cc/calvin/inputs.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cc/calvin/calvin_impl.hpp"
#include "runtime/shutdown.hpp"

namespace rdtx::cc::calvin::detail {

namespace {

std::string inputs_file(const std::string& base, uint32_t node, uint32_t worker, uint32_t co) {
  return base + ".n" + std::to_string(node) + "w" + std::to_string(worker) + "c" + std::to_string(co);
}

uint64_t fnv1a(const std::byte* p, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ull;
  return h;
}

}  // namespace

// What the recorded inputs depend on: the workload and its keys, the
// cluster's shape and coroutines (Options::input_fingerprint), the epoch
// size and the CR's layout.
uint64_t recording_fingerprint(const Options& o, uint32_t epoch_size) {
  const uint64_t own[] = {o.input_fingerprint, epoch_size, sizeof(Cr)};
  return fnv1a(reinterpret_cast<const std::byte*>(own), sizeof own);
}

// A recording of at most `record_epochs` epochs: its largest file.
uint64_t max_inputs_bytes(uint64_t record_epochs, uint32_t epoch_size) {
  return kInputsHeader + record_epochs * (8 + uint64_t{epoch_size} * sizeof(Cr)) + 8;
}

namespace {

// Reads and proves one recording: a regular file (a device would never end
// the read), at most `max_bytes` long (read in bounded steps, and stopped
// by SIGINT/SIGTERM), its checksum and fingerprint right. Returns its bytes
// without the checksum. Errors name the file and what was wrong.
Result<std::vector<std::byte>> read_inputs(const std::string& path, uint64_t fingerprint, uint64_t max_bytes,
                                           uint64_t record_epochs) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return make_error(ENOENT, "calvin.replay: cannot open %s: %s", path.c_str(), std::strerror(errno));
  struct stat st;
  if (::fstat(::fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    return make_error(EINVAL, "calvin.replay: %s is not a regular file", path.c_str());
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    std::fclose(f);
    return make_error(EFBIG,
                      "calvin.replay: %s has %llu bytes, more than a recording of calvin.record_epochs = %llu epochs "
                      "(%llu bytes): not a recording of this configuration, or raise calvin.record_epochs",
                      path.c_str(), static_cast<unsigned long long>(size),
                      static_cast<unsigned long long>(record_epochs), static_cast<unsigned long long>(max_bytes));
  }
  std::vector<std::byte> v(size);
  size_t got = 0;
  while (got < size) {
    if (runtime::shutdown_requested()) {
      std::fclose(f);
      return make_error(ECANCELED, "calvin.replay: reading %s interrupted", path.c_str());
    }
    const size_t n = std::fread(v.data() + got, 1, std::min<size_t>(size - got, 1 << 20), f);
    if (n == 0) break;
    got += n;
  }
  std::fclose(f);
  if (got != size) return make_error(EIO, "calvin.replay: cannot read %s", path.c_str());
  uint64_t magic = 0, fp = 0, sum = 0;
  if (size >= kInputsHeader + 8) {
    std::memcpy(&magic, v.data(), 8);
    std::memcpy(&fp, v.data() + 8, 8);
    std::memcpy(&sum, v.data() + size - 8, 8);
  }
  if (magic != kInputsMagic)
    return make_error(EINVAL, "calvin.replay: %s is not a CALVIN inputs file (of this version)", path.c_str());
  if (sum != fnv1a(v.data(), size - 8))
    return make_error(EINVAL, "calvin.replay: %s is damaged (its checksum does not match its contents)", path.c_str());
  if (fp != fingerprint)
    return make_error(EINVAL,
                      "calvin.replay: %s was recorded under another configuration (the workload or its keys, "
                      "cluster.nodes, cluster.workers_per_node, txn.coroutines or calvin.epoch_size differ): "
                      "replay it with the recording's",
                      path.c_str());
  v.resize(size - 8);
  return v;
}

// The nodes of this process: q.self, or every node.
template <typename F>
Result<void> for_each_file(const RegionQuery& q, const std::string& base, F&& f) {
  for (uint32_t n = 0; n < q.nodes; ++n) {
    if (q.self >= 0 && n != static_cast<uint32_t>(q.self)) continue;
    for (uint32_t w = 0; w < q.workers_per_node; ++w)
      for (uint32_t co = 0; co < q.coroutines; ++co) RDTX_TRY(f(inputs_file(base, n, w, co)));
  }
  return {};
}

}  // namespace

// calvin.inputs: its directory exists and takes files; calvin.replay:
// every recording of this process's coordinators is there, whole, and of
// this configuration (read_inputs).
Result<void> preflight_of(const RegionQuery& q) {
  const Settings s = settings_of(*q.options);
  if (!s.inputs.empty()) {
    const size_t slash = s.inputs.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : s.inputs.substr(0, slash);
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return make_error(EINVAL, "calvin.inputs = '%s': no directory %s for its files", s.inputs.c_str(), dir.c_str());
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      return make_error(EINVAL, "calvin.inputs = '%s': cannot create files in %s: %s", s.inputs.c_str(), dir.c_str(),
                        std::strerror(errno));
  }
  if (!s.replay.empty()) {
    const uint64_t fp = recording_fingerprint(*q.options, s.epoch_size);
    const uint64_t max_bytes = max_inputs_bytes(s.record_epochs, s.epoch_size);
    return for_each_file(q, s.replay, [&](const std::string& path) -> Result<void> {
      auto v = read_inputs(path, fp, max_bytes, s.record_epochs);
      if (!v.ok()) return v.error();
      return {};
    });
  }
  return {};
}

// Appends the batch to the recording while there is room (reserved at
// creation: no allocation here); a full recording keeps its prefix.
void Calvin::record_batch(CoState& cs, const std::byte* crs, uint32_t count, bool final) {
  if (s_.inputs.empty() || cs.record_full) return;
  const size_t bytes = 8 + count * g_.cr_bytes;
  if (cs.recorded.size() + bytes + 8 > max_inputs_bytes(s_.record_epochs, s_.epoch_size)) {
    cs.record_full = true;
    return;
  }
  const uint64_t w = count | (final ? kFinal : 0);
  const size_t at = cs.recorded.size();
  cs.recorded.resize(at + bytes);
  std::memcpy(cs.recorded.data() + at, &w, 8);
  std::memcpy(cs.recorded.data() + at + 8, crs, count * g_.cr_bytes);
}

void Calvin::write_recording(Coordinator& c) {
  CoState& cs = co_[c.index()];
  const std::string path = inputs_file(s_.inputs, me_, e_.ctx().index, c.index());
  if (cs.record_full)
    RDTX_LOG(calvin_log(), Warning, "%s: more than calvin.record_epochs = %llu epochs; the file holds the first ones",
             path.c_str(), static_cast<unsigned long long>(s_.record_epochs));
  const uint64_t sum = fnv1a(cs.recorded.data(), cs.recorded.size());
  std::FILE* f = std::fopen(path.c_str(), "wb");
  const bool ok = f != nullptr && std::fwrite(cs.recorded.data(), 1, cs.recorded.size(), f) == cs.recorded.size() &&
                  std::fwrite(&sum, 1, 8, f) == 8;
  if (f != nullptr && std::fclose(f) != 0) fail(c, "calvin.inputs: cannot write %s", path.c_str());
  else if (!ok) fail(c, "calvin.inputs: cannot write %s", path.c_str());
}

Result<void> Calvin::load_replay(uint32_t co) {
  const std::string path = inputs_file(s_.replay, me_, e_.ctx().index, co);
  auto v = read_inputs(path, recording_fingerprint(o_, s_.epoch_size),
                       max_inputs_bytes(s_.record_epochs, s_.epoch_size), s_.record_epochs);
  if (!v.ok()) return v.error();
  co_[co].replay = std::move(*v);
  return {};
}

}  // namespace rdtx::cc::calvin::detail
