// lib/env telemetry: /rdtx/... commands answered on DPDK's telemetry socket,
// read here as a client would (AF_UNIX SOCK_SEQPACKET, telemetry protocol v2).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "env/eal.hpp"
#include "env/telemetry.hpp"
#include "test/env/telemetry_client.hpp"

extern char** environ;

using namespace rdtx;
using namespace rdtx::env;
using namespace rdtx::testing_telemetry;
using namespace std::chrono_literals;

namespace {

std::string g_prefix;       // this process's --file-prefix
std::string g_unavailable;  // why the socket cannot be tested here, or ""

#define REQUIRE_TELEMETRY() \
  if (!g_unavailable.empty()) GTEST_SKIP() << g_unavailable


// Where DPDK's EAL puts its runtime directory (eal_create_runtime_dir).
std::string expected_socket_path() {
  std::string dir;
  if (const char* d = std::getenv("RUNTIME_DIRECTORY"))
    dir = d;
  else if (getuid() == 0)
    dir = "/var/run";
  else if (const char* x = std::getenv("XDG_RUNTIME_DIR"))
    dir = x;
  else
    dir = "/tmp";
  return dir + "/dpdk/" + g_prefix + "/dpdk_telemetry.v2";
}

TelemetryHandler fixed(uint64_t v) {
  return [v](std::string_view, TelemetryDict& out) { out.add_u64("value", v); };
}

TEST(TelemetryRegister, RejectsBadCommandsNamingThem) {
  const std::string bad[] = {
      "/rdtx",    "/rdtx/",    "rdtx/x",
      "/other/x", "/rdtx/a-b", "/rdtx/a,b",
      "/rdtx//a", "/rdtx/a/",  "/rdtx/" + std::string(50, 'x'),  // 56 characters: DPDK keeps 55
  };
  for (const auto& c : bad) {
    auto r = telemetry_register(c, "help", fixed(1));
    ASSERT_FALSE(r.ok()) << c;
    EXPECT_EQ(r.error().code, EINVAL) << c;
    EXPECT_TRUE(contains(r.error().message, "'" + c + "'")) << r.error().message;
  }
  auto ok = telemetry_register("/rdtx/" + std::string(49, 'x'), "55 characters", fixed(1));
  EXPECT_TRUE(ok.ok()) << ok.error().message;

  auto long_help = telemetry_register("/rdtx/long_help", std::string(128, 'h'), fixed(1));
  ASSERT_FALSE(long_help.ok());
  EXPECT_TRUE(contains(long_help.error().message, "/rdtx/long_help")) << long_help.error().message;
  auto empty = telemetry_register("/rdtx/empty_handler", "h", TelemetryHandler{});
  ASSERT_FALSE(empty.ok());
  EXPECT_TRUE(contains(empty.error().message, "/rdtx/empty_handler")) << empty.error().message;
}

TEST(TelemetryRegister, DuplicateIsRejectedUntilReset) {
  auto first = telemetry_register("/rdtx/dup", "first", fixed(1));
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(first->bound());
  EXPECT_EQ(first->command(), "/rdtx/dup");
  auto second = telemetry_register("/rdtx/dup", "second", fixed(2));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code, EEXIST);
  EXPECT_TRUE(contains(second.error().message, "'/rdtx/dup'")) << second.error().message;

  first->reset();
  EXPECT_FALSE(first->bound());
  auto third = telemetry_register("/rdtx/dup", "third", fixed(3));
  ASSERT_TRUE(third.ok()) << third.error().message;

  // Moving the handle moves the binding; the moved-to handle unbinds it.
  TelemetryCommand moved = std::move(*third);
  EXPECT_TRUE(moved.bound());
  EXPECT_FALSE(telemetry_register("/rdtx/dup", "fourth", fixed(4)).ok());
  moved = TelemetryCommand();
  EXPECT_TRUE(telemetry_register("/rdtx/dup", "fifth", fixed(5)).ok());
}

