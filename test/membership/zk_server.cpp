#include "zk_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace rdtx::membership::testing {

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

std::string java() { return env_or("RDTX_ZK_JAVA", "/usr/bin/java"); }
std::string classpath() { return env_or("RDTX_ZK_CLASSPATH", "/usr/share/java/zookeeper.jar"); }

// Whether the server answers ZooKeeper's "srvr" four-letter command as a
// serving server: it listens a moment before it serves, and a client that
// connects in between is dropped and backs off for seconds.
bool serving(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::write(fd, "srvr", 4) == 4) {
    char buf[512];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return reply.find("Zookeeper version") != std::string::npos;
}

}  // namespace

uint16_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::string ZkTestServer::missing() {
  if (::access(java().c_str(), X_OK) != 0) return "java (" + java() + "; Debian: default-jre-headless)";
  std::stringstream cp(classpath());
  for (std::string jar; std::getline(cp, jar, ':');)
    if (::access(jar.c_str(), R_OK) != 0) return "ZooKeeper's jar " + jar + " (Debian: libzookeeper-java; scripts/install-deps.sh)";
  return "";
}

std::unique_ptr<ZkTestServer> ZkTestServer::start(std::string* why) {
  std::unique_ptr<ZkTestServer> s(new ZkTestServer());
  std::string tmpl = (std::filesystem::temp_directory_path() / "rdtx-zk-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    *why = "mkdtemp failed";
    return nullptr;
  }
  s->dir_ = tmpl;
  // The port may be taken between free_loopback_port() and the server's
  // bind; the server then exits, and another port is tried.
  for (int attempt = 0; attempt < 3; ++attempt) {
    s->port_ = free_loopback_port();
    {
      std::ofstream cfg(s->dir_ + "/zoo.cfg");
      // tickTime 100 lets a session be as short as 200 ms (2 ticks); the
      // longest is raised from 20 ticks (2 s: under load a client then
      // loses its connection on a slow answer) to ZooKeeper's usual 40 s.
      cfg << "tickTime=100\n"
          << "maxSessionTimeout=40000\n"
          << "dataDir=" << s->dir_ << "/data\n"
          << "clientPort=" << s->port_ << "\n"
          << "clientPortAddress=127.0.0.1\n"
          << "admin.enableServer=false\n"
          << "4lw.commands.whitelist=srvr\n"
          << "maxClientCnxns=0\n";
    }
    if (s->launch()) return s;
    s->stop();
  }
  *why = "ZooKeeper did not start (" + java() + " -cp " + classpath() + "); its output:\n" + s->log();
  return nullptr;
}

bool ZkTestServer::launch() {
  const std::string log = dir_ + "/server.log";
  const std::vector<std::string> argv_s = {java(),
                                           "-Xmx128m",
                                           "-XX:+UseSerialGC",
                                           "-XX:TieredStopAtLevel=1",
                                           "-cp",
                                           classpath(),
                                           "org.apache.zookeeper.server.ZooKeeperServerMain",
                                           dir_ + "/zoo.cfg"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The server dies with the test process, even when a test crashes.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    std::FILE* out = std::fopen(log.c_str(), "a");
    if (out != nullptr) {
      ::dup2(fileno(out), 1);
      ::dup2(fileno(out), 2);
    }
    std::vector<char*> argv;
    for (const std::string& a : argv_s) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pid_ = -1;
      return false;
    }
    if (serving(port_)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop();
  return false;
}

bool ZkTestServer::restart(std::string* why) {
  stop();
  if (launch()) return true;
  *why = "ZooKeeper did not start again on port " + std::to_string(port_) + "; its output:\n" + log();
  return false;
}

void ZkTestServer::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

std::string ZkTestServer::log() const {
  std::ifstream in(dir_ + "/server.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ZkTestServer::~ZkTestServer() {
  stop();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

}  // namespace rdtx::membership::testing
