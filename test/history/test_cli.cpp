// apps/rdtx-check end to end: exit status, the report, the one-line errors
// and --json. RDTX_CHECK names the binary (meson sets it); without it these
// tests skip.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstddef>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "history/recorder.hpp"
#include "temp_dir.hpp"

namespace rdtx::history::test {
namespace {

struct Output {
  int status = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RdtxCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("RDTX_CHECK");
    if (!bin || !*bin) GTEST_SKIP() << "RDTX_CHECK is not set (run through meson test)";
    bin_ = bin;
  }

  Output run(const std::vector<std::string>& args) {
    std::string cmd = "'" + bin_ + "'";
    for (const std::string& a : args) cmd += " '" + a + "'";
    const std::string out = dir_.path() + "/stdout", err = dir_.path() + "/stderr";
    cmd += " >'" + out + "' 2>'" + err + "'";
    const int rc = std::system(cmd.c_str());
    Output o;
    o.status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    o.out = slurp(out);
    o.err = slurp(err);
    return o;
  }

  // One node, two workers; worker w runs `txns` on its own keys, or the two
  // halves of a write skew on checking[7] and savings[7].
  // truncate_at: the attempt (1..10) whose trace overflows, so that the
  // recorder truncates there (0: none).
  std::string write_run(const std::string& name, bool write_skew, uint32_t truncate_at = 0, bool both_workers = true) {
    const std::string d = dir_.path() + "/" + name;
    std::filesystem::create_directory(d);
    for (uint16_t w = 0; w < (both_workers ? 2 : 1); ++w) {
      RecorderOptions o;
      o.run_id = 7;
      o.worker = w;
      o.cluster_nodes = 1;
      o.node_workers = 2;
      o.names = {{"checking", "savings"}, {"WriteCheck"}, {"conflict"}};
      auto rec = Recorder::create(o);
      EXPECT_TRUE(rec.ok());
      TxnTrace t(4);
      if (write_skew) {
        t.begin(make_txn_id(0, w, 1, 1), 0);
        t.read(w == 0 ? 0 : 1, 7, kInitialVersion);
        t.read_modify_write(w == 0 ? 1 : 0, 7, kInitialVersion, kInitialVersion);
        rec->commit(t);
      } else {
        Version last = kInitialVersion;
        for (uint32_t i = 1; i <= 10; ++i) {
          t.begin(make_txn_id(0, w, 0, i), 0);
          t.read_modify_write(0, 100 + w, last, last);
          if (i == truncate_at)
            for (uint64_t k = 0; k < 4; ++k) t.read(1, k, kInitialVersion);  // one past the trace's 4
          last = {t.id(), 0};
          rec->commit(t);
        }
      }
      EXPECT_TRUE(rec->write_file(d + "/" + Recorder::file_name(0, w)).ok());
    }
    return d;
  }

