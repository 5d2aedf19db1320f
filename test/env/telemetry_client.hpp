// A telemetry v2 client for tests: connects to DPDK's telemetry socket as
// dpdk-telemetry.py does and sends commands (test_telemetry, test_run).
// Thread-safety: one thread per Client.
#pragma once

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace rdtx::testing_telemetry {

// A telemetry v2 client: on connect the server sends an info object, then
// each request (one packet, "<command>[,<params>]") gets one JSON reply.
class Client {
 public:
  explicit Client(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd_ < 0) {
      error_ = std::string("socket: ") + std::strerror(errno);
      return;
    }
    timeval tv{5, 0};  // a server that never answers fails the test, not hangs it
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    std::snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path.c_str());
    if (connect(fd_, reinterpret_cast<sockaddr*>(&sun), sizeof sun) != 0) {
      error_ = "connect " + path + ": " + std::strerror(errno);
      return;
    }
    info_ = receive();
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& error() const { return error_; }
  const std::string& info() const { return info_; }

  std::string query(const std::string& request) {
    if (send(fd_, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size()))
      return std::string("send failed: ") + std::strerror(errno);
    return receive();
  }

 private:
  std::string receive() {
    std::vector<char> buf(64 * 1024);
    ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
    if (n < 0) return std::string("recv failed: ") + std::strerror(errno);
    return std::string(buf.data(), static_cast<size_t>(n));
  }
  int fd_ = -1;
  std::string error_, info_;
};

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace rdtx::testing_telemetry
