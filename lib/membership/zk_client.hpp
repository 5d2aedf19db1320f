// ZkClient: a thin RAII wrapper over ZooKeeper's multi-threaded C client
// (libzookeeper_mt): one session, synchronous create/get/set/delete/children
// returning Result<T>. The C client keeps the session alive, reconnects to
// another server of the ensemble after a lost connection, and runs the
// session's two threads (I/O and completions); this class adds bounded
// waits and error messages that say which server and which path.
//
// Errors: every message starts "zookeeper <servers>: " and names the
// operation and path, then ZooKeeper's own error text in parentheses. Codes:
//   ETIMEDOUT   the session was not established within connect_timeout_ms
//   ENOTCONN    the connection is lost and was not re-established within
//               op_timeout_ms, or was lost while the call waited for its answer
//               (a read is then asked again once the connection is back,
//               within op_timeout_ms; a write, which may have happened, is not)
//   ECONNRESET  the session expired (ephemeral nodes are gone; make a new client)
//   ENOENT      no such node (or, create: no parent)
//   EEXIST      create: the node exists
//   ESTALE      set/remove with an expected version: the node's version differs
//   ENOTEMPTY   remove: the node has children
//   EINVAL      a malformed path or argument
//   EIO         anything else ZooKeeper reports
//
// Thread-safety: every member function may be called from any thread; the
// C client serialises the requests of one session (they complete in order).
// Calls block the calling thread (never call them on a worker lcore).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.hpp"

namespace rdtx::membership {

struct ZkOptions {
  std::string servers;                  // "host:port[,host:port...]" (CoordinatorAddress::connect_string)
  uint32_t session_timeout_ms = 10000;  // asked of the server, which clamps it (default: [2, 20] x tickTime)
  uint32_t connect_timeout_ms = 5000;   // bound on connect() reaching the connected state
  uint32_t op_timeout_ms = 5000;        // bound on waiting for a lost connection to come back before a call
};

enum class NodeKind {
  kPersistent,  // stays until deleted
  kEphemeral,   // deleted by the server when the creating session ends (closed or expired)
};

struct ZkNode {
  std::string data;
  int32_t version = 0;  // the data's version: 0 when created, +1 on every set
};

class ZkClient {
 public:
  // Opens a session and waits up to connect_timeout_ms for the connected
  // state. ETIMEDOUT ("connection not established within 5 s") when no
  // server answered; EINVAL for an empty server list.
  static Result<std::unique_ptr<ZkClient>> connect(const ZkOptions& options);

  // Closes the session: the server deletes this session's ephemeral nodes at
  // once (a session that is never closed expires after its timeout).
  ~ZkClient();
  ZkClient(const ZkClient&) = delete;
  ZkClient& operator=(const ZkClient&) = delete;

  // Creates `path` with `data`. EEXIST if it exists, ENOENT if its parent
  // does not.
  Result<void> create(const std::string& path, const std::string& data, NodeKind kind = NodeKind::kPersistent);
  // Creates every missing ancestor of `path` and `path` itself as empty
  // persistent nodes; nodes that exist are left as they are.
  Result<void> create_path(const std::string& path);
  // The node's data (at most 1 MiB, ZooKeeper's own limit) and version. ENOENT.
  Result<ZkNode> get(const std::string& path);
  // Replaces the data if the node's version is `expected_version` (-1: any).
  // ESTALE when another write came first: the compare-and-set failed.
  // Returns the new version.
  Result<int32_t> set(const std::string& path, const std::string& data, int32_t expected_version);
  // Deletes the node if its version is `expected_version` (-1: any). ENOENT,
  // ESTALE, ENOTEMPTY.
  Result<void> remove(const std::string& path, int32_t expected_version = -1);
  // The names (not paths) of the node's children, sorted. ENOENT.
  Result<std::vector<std::string>> children(const std::string& path);
  // Whether the node exists.
  Result<bool> exists(const std::string& path);

  // The session id (0x... in ZooKeeper's logs), for messages.
  int64_t session_id() const;
  // Whether the session is connected now (it may change at any moment).
  bool connected() const;
  const std::string& servers() const;

  struct Impl;

 private:
  explicit ZkClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdtx::membership
