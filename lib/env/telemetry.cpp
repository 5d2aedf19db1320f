#include "env/telemetry.hpp"

#include <dirent.h>
#include <rte_eal.h>
#include <rte_telemetry.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <utility>
#include <variant>

namespace rdtx::env {

static_assert(TelemetryDict::kMaxKeyLen < RTE_TEL_MAX_STRING_LEN);
static_assert(TelemetryDict::kMaxStringLen < RTE_TEL_MAX_STRING_LEN);
static_assert(TelemetryDict::kMaxEntries < RTE_TEL_MAX_DICT_ENTRIES);
static_assert(TelemetryDict::kMaxArrayLen <= RTE_TEL_MAX_ARRAY_ENTRIES);
static_assert(kTelemetryMaxHelpLen < RTE_TEL_MAX_STRING_LEN);

// Handlers fill this C++ form first and it becomes DPDK's rte_tel_data only
// once the handler has returned: a handler that throws half-way then leaves no
// half-built rte_tel_data behind (DPDK frees nested containers only when it
// prints them, so discarding a partly filled one would leak them).
struct TelemetryDict::Entry {
  std::string key;
  std::variant<uint64_t, int32_t, std::string, std::vector<uint64_t>, TelemetryDict> value;
};

TelemetryDict::TelemetryDict() = default;
TelemetryDict::~TelemetryDict() = default;
TelemetryDict::TelemetryDict(TelemetryDict&&) noexcept = default;
TelemetryDict& TelemetryDict::operator=(TelemetryDict&&) noexcept = default;

size_t TelemetryDict::size() const { return entries_.size(); }

bool TelemetryDict::check_key(std::string_view key) {
  const char* why = nullptr;
  if (key.empty() || key.size() > kMaxKeyLen) {
    why = "length must be 1..127";
  } else {
    for (char c : key)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '/')) why = "allowed: A-Z a-z 0-9 _ /";
  }
  if (!why && entries_.size() >= kMaxEntries) why = "dictionary full (255 entries)";
  if (!why)
    for (const auto& e : entries_)
      if (e.key == key) why = "duplicate key";
  if (!why) return true;
  if (error_.empty()) error_ = "dropped key '" + std::string(key) + "': " + why;
  return false;
}

void TelemetryDict::push(Entry e) { entries_.push_back(std::move(e)); }

bool TelemetryDict::add_u64(std::string_view key, uint64_t v) {
  if (!check_key(key)) return false;
  push({std::string(key), v});
  return true;
}

bool TelemetryDict::add_i64(std::string_view key, int64_t v) {
  if (!check_key(key)) return false;
  if (v >= INT32_MIN && v <= INT32_MAX)
    push({std::string(key), static_cast<int32_t>(v)});
  else if (v > 0)
    push({std::string(key), static_cast<uint64_t>(v)});
  else
    push({std::string(key), std::to_string(v)});
  return true;
}

bool TelemetryDict::add_string(std::string_view key, std::string_view v) {
  if (!check_key(key)) return false;
  if (v.size() > kMaxStringLen) {
    // Cut at a character boundary: a split UTF-8 sequence would make the
    // reply invalid JSON for a strict client.
    size_t n = kMaxStringLen;
    while (n > 0 && (static_cast<unsigned char>(v[n]) & 0xC0) == 0x80) --n;
    v = v.substr(0, n);
  }
  push({std::string(key), std::string(v)});
  return true;
}

bool TelemetryDict::add_u64_array(std::string_view key, std::span<const uint64_t> v) {
  if (v.size() > kMaxArrayLen) {
    if (error_.empty())
      error_ =
          "dropped key '" + std::string(key) + "': array of " + std::to_string(v.size()) + " elements (at most 512)";
    return false;
  }
  if (!check_key(key)) return false;
  push({std::string(key), std::vector<uint64_t>(v.begin(), v.end())});
  return true;
}

bool TelemetryDict::add_dict(std::string_view key, const std::function<void(TelemetryDict&)>& fill) {
  if (!check_key(key)) return false;
  TelemetryDict nested;
  fill(nested);
  if (!nested.error_.empty() && error_.empty()) error_ = "in '" + std::string(key) + "': " + nested.error_;
  push({std::string(key), std::move(nested)});
  return true;
}