TEST(TelemetryDict, DropsBadEntriesAndSaysWhich) {
  TelemetryDict d;
  EXPECT_TRUE(d.add_u64("ok_key/with_slash9", 1));
  EXPECT_EQ(d.error(), "");
  EXPECT_FALSE(d.add_u64("bad-key", 1));
  EXPECT_TRUE(contains(d.error(), "'bad-key'")) << d.error();
  EXPECT_FALSE(d.add_u64("later bad", 1));
  EXPECT_TRUE(contains(d.error(), "'bad-key'")) << "the first error is kept: " << d.error();

  TelemetryDict e;
  EXPECT_TRUE(e.add_i64("a", -1));
  EXPECT_FALSE(e.add_string("a", "again"));
  EXPECT_TRUE(contains(e.error(), "duplicate")) << e.error();
  EXPECT_FALSE(e.add_u64("", 1));
  EXPECT_FALSE(e.add_u64(std::string(128, 'k'), 1));
  EXPECT_EQ(e.size(), 1u);

  TelemetryDict f;
  std::vector<uint64_t> big(TelemetryDict::kMaxArrayLen + 1, 7);
  EXPECT_FALSE(f.add_u64_array("big", big));
  EXPECT_TRUE(contains(f.error(), "'big'")) << f.error();
  big.pop_back();
  EXPECT_TRUE(f.add_u64_array("fits", big));

  TelemetryDict g;
  for (size_t i = 0; i < TelemetryDict::kMaxEntries; ++i) ASSERT_TRUE(g.add_u64("k" + std::to_string(i), i));
  EXPECT_FALSE(g.add_u64("one_too_many", 1));
  EXPECT_TRUE(contains(g.error(), "full")) << g.error();

  TelemetryDict h;
  EXPECT_TRUE(h.add_dict("inner", [](TelemetryDict& in) { in.add_u64("x.y", 1); }));
  EXPECT_TRUE(contains(h.error(), "in 'inner'")) << h.error();
  EXPECT_TRUE(contains(h.error(), "'x.y'")) << h.error();
}

TEST(Telemetry, SocketIsInTheRuntimeDirectory) {
  REQUIRE_TELEMETRY();
  EXPECT_TRUE(telemetry_available());
  std::string path = telemetry_socket_path();
  EXPECT_EQ(path, expected_socket_path());
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  Client c(path);
  ASSERT_EQ(c.error(), "");
  EXPECT_TRUE(contains(c.info(), "\"pid\":" + std::to_string(getpid()))) << c.info();
  EXPECT_TRUE(contains(c.info(), "\"max_output_len\":")) << c.info();
}

TEST(Telemetry, ClientReadsTheValuesAHandlerAdds) {
  REQUIRE_TELEMETRY();
  std::atomic<uint64_t> commits{42};
  auto cmd = telemetry_register("/rdtx/test", "rdtx test counters. Parameters: any",
                                [&commits](std::string_view params, TelemetryDict& out) {
                                  out.add_u64("commits", commits.load(std::memory_order_relaxed));
                                  out.add_u64("big", uint64_t{1} << 63);
                                  out.add_i64("small_negative", -5);
                                  out.add_i64("large_positive", int64_t{1} << 40);
                                  out.add_i64("large_negative", -(int64_t{1} << 40));
                                  out.add_string("quoted", "say \"hi\"");
                                  out.add_string("params", params);
                                  const uint64_t arr[] = {1, 2, 3};
                                  out.add_u64_array("per_worker", arr);
                                  out.add_dict("nested", [](TelemetryDict& in) {
                                    in.add_u64("x", 7);
                                    const uint64_t two[] = {8, 9};
                                    in.add_u64_array("arr", two);
                                    in.add_dict("deeper", [](TelemetryDict& d) { d.add_string("s", "t"); });
                                  });
                                });
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;

  Client c(telemetry_socket_path());
  ASSERT_EQ(c.error(), "");
  std::string r = c.query("/rdtx/test,a,b");
  EXPECT_EQ(r.rfind("{\"/rdtx/test\":{", 0), 0u) << r;
  EXPECT_TRUE(contains(r, "\"commits\":42")) << r;
  EXPECT_TRUE(contains(r, "\"big\":9223372036854775808")) << r;
  EXPECT_TRUE(contains(r, "\"small_negative\":-5")) << r;
  EXPECT_TRUE(contains(r, "\"large_positive\":1099511627776")) << r;
  EXPECT_TRUE(contains(r, "\"large_negative\":\"-1099511627776\"")) << r;
  EXPECT_TRUE(contains(r, R"("quoted":"say \"hi\"")")) << r;
  EXPECT_TRUE(contains(r, "\"params\":\"a,b\"")) << r;
  EXPECT_TRUE(contains(r, "\"per_worker\":[1,2,3]")) << r;
  EXPECT_TRUE(contains(r, "\"nested\":{\"x\":7,\"arr\":[8,9],\"deeper\":{\"s\":\"t\"}}")) << r;
  EXPECT_FALSE(contains(r, "error")) << r;

  commits.store(43, std::memory_order_relaxed);  // live: the next request sees it
  EXPECT_TRUE(contains(c.query("/rdtx/test"), "\"commits\":43"));
  EXPECT_TRUE(contains(c.query("/rdtx/test"), "\"params\":\"\""));

  EXPECT_TRUE(contains(c.query("/"), "\"/rdtx/test\""));
  EXPECT_TRUE(contains(c.query("/help,/rdtx/test"), "rdtx test counters. Parameters: any"));
}

TEST(Telemetry, ResetCommandAnswersNotRunning) {
  REQUIRE_TELEMETRY();
  struct Counters {
    std::atomic<uint64_t> commits{5};
  };
  auto counters = std::make_unique<Counters>();
  auto cmd = telemetry_register("/rdtx/cleared", "h", [c = counters.get()](std::string_view, TelemetryDict& out) {
    out.add_u64("commits", c->commits.load(std::memory_order_relaxed));
  });
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  Client c(telemetry_socket_path());
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.query("/rdtx/cleared"), "{\"/rdtx/cleared\":{\"commits\":5}}");

  cmd->reset();  // the owner unbinds before its data goes away
  counters.reset();
  EXPECT_EQ(c.query("/rdtx/cleared"), "{\"/rdtx/cleared\":{\"running\":0}}");
}

