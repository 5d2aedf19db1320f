#include "membership/zk_client.hpp"

#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "env/log.hpp"

namespace rdtx::membership {

namespace {

const env::LogType kLog("rdtx.membership.zk");

// The C client's own log lines (connection attempts, reconnects) at debug
// level: what matters reaches the caller as an error naming the server.
void log_from_client(const char* message) { RDTX_LOG(kLog, Debug, "%s", message); }

int errno_of(int rc) {
  switch (rc) {
    case ZNONODE:
      return ENOENT;
    case ZNODEEXISTS:
      return EEXIST;
    case ZBADVERSION:
      return ESTALE;
    case ZNOTEMPTY:
      return ENOTEMPTY;
    case ZBADARGUMENTS:
      return EINVAL;
    case ZCONNECTIONLOSS:
    case ZOPERATIONTIMEOUT:
      return ENOTCONN;
    case ZSESSIONEXPIRED:
    case ZINVALIDSTATE:
      return ECONNRESET;
    default:
      return EIO;
  }
}

std::string seconds(uint32_t ms) {
  char buf[32];
  if (ms % 1000 == 0)
    std::snprintf(buf, sizeof buf, "%u s", ms / 1000);
  else
    std::snprintf(buf, sizeof buf, "%.1f s", ms / 1000.0);
  return buf;
}

}  // namespace

struct ZkClient::Impl {
  ZkOptions options;
  zhandle_t* zh = nullptr;
  // The session state as the watcher last saw it; guarded by `mu`.
  std::mutex mu;
  std::condition_variable changed;
  int state = 0;

  static void watcher(zhandle_t*, int type, int state, const char*, void* context) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<Impl*>(context);
    {
      std::lock_guard lock(self->mu);
      self->state = state;
    }
    self->changed.notify_all();
  }

  bool usable(int s) const { return s == ZOO_CONNECTED_STATE || s == ZOO_READONLY_STATE; }
  bool dead(int s) const { return s == ZOO_EXPIRED_SESSION_STATE || s == ZOO_AUTH_FAILED_STATE; }

  // Waits up to `ms` for a usable session; the final state.
  int wait_usable(uint32_t ms) {
    std::unique_lock lock(mu);
    changed.wait_for(lock, std::chrono::milliseconds(ms), [&] { return usable(state) || dead(state); });
    return state;
  }

  Error error(int code, const std::string& what) const {
    return Error{code, "zookeeper " + options.servers + ": " + what};
  }
  Error zk_error(int rc, const std::string& op, const std::string& path) const {
    std::string what = op + " " + path + ": ";
    switch (rc) {
      case ZCONNECTIONLOSS:
        what += "connection lost while waiting for the answer";
        break;
      case ZOPERATIONTIMEOUT:
        what += "no answer in time";
        break;
      case ZSESSIONEXPIRED:
      case ZINVALIDSTATE:
        what += "the session expired (its ephemeral nodes are gone)";
        break;
      case ZNONODE:
        what += op == "create" ? "the parent does not exist" : "no such node";
        break;
      case ZNODEEXISTS:
        what += "exists already";
        break;
      case ZBADVERSION:
        what += "the node's version changed (another write came first)";
        break;
      case ZNOTEMPTY:
        what += "has children";
        break;
      default:
        what += "failed";
        break;
    }
    return error(errno_of(rc), what + " (" + zerror(rc) + ")");
  }

  // A read (idempotent) whose connection was lost while it waited for the
  // answer is asked again once the connection is back, within
  // op_timeout_ms of the first loss: a server that restarts, or accepts a
  // connection a moment before it serves, does not fail it. Writes are not
  // asked again: ZooKeeper cannot say whether a lost write happened.
  template <class Call>
  Result<int> read(const std::string& op, const std::string& path, Call call) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options.op_timeout_ms);
    for (;;) {
      RDTX_TRY(ready(op, path));
      const int rc = call();
      if (rc != ZCONNECTIONLOSS || std::chrono::steady_clock::now() >= deadline) return rc;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the watcher's view to catch up
    }
  }

  // Before a call: a lost connection gets op_timeout_ms to come back, so
  // that a call never waits for a server that is gone.
  Result<void> ready(const std::string& op, const std::string& path) {
    const int s = wait_usable(options.op_timeout_ms);
    if (usable(s)) return {};
    if (dead(s)) return zk_error(ZSESSIONEXPIRED, op, path);
    return error(ENOTCONN,
                 op + " " + path + ": connection lost, not re-established within " + seconds(options.op_timeout_ms));
  }
};

ZkClient::ZkClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ZkClient::~ZkClient() {
  // Joins the client's threads: no watcher call reaches impl_ afterwards.
  if (impl_->zh != nullptr) zookeeper_close(impl_->zh);
}