// The one reader of TelemetryDict's entries (a friend): turns them into DPDK's form.
struct TelemetryDictAccess {
  // Adds the first `count` entries of `dict` to the started DPDK dict `d`. A
  // nested container that DPDK refuses is freed here; one it accepts is freed
  // by DPDK after printing.
  static void add_to(const TelemetryDict& dict, rte_tel_data* d, size_t count = SIZE_MAX) {
    for (const auto& e : dict.entries_) {
      if (count-- == 0) break;
      const char* k = e.key.c_str();
      if (auto* u = std::get_if<uint64_t>(&e.value)) {
        rte_tel_data_add_dict_u64(d, k, *u);
      } else if (auto* i = std::get_if<int32_t>(&e.value)) {
        rte_tel_data_add_dict_int(d, k, *i);
      } else if (auto* s = std::get_if<std::string>(&e.value)) {
        rte_tel_data_add_dict_string(d, k, s->c_str());
      } else {
        rte_tel_data* c = rte_tel_data_alloc();
        if (!c) continue;
        if (auto* a = std::get_if<std::vector<uint64_t>>(&e.value)) {
          rte_tel_data_start_array(c, RTE_TEL_U64_VAL);
          for (uint64_t x : *a) rte_tel_data_add_array_u64(c, x);
        } else {
          rte_tel_data_start_dict(c);
          add_to(std::get<TelemetryDict>(e.value), c);
        }
        if (rte_tel_data_add_dict_container(d, k, c, 0) < 0) rte_tel_data_free(c);
      }
    }
  }

  // How many leading entries of `dict` fit in `budget` bytes of JSON, counted
  // as DPDK prints them or longer (every escape as \uXXXX).
  static size_t fitting(const TelemetryDict& dict, size_t budget) {
    size_t used = 2, n = 0;  // {}
    for (const auto& e : dict.entries_) {
      used += entry_len(e);
      if (used > budget) break;
      ++n;
    }
    return n;
  }

  static const std::string& key(const TelemetryDict& dict, size_t i) { return dict.entries_[i].key; }

 private:
  static size_t string_len(std::string_view s) {
    size_t n = 2;
    for (char c : s) n += (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) ? 6 : 1;
    return n;
  }
  static size_t entry_len(const TelemetryDict::Entry& e) {
    size_t n = string_len(e.key) + 2;  // "key": and a comma
    if (std::holds_alternative<uint64_t>(e.value) || std::holds_alternative<int32_t>(e.value))
      n += 20;
    else if (auto* s = std::get_if<std::string>(&e.value))
      n += string_len(*s);
    else if (auto* a = std::get_if<std::vector<uint64_t>>(&e.value))
      n += 2 + 21 * a->size();
    else
      for (const auto& inner : std::get<TelemetryDict>(e.value).entries_) n += entry_len(inner);
    return n + 2;
  }
};

// ---- command table -------------------------------------------------------

struct TelemetrySlot {
  std::mutex call_mu;        // held while the handler runs; reset() takes it to unbind
  TelemetryHandler handler;  // empty once unbound
};

namespace {

// DPDK's MAX_OUTPUT_LEN (private to its telemetry.c; the "max_output_len" a
// client is told on connect): the most JSON one reply carries.
constexpr size_t kMaxReplyLen = 16 * 1024;

// DPDK's callback has no user-data pointer, so the command -> handler table is
// process-wide, as DPDK's own is. It is never destroyed: DPDK's telemetry
// threads outlive main() and may still look a command up during exit.
struct Registry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<TelemetrySlot>, std::less<>> slots;
};

Registry& registry() {
  alignas(Registry) static unsigned char storage[sizeof(Registry)];
  static Registry* r = ::new (storage) Registry;
  return *r;
}

int trampoline(const char* cmd, const char* params, rte_tel_data* d) {
  try {
    std::shared_ptr<TelemetrySlot> slot;
    {
      Registry& reg = registry();
      std::lock_guard lock(reg.mu);
      auto it = reg.slots.find(std::string_view(cmd ? cmd : ""));
      if (it != reg.slots.end()) slot = it->second;
    }
    if (!slot) return -1;  // cannot happen: only registered commands reach here
    rte_tel_data_start_dict(d);
    TelemetryDict out;
    std::string failure;
    {
      std::lock_guard lock(slot->call_mu);
      if (!slot->handler) {
        rte_tel_data_add_dict_u64(d, "running", 0);
        return 0;
      }
      try {
        slot->handler(params ? std::string_view(params) : std::string_view(), out);
      } catch (const std::exception& e) {
        failure = e.what();
        if (failure.empty()) failure = "exception";
      } catch (...) {
        failure = "unknown exception";
      }
    }
    if (!failure.empty()) {
      TelemetryDict err;
      err.add_string("error", "handler failed: " + failure);
      TelemetryDictAccess::add_to(err, d);
      return 0;
    }
    // DPDK leaves out, silently, what does not fit in its reply buffer; say so
    // instead, keeping room for the "error" entry (its message escaped).
    size_t budget = kMaxReplyLen - std::strlen(cmd) - 8 - 1024;
    size_t fit = TelemetryDictAccess::fitting(out, budget);
    TelemetryDictAccess::add_to(out, d, fit);
    std::string msg = out.error();
    if (msg.empty() && fit < out.size())
      msg = "reply over 16 KiB: left out '" + TelemetryDictAccess::key(out, fit) + "' and the " +
            std::to_string(out.size() - fit - 1) + " entries after it";
    if (!msg.empty()) {
      TelemetryDict err;  // add_string cuts the message at a character boundary
      err.add_string("error", msg);
      TelemetryDictAccess::add_to(err, d);
    }
    return 0;
  } catch (...) {
    // Out of memory while copying: DPDK answers {"<cmd>": null}.
    return -1;
  }
}