TEST(Telemetry, ResetWaitsForARunningHandler) {
  REQUIRE_TELEMETRY();
  std::atomic<int> state{0};  // 1: handler entered, 2: handler about to return
  auto cmd = telemetry_register("/rdtx/slow", "h", [&state](std::string_view, TelemetryDict& out) {
    state.store(1);
    std::this_thread::sleep_for(200ms);
    out.add_u64("done", 1);
    state.store(2);
  });
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  std::string reply;
  std::thread client([&reply] {
    Client c(telemetry_socket_path());
    reply = c.error().empty() ? c.query("/rdtx/slow") : c.error();
  });
  for (int i = 0; i < 5000 && state.load() == 0; ++i) std::this_thread::sleep_for(1ms);
  int before = state.load();
  cmd->reset();
  int after = state.load();
  client.join();
  ASSERT_EQ(before, 1) << "the handler never started";
  EXPECT_EQ(after, 2) << "reset() returned while the handler was still running";
  EXPECT_EQ(reply, "{\"/rdtx/slow\":{\"done\":1}}");
}

TEST(Telemetry, HandlerErrorsReachTheClient) {
  REQUIRE_TELEMETRY();
  auto thrower = telemetry_register("/rdtx/throws", "h", [](std::string_view, TelemetryDict& out) {
    out.add_u64("partial", 1);
    throw std::runtime_error("boom");
  });
  ASSERT_TRUE(thrower.ok()) << thrower.error().message;
  auto bad_key = telemetry_register("/rdtx/bad_key", "h", [](std::string_view, TelemetryDict& out) {
    out.add_u64("good", 1);
    out.add_u64("bad-key", 2);
  });
  ASSERT_TRUE(bad_key.ok()) << bad_key.error().message;
  auto too_big = telemetry_register("/rdtx/too_big", "h", [](std::string_view, TelemetryDict& out) {
    for (int i = 0; i < 200; ++i) out.add_string("k" + std::to_string(i), std::string(120, 'v'));
  });
  ASSERT_TRUE(too_big.ok()) << too_big.error().message;
  Client c(telemetry_socket_path());
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.query("/rdtx/throws"), "{\"/rdtx/throws\":{\"error\":\"handler failed: boom\"}}");
  std::string r = c.query("/rdtx/bad_key");
  EXPECT_TRUE(contains(r, "\"good\":1")) << r;
  EXPECT_TRUE(contains(r, "\"error\":\"dropped key 'bad-key'")) << r;
  // DPDK would silently leave out what passes its 16 KiB buffer.
  std::string big = c.query("/rdtx/too_big");
  EXPECT_LE(big.size(), 16u * 1024);
  EXPECT_TRUE(contains(big, "\"k0\":\"vvv")) << big;
  EXPECT_TRUE(contains(big, "\"error\":\"reply over 16 KiB: left out 'k")) << big;
  EXPECT_EQ(big.substr(big.size() - 3), "\"}}") << "the error entry is last and the JSON closed";
}

