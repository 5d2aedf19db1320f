// Live counters through DPDK telemetry: a component registers a command under
// /rdtx/... whose handler fills a dictionary; DPDK's telemetry socket answers
// it as JSON, so DPDK's own client (dpdk-telemetry.py) reads rdtx's counters
// while the app runs. See doc/telemetry.md.
// Thread-safety: everything here may be called from any thread. Handlers run on
// DPDK's telemetry threads (one per connected client), concurrently with the
// app's threads: they must only read data that is safe to read concurrently
// (atomics, or state under the owner's lock). A command's handler never runs
// concurrently with itself, nor after its TelemetryCommand was reset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.hpp"

namespace rdtx::env {

// The reply of one command: a JSON object. Keys are 1..kMaxKeyLen characters
// out of [A-Za-z0-9_/] (DPDK's rule), unique within their dictionary. DPDK
// 22.11 has no floating-point value: give rates and ratios as integers with
// the unit in the key (`commits_per_s`, `abort_rate_ppm`, `p99_ns`).
// An add_* that fails returns false and drops that entry; the reply then gets
// an "error" entry naming the first dropped key, so a bad key is visible to
// whoever reads the counters rather than silently missing. Keep the key
// "error" for that: do not use it for data. DPDK sends at most 16 KiB of JSON
// per reply and leaves out, without a word, the entries past that: split
// large state over several commands.
class TelemetryDict {
 public:
  static constexpr size_t kMaxKeyLen = 127;     // DPDK's RTE_TEL_MAX_STRING_LEN - 1
  static constexpr size_t kMaxStringLen = 127;  // longer strings are truncated
  static constexpr size_t kMaxEntries = 255;    // one of DPDK's 256 kept for "error"
  static constexpr size_t kMaxArrayLen = 512;   // RTE_TEL_MAX_ARRAY_ENTRIES

  TelemetryDict();
  ~TelemetryDict();
  TelemetryDict(TelemetryDict&&) noexcept;
  TelemetryDict& operator=(TelemetryDict&&) noexcept;

  bool add_u64(std::string_view key, uint64_t v);
  // DPDK 22.11's signed value is 32-bit: values in [INT32_MIN, INT32_MAX] and
  // positive ones are JSON numbers; a value below INT32_MIN is a decimal string.
  bool add_i64(std::string_view key, int64_t v);
  // Longer than kMaxStringLen bytes: cut there, at a UTF-8 character boundary.
  bool add_string(std::string_view key, std::string_view v);
  // At most kMaxArrayLen elements; a longer array is dropped, not truncated.
  bool add_u64_array(std::string_view key, std::span<const uint64_t> v);
  // A nested object filled by `fill`. Errors inside it are reported at the top.
  bool add_dict(std::string_view key, const std::function<void(TelemetryDict&)>& fill);

  size_t size() const;
  // The first dropped entry and why, or "" when every add_* succeeded.
  const std::string& error() const { return error_; }

  struct Entry;  // defined in telemetry.cpp, which turns the dict into DPDK's

 private:
  friend struct TelemetryDictAccess;
  bool check_key(std::string_view key);
  void push(Entry e);
  std::vector<Entry> entries_;
  std::string error_;
};

// Runs on a DPDK telemetry thread for each request. `params` is what the
// client sent after the first comma ("/rdtx/x,a,b" gives "a,b"), or "".
// Exceptions are caught: the reply is then only
// {"error": "handler failed: <what()>"}.
using TelemetryHandler = std::function<void(std::string_view params, TelemetryDict& out)>;

struct TelemetrySlot;  // a registered command's binding, in telemetry.cpp

// A bound telemetry command. DPDK cannot unregister a command, so this handle
// unbinds the handler instead: reset() (or destruction) waits for a running
// call of the handler to return and drops it; from then on the command
// answers {"running": 0}, and the same command may be registered again (by
// the next engine of a test, say). Own it next to the data the handler reads
// and reset it before that data goes away. Move-only.
class TelemetryCommand {
 public:
  TelemetryCommand() = default;
  ~TelemetryCommand() { reset(); }
  TelemetryCommand(TelemetryCommand&&) noexcept = default;
  TelemetryCommand& operator=(TelemetryCommand&& o) noexcept;
  TelemetryCommand(const TelemetryCommand&) = delete;
  TelemetryCommand& operator=(const TelemetryCommand&) = delete;

  // Must not be called from the command's own handler (it would wait for itself).
  void reset();
  bool bound() const { return slot_ != nullptr; }
  const std::string& command() const { return command_; }

 private:
  friend Result<TelemetryCommand> telemetry_register(std::string, std::string, TelemetryHandler);
  TelemetryCommand(std::string command, std::shared_ptr<TelemetrySlot> slot)
      : command_(std::move(command)), slot_(std::move(slot)) {}
  std::string command_;
  std::shared_ptr<TelemetrySlot> slot_;
};

inline constexpr size_t kTelemetryMaxCommandLen = 55;  // DPDK's MAX_CMD_LEN (56) - 1
inline constexpr size_t kTelemetryMaxHelpLen = 127;    // RTE_TEL_MAX_STRING_LEN - 1

// Registers `command` with DPDK telemetry and binds `handler` to it. `help` is
// what the client's `/help,<command>` shows; DPDK keeps the help of the first
// registration of a command, a later one cannot change it. Works before or
// after eal_init(); the command is served once the EAL has created the
// telemetry socket.
// Errors (each naming the command): EINVAL if the command does not match
// /rdtx/<segment>[/<segment>...] with segments of [A-Za-z0-9_], is longer than
// kTelemetryMaxCommandLen, the help is longer than kTelemetryMaxHelpLen, or the
// handler is empty; EEXIST if the command is bound (registered and not reset);
// DPDK's error if it refuses the command.
Result<TelemetryCommand> telemetry_register(std::string command, std::string help, TelemetryHandler handler);

// The socket this process's telemetry listens on
// (<runtime dir>/dpdk_telemetry.v2, e.g. /var/run/dpdk/rdtx-<pid>/dpdk_telemetry.v2
// as root; ":N" is appended when another process already serves that path), or
// "" when there is none.
std::string telemetry_socket_path();
// False before eal_init() and when the EAL ran with --no-telemetry: commands
// are then never served. (An EAL that cannot create the socket does not
// start: eal_init() fails.)
bool telemetry_available();

}  // namespace rdtx::env
