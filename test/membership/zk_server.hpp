// ZkTestServer: a standalone ZooKeeper server of the test's own, on a free
// loopback port with its own temporary data directory, started from
// Debian's `zookeeper` package (java + /usr/share/java/zookeeper.jar, whose
// manifest names the jars it needs) and stopped by the destructor. No
// system service is assumed.
//
// The server's tickTime is 100 ms, so sessions may be as short as 200 ms
// (ZooKeeper's minimum is 2 ticks): a killed client's session expires
// quickly. The maximum is 40 s, as with ZooKeeper's default tickTime.
// RDTX_ZK_JAVA and RDTX_ZK_CLASSPATH override java and the classpath.
// Thread-safety: one test thread, which must outlive the server: the server
// gets SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG, so
// that no server outlives a crashed test), so start() and restart() belong
// on the test's main thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace rdtx::membership::testing {

class ZkTestServer {
 public:
  // What is missing to run a server ("java (/usr/bin/java)" or the jar),
  // or "" if it can be started. Tests GTEST_SKIP with this text.
  static std::string missing();

  // Starts a server and waits (up to 30 s) until it serves (answers "srvr").
  // Returns nullptr and sets `*why` (with the server's output) on failure.
  static std::unique_ptr<ZkTestServer> start(std::string* why);

  ~ZkTestServer();  // stop()s and removes the data directory
  ZkTestServer(const ZkTestServer&) = delete;
  ZkTestServer& operator=(const ZkTestServer&) = delete;

  // Kills the server (SIGKILL: as a crashed machine, no goodbye to its
  // clients) and waits for it. Idempotent.
  void stop();

  // Starts the server again on the same port and data directory (its
  // sessions survive if their clients come back within their timeout).
  // false and `*why` if it does not serve within 30 s.
  bool restart(std::string* why);

  uint16_t port() const { return port_; }
  std::string servers() const { return "127.0.0.1:" + std::to_string(port_); }
  // The server's own output so far (for failure messages).
  std::string log() const;

 private:
  ZkTestServer() = default;
  bool launch();  // starts java with dir_/zoo.cfg, waits until it serves
  int pid_ = -1;
  uint16_t port_ = 0;
  std::string dir_;
};

// A port on 127.0.0.1 that nobody listens on now.
uint16_t free_loopback_port();

}  // namespace rdtx::membership::testing