const char* command_error(std::string_view c) {
  constexpr std::string_view kPrefix = "/rdtx/";
  if (c.size() > kTelemetryMaxCommandLen) return "longer than 55 characters";
  if (c.substr(0, kPrefix.size()) != kPrefix) return "must start with /rdtx/";
  std::string_view rest = c.substr(kPrefix.size());
  if (rest.empty() || rest.back() == '/') return "empty segment";
  char prev = '/';
  for (char ch : rest) {
    if (ch == '/' && prev == '/') return "empty segment";
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '/'))
      return "segments are [A-Za-z0-9_] separated by /";
    prev = ch;
  }
  return nullptr;
}

}  // namespace

TelemetryCommand& TelemetryCommand::operator=(TelemetryCommand&& o) noexcept {
  if (this != &o) {
    reset();
    command_ = std::move(o.command_);
    slot_ = std::move(o.slot_);
  }
  return *this;
}

void TelemetryCommand::reset() {
  if (!slot_) return;
  TelemetryHandler dead;
  {
    std::lock_guard lock(slot_->call_mu);  // waits for a running call to return
    dead.swap(slot_->handler);
  }
  // The handler's captures are destroyed here, outside the lock.
  slot_.reset();
}

Result<TelemetryCommand> telemetry_register(std::string command, std::string help, TelemetryHandler handler) {
  if (const char* why = command_error(command))
    return make_error(EINVAL, "telemetry command '%s': %s", command.c_str(), why);
  if (help.size() > kTelemetryMaxHelpLen)
    return make_error(EINVAL, "telemetry command '%s': help text of %zu characters (at most %zu)", command.c_str(),
                      help.size(), kTelemetryMaxHelpLen);
  if (!handler) return make_error(EINVAL, "telemetry command '%s': empty handler", command.c_str());

  std::shared_ptr<TelemetrySlot> slot;
  {
    Registry& reg = registry();
    std::lock_guard lock(reg.mu);
    auto it = reg.slots.find(command);
    if (it == reg.slots.end()) {
      // DPDK itself accepts a command twice (the later one shadows the
      // first); this table is what makes a duplicate an error.
      int rc = rte_telemetry_register_cmd(command.c_str(), trampoline, help.c_str());
      if (rc < 0)
        return make_error(-rc, "telemetry command '%s': DPDK refused it: %s", command.c_str(), std::strerror(-rc));
      it = reg.slots.emplace(command, std::make_shared<TelemetrySlot>()).first;
    }
    slot = it->second;
  }
  // The two locks are never held together, so a handler that registers
  // another command cannot deadlock against a registration of its own.
  {
    std::lock_guard call_lock(slot->call_mu);
    if (slot->handler) return make_error(EEXIST, "telemetry command '%s' is already registered", command.c_str());
    slot->handler = std::move(handler);
  }
  return TelemetryCommand(std::move(command), std::move(slot));
}

// ---- socket discovery ----------------------------------------------------

std::string telemetry_socket_path() {
  // DPDK does not say where (or whether) it created the socket, so look for a
  // listening unix socket of this process named
  // <runtime dir>/dpdk_telemetry.v2[:N] (":N" when the plain name was taken).
  const char* runtime_dir = rte_eal_get_runtime_dir();
  if (!runtime_dir || !*runtime_dir) return "";  // EAL not initialised
  const std::string want = std::string(runtime_dir) + "/dpdk_telemetry.v2";
  std::set<unsigned long> inodes;
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (dirent* ent = readdir(fds)) {
      std::string link = std::string("/proc/self/fd/") + ent->d_name;
      char target[64];
      ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      unsigned long ino;
      if (std::sscanf(target, "socket:[%lu]", &ino) == 1) inodes.insert(ino);
    }
    closedir(fds);
  }
  if (inodes.empty()) return "";
  std::ifstream net("/proc/net/unix");
  std::string line;
  std::getline(net, line);                       // header: Num RefCount Protocol Flags Type St Inode Path
  constexpr unsigned long kAcceptCon = 0x10000;  // __SO_ACCEPTCON: listening
  while (std::getline(net, line)) {
    std::istringstream in(line);
    std::string num, refs, proto, path;
    unsigned long flags = 0, ino = 0;
    unsigned type = 0, state = 0;
    in >> num >> refs >> proto >> std::hex >> flags >> type >> state >> std::dec >> ino >> path;
    if (!in || !(flags & kAcceptCon) || !inodes.count(ino)) continue;
    // Also matching the directory skips a socket inherited from a parent
    // DPDK process (DPDK does not open it close-on-exec).
    if (path.compare(0, want.size(), want) == 0 && (path.size() == want.size() || path[want.size()] == ':'))
      return path;
  }
  return "";
}

bool telemetry_available() { return !telemetry_socket_path().empty(); }

}  // namespace rdtx::env