  std::string bin_;
  TempDir dir_;
};

TEST_F(RdtxCheck, CertifiesAValidRunFromItsDirectory) {
  Output o = run({write_run("ok", false)});
  EXPECT_EQ(o.status, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("2 files of run 0x7 (1 node); 20 transactions, 20 accesses loaded"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\nCERTIFIED serializable\n"), std::string::npos) << o.out;
  EXPECT_EQ(o.err, "");
}

TEST_F(RdtxCheck, PrintsAnAnomalyAndExits1) {
  Output o = run({write_run("skew", true)});
  EXPECT_EQ(o.status, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("G2-item (write skew): a cycle of 2 transactions\n"
                       "  T(n0.w0.c1#1 'WriteCheck') --rw checking[7]: read v=init, replaced by v=n0.w1.c1#1--> "
                       "T(n0.w1.c1#1 'WriteCheck')\n"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("NOT CERTIFIED serializable: 1 G2-item\n"), std::string::npos) << o.out;
}

TEST_F(RdtxCheck, ThreadsDoNotChangeTheReport) {
  const std::string d = write_run("skew", true);
  Output one = run({"--threads", "1", d}), two = run({"--threads=2", d});
  EXPECT_EQ(one.status, 1);
  EXPECT_EQ(two.status, 1);
  auto findings = [](const std::string& out) { return out.substr(out.find("\nG2-item")); };
  EXPECT_EQ(findings(one.out), findings(two.out));
}

TEST_F(RdtxCheck, ACorruptFileIsOneLineNamingItAndExits2) {
  const std::string d = write_run("flip", false);
  const std::string f = d + "/" + Recorder::file_name(0, 1);
  {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(-40 + static_cast<std::streamoff>(offsetof(AccessRecord, key)), std::ios::end);
    io.put('\x7f');  // the last access's key: only the checksum can tell
  }
  Output o = run({d});
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_EQ(o.err.rfind("rdtx-check: " + f + ": checksum mismatch in the names or the log", 0), 0u) << o.err;
}

TEST_F(RdtxCheck, IsolationOption) {
  const std::string d = write_run("skew", true);
  EXPECT_EQ(run({"--isolation", "si", d}).status, 0);
  EXPECT_EQ(run({"--isolation=rc", d}).status, 0);
  EXPECT_EQ(run({"--isolation", "serializable", d}).status, 1);
  // Write skew is G2-item, which repeatable read (PL-2.99) forbids too.
  Output rr = run({"--isolation", "rr", d});
  EXPECT_EQ(rr.status, 1) << rr.out;
  EXPECT_NE(rr.out.find("NOT CERTIFIED repeatable read"), std::string::npos) << rr.out;
}

TEST_F(RdtxCheck, TruncatedHistoryNeedsAllowTruncated) {
  // The fifth of the 10 transactions per worker is too large to record.
  const std::string d = write_run("trunc", false, 5);
  Output o = run({d});
  EXPECT_EQ(o.status, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("n0.w0: history truncated after 4 transactions (6 not recorded): cannot certify"),
            std::string::npos)
      << o.out;
  EXPECT_NE(o.out.find("NOT CERTIFIED serializable: history truncated: cannot certify\n"), std::string::npos) << o.out;
  Output prefix = run({"--allow-truncated", d});
  EXPECT_EQ(prefix.status, 0) << prefix.out;
  EXPECT_NE(prefix.out.find("CERTIFIED serializable (the recorded prefix only: history truncated)"), std::string::npos);
}

TEST_F(RdtxCheck, FileErrorsAreOneLineAndExit2) {
  const std::string d = write_run("ok", false);
  const std::string f = d + "/" + Recorder::file_name(0, 1);
  {
    std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
    s.write("NOTRDTX!", 8);
  }
  Output o = run({d});
  EXPECT_EQ(o.status, 2);
  EXPECT_EQ(o.err, "rdtx-check: " + f + ": bad magic: not an rdtx history file\n");
  EXPECT_EQ(o.out, "");

  Output missing = run({write_run("half", false, 0, false)});
  EXPECT_EQ(missing.status, 2);
  EXPECT_EQ(missing.err, "rdtx-check: incomplete history: no file of n0.w1 (node 0 has 2 workers)\n");

  Output absent = run({dir_.path() + "/nothing"});
  EXPECT_EQ(absent.status, 2);
  EXPECT_EQ(absent.err.rfind("rdtx-check: " + dir_.path() + "/nothing: ", 0), 0u) << absent.err;
}

TEST_F(RdtxCheck, UsageErrors) {
  struct Case {
    std::vector<std::string> args;
    std::string err;
  } cases[] = {
      {{}, "no history file or directory given"},
      {{"--isolation", "snapshot-ish", "x"},
       "--isolation: isolation level 'snapshot-ish' is not one of strict, serializable, si, rc, rr"},
      {{"--max-report", "many", "x"}, "--max-report: 'many' is not a whole number"},
      {{"--max-report", "2000000", "x"}, "--max-report: 2000000 is outside 0..1000000"},
      {{"--threads", "2000", "x"}, "--threads: 2000 is outside 0..1024"},
      {{"--frobnicate", "x"}, "unknown option '--frobnicate'"},
      {{"x", "--json"}, "--json needs a value"},
  };
  for (const Case& c : cases) {
    Output o = run(c.args);
    EXPECT_EQ(o.status, 2) << c.err;
    EXPECT_EQ(o.err, "rdtx-check: " + c.err + " (see --help)\n");
  }
  Output help = run({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_EQ(help.out.rfind("usage: rdtx-check [options] FILE|DIR...", 0), 0u);
}

TEST_F(RdtxCheck, JsonReport) {
  const std::string json = dir_.path() + "/check.json";
  Output o = run({"--json", json, write_run("skew", true)});
  EXPECT_EQ(o.status, 1);
  const std::string j = slurp(json);
  for (const char* want : {R"("verdict" : "NOT CERTIFIED serializable: 1 G2-item")", R"("certified" : false)",
                           R"("G2-item" : 1)", R"("classification" : "write skew")", R"("n0.w1.c1#1")"})
    EXPECT_NE(j.find(want), std::string::npos) << want << " in\n" << j;
}

}  // namespace
}  // namespace rdtx::history::test