Result<std::unique_ptr<ZkClient>> ZkClient::connect(const ZkOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.servers.empty()) return make_error(EINVAL, "zookeeper: no server given");
  // The client's default level writes INFO lines to stderr before any
  // handle exists; its lines reach kLog through the callback instead.
  static std::once_flag quiet;
  std::call_once(quiet, [] { zoo_set_debug_level(ZOO_LOG_LEVEL_WARN); });
  errno = 0;
  impl->zh = zookeeper_init2(options.servers.c_str(), &Impl::watcher, static_cast<int>(options.session_timeout_ms),
                             nullptr, impl.get(), 0, &log_from_client);
  if (impl->zh == nullptr)
    return impl->error(errno != 0 ? errno : EINVAL,
                       std::string("cannot start a session: ") + std::strerror(errno != 0 ? errno : EINVAL));
  const int s = impl->wait_usable(options.connect_timeout_ms);
  if (!impl->usable(s)) {
    zookeeper_close(impl->zh);
    impl->zh = nullptr;
    if (impl->dead(s)) return impl->error(ECONNRESET, "the new session was refused (expired or not authorised)");
    return impl->error(ETIMEDOUT, "connection not established within " + seconds(options.connect_timeout_ms) +
                                      " (is ZooKeeper running there?)");
  }
  RDTX_LOG(kLog, Info, "zookeeper %s: session 0x%llx, timeout %d ms", options.servers.c_str(),
           (unsigned long long)zoo_client_id(impl->zh)->client_id, zoo_recv_timeout(impl->zh));
  return std::unique_ptr<ZkClient>(new ZkClient(std::move(impl)));
}

Result<void> ZkClient::create(const std::string& path, const std::string& data, NodeKind kind) {
  RDTX_TRY(impl_->ready("create", path));
  const int mode = kind == NodeKind::kEphemeral ? ZOO_EPHEMERAL : ZOO_PERSISTENT;
  const int rc = zoo_create(impl_->zh, path.c_str(), data.data(), static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                            mode, nullptr, 0);
  if (rc != ZOK) return impl_->zk_error(rc, "create", path);
  return {};
}

Result<void> ZkClient::create_path(const std::string& path) {
  for (size_t pos = path.find('/', 1);; pos = path.find('/', pos + 1)) {
    const std::string prefix = path.substr(0, pos);
    auto r = create(prefix, "");
    if (!r.ok() && r.error().code != EEXIST) return r.error();
    if (pos == std::string::npos) return {};
  }
}

Result<ZkNode> ZkClient::get(const std::string& path) {
  ZkNode node;
  node.data.resize(4096);
  for (;;) {
    struct Stat stat {};
    int len = 0;
    auto rc = impl_->read("get", path, [&] {
      len = static_cast<int>(node.data.size());
      return zoo_get(impl_->zh, path.c_str(), 0, node.data.data(), &len, &stat);
    });
    if (!rc.ok()) return rc.error();
    if (*rc != ZOK) return impl_->zk_error(*rc, "get", path);
    // A node larger than the buffer comes back truncated; read it again
    // with room for all of it (it may have grown in between).
    if (stat.dataLength > static_cast<int32_t>(node.data.size())) {
      node.data.resize(static_cast<size_t>(stat.dataLength));
      continue;
    }
    node.data.resize(len < 0 ? 0 : static_cast<size_t>(len));
    node.version = stat.version;
    return node;
  }
}

Result<int32_t> ZkClient::set(const std::string& path, const std::string& data, int32_t expected_version) {
  RDTX_TRY(impl_->ready("set", path));
  struct Stat stat {};
  const int rc = zoo_set2(impl_->zh, path.c_str(), data.data(), static_cast<int>(data.size()), expected_version, &stat);
  if (rc != ZOK) return impl_->zk_error(rc, "set", path);
  return stat.version;
}

Result<void> ZkClient::remove(const std::string& path, int32_t expected_version) {
  RDTX_TRY(impl_->ready("delete", path));
  const int rc = zoo_delete(impl_->zh, path.c_str(), expected_version);
  if (rc != ZOK) return impl_->zk_error(rc, "delete", path);
  return {};
}

Result<std::vector<std::string>> ZkClient::children(const std::string& path) {
  String_vector v{};
  auto rc = impl_->read("children of", path, [&] { return zoo_get_children(impl_->zh, path.c_str(), 0, &v); });
  if (!rc.ok()) return rc.error();
  if (*rc != ZOK) return impl_->zk_error(*rc, "children of", path);
  std::vector<std::string> out(v.data, v.data + v.count);
  deallocate_String_vector(&v);
  std::sort(out.begin(), out.end());
  return out;
}

Result<bool> ZkClient::exists(const std::string& path) {
  struct Stat stat {};
  auto rc = impl_->read("exists", path, [&] { return zoo_exists(impl_->zh, path.c_str(), 0, &stat); });
  if (!rc.ok()) return rc.error();
  if (*rc == ZNONODE) return false;
  if (*rc != ZOK) return impl_->zk_error(*rc, "exists", path);
  return true;
}

int64_t ZkClient::session_id() const { return zoo_client_id(impl_->zh)->client_id; }

bool ZkClient::connected() const { return impl_->usable(zoo_state(impl_->zh)); }

const std::string& ZkClient::servers() const { return impl_->options.servers; }

}  // namespace rdtx::membership