// DPDK's own client, when installed (Debian package dpdk-dev).
TEST(Telemetry, DpdkClientReadsACommand) {
  REQUIRE_TELEMETRY();
  std::string client;
  for (const char* p : {"/usr/bin/dpdk-telemetry.py", "/usr/local/bin/dpdk-telemetry.py"})
    if (access(p, X_OK) == 0) client = p;
  if (client.empty()) GTEST_SKIP() << "dpdk-telemetry.py not installed (apt-get install dpdk-dev)";
  auto cmd = telemetry_register("/rdtx/client", "h", fixed(7));
  ASSERT_TRUE(cmd.ok()) << cmd.error().message;
  std::string shell = "echo /rdtx/client | " + client + " -f " + g_prefix + " 2>&1";
  FILE* f = popen(shell.c_str(), "r");
  ASSERT_NE(f, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
  EXPECT_EQ(pclose(f), 0) << out;
  EXPECT_EQ(out, "{\"/rdtx/client\": {\"value\": 7}}\n");
}

// With --no-telemetry the EAL opens no socket: a child process checks that.
TEST(Telemetry, NoTelemetryMeansUnavailable) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  env_s.emplace_back("RDTX_TEST_TELEMETRY_CHILD=1");
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  char arg0[] = "test_telemetry";
  char* argv[] = {arg0, nullptr};
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child: telemetry_available() after --no-telemetry (2), or EAL failed (3)";
}

std::vector<std::string> eal_args(const std::string& prefix, bool telemetry) {
  std::vector<std::string> a{"test_telemetry"};
  std::istringstream in(
      "-l 0 --no-huge --no-pci --no-shconf -m 64 --log-level=lib.eal:error --log-level=lib.telemetry:error");
  for (std::string w; in >> w;) a.push_back(w);
  a.push_back("--file-prefix=" + prefix);
  if (!telemetry) a.push_back("--no-telemetry");
  return a;
}

// With --no-shconf the EAL never removes its runtime directory; DPDK unlinks
// the socket in an atexit handler of its own, so this one, registered before
// eal_init(), runs after it and finds the directory empty.
std::string g_runtime_dir;
void remove_runtime_dir() { rmdir(g_runtime_dir.c_str()); }

// `args` must outlive the process's use of the EAL: it may keep pointers into them.
int init(std::vector<std::string>& args, const std::string& prefix) {
  g_prefix = prefix;
  g_runtime_dir = expected_socket_path();
  g_runtime_dir.resize(g_runtime_dir.rfind('/'));
  std::atexit(remove_runtime_dir);
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  auto r = eal_init(static_cast<int>(argv.size()), argv.data());
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("RDTX_TEST_TELEMETRY_CHILD")) {
    std::string prefix = "rdtx-test-telemetry-child-" + std::to_string(getpid());
    static std::vector<std::string> args = eal_args(prefix, false);
    if (init(args, prefix) != 0) return 3;
    int rc = telemetry_available() || !telemetry_socket_path().empty() ? 2 : 0;
    eal_cleanup();
    return rc;
  }
  testing::InitGoogleTest(&argc, argv);
  std::string prefix = "rdtx-test-telemetry-" + std::to_string(getpid());
  static std::vector<std::string> args = eal_args(prefix, true);
  if (init(args, prefix) != 0) return 1;
  if (!telemetry_available())
    g_unavailable =
        "eal_init() without --no-telemetry succeeded, but /proc/self/fd and /proc/net/unix show no "
        "listening socket " +
        expected_socket_path() + " of this process";
  int rc = RUN_ALL_TESTS();
  eal_cleanup();
  return rc;
}
