// Unit tests for lib/config: schema declaration, TOML files, --set
// overrides, the error messages users see, and the resolved output.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace rdtx::config {
namespace {

Schema test_schema() {
  Schema s;
  s.add_enum("txn.protocol", "occ", {"nowait", "waitdie", "occ", "mvcc", "sundial", "calvin"},
             "concurrency-control protocol")
      .add_int("txn.coroutines", 10, 1, 1024, "coordinator coroutines per worker")
      .add_enum("txn.pipeline.fetch", "rpc", {"onesided", "rpc", "hybrid"}, "primitive of the fetch stage")
      .add_bool("txn.options.doorbell_batching", true, "post a stage's verbs with one doorbell")
      .add_int("rdma.mr_bytes", 1 << 20, 0, INT64_MAX, "bytes of registered memory per node")
      .add_float("rdma.shm.latency_us", 0.0, 0.0, 1000.0, "one-way latency of the shm driver")
      .add_string("run.name", "bench", "name recorded in reports")
      .add_bool("verbose", false, "print progress")
      .add_float("workload.ycsb.theta", 0.99, 0.0, 1.0, "Zipf skew");
  return s;
}

// The error message of a parse that must fail.
std::string parse_error(const Schema& schema, std::string_view text, const std::vector<std::string>& sets = {}) {
  Result<Config> r = Config::parse(schema, text, "conf/occ.toml", sets);
  EXPECT_FALSE(r.ok()) << "unexpectedly accepted:\n" << text;
  return r.ok() ? "" : r.error().message;
}

std::string set_error(const std::string& arg) { return parse_error(test_schema(), "", {arg}); }

Config parse_ok(const Schema& schema, std::string_view text, const std::vector<std::string>& sets = {}) {
  Result<Config> r = Config::parse(schema, text, "conf/occ.toml", sets);
  if (!r.ok()) ADD_FAILURE() << r.error().message;
  return std::move(r).value();
}

TEST(ConfigDefaults, EmptyFileGivesEveryDefault) {
  Config c = parse_ok(test_schema(), "");
  EXPECT_EQ(c.get_string("txn.protocol"), "occ");
  EXPECT_EQ(c.get_int("txn.coroutines"), 10);
  EXPECT_EQ(c.get_string("txn.pipeline.fetch"), "rpc");
  EXPECT_TRUE(c.get_bool("txn.options.doorbell_batching"));
  EXPECT_EQ(c.get_int("rdma.mr_bytes"), 1 << 20);
  EXPECT_EQ(c.get_float("rdma.shm.latency_us"), 0.0);
  EXPECT_EQ(c.get_string("run.name"), "bench");
  EXPECT_FALSE(c.get_bool("verbose"));
  EXPECT_DOUBLE_EQ(c.get_float("workload.ycsb.theta"), 0.99);
  EXPECT_EQ(c.origin("txn.coroutines"), "default");
}

TEST(ConfigFile, ValuesAndOrigins) {
  Config c = parse_ok(test_schema(),
                      "verbose = true\n"
                      "[txn]\n"
                      "protocol = \"mvcc\"\n"
                      "coroutines = 0x20\n"
                      "[txn.pipeline]\n"
                      "fetch = \"hybrid\"\n"
                      "[workload.ycsb]\n"
                      "theta = 1\n");  // an integer where a float is expected
  EXPECT_TRUE(c.get_bool("verbose"));
  EXPECT_EQ(c.get_string("txn.protocol"), "mvcc");
  EXPECT_EQ(c.get_int("txn.coroutines"), 32);
  EXPECT_EQ(c.get_string("txn.pipeline.fetch"), "hybrid");
  EXPECT_EQ(c.get_float("workload.ycsb.theta"), 1.0);
  EXPECT_EQ(c.origin("verbose"), "conf/occ.toml:1:1");
  EXPECT_EQ(c.origin("txn.coroutines"), "conf/occ.toml:4:1");
  EXPECT_EQ(c.origin("run.name"), "default");
}

TEST(ConfigFile, InlineTablesAndDottedKeys) {
  Config c = parse_ok(test_schema(),
                      "txn = { coroutines = 3, pipeline = { fetch = \"onesided\" } }\n"
                      "rdma.shm.latency_us = 1.5\n");
  EXPECT_EQ(c.get_int("txn.coroutines"), 3);
  EXPECT_EQ(c.get_string("txn.pipeline.fetch"), "onesided");
  EXPECT_EQ(c.get_float("rdma.shm.latency_us"), 1.5);
}

TEST(ConfigFile, RangeErrorNamesFileLineColumn) {
  Result<Config> r = Config::parse(test_schema(), "# OCC preset\n\n[txn]\ncoroutines = 0\n", "conf/occ.toml", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "conf/occ.toml:4:14: txn.coroutines = 0 is out of range [1, 1024]");
  EXPECT_EQ(r.error().code, ERANGE);
}

TEST(ConfigFile, FloatRangeRejectsNan) {
  EXPECT_EQ(parse_error(test_schema(), "[workload.ycsb]\ntheta = 1.5\n"),
            "conf/occ.toml:2:9: workload.ycsb.theta = 1.5 is out of range [0.0, 1.0]");
  EXPECT_EQ(parse_error(test_schema(), "[workload.ycsb]\ntheta = nan\n"),
            "conf/occ.toml:2:9: workload.ycsb.theta = nan is out of range [0.0, 1.0]");
}

TEST(ConfigFile, UnknownKeySuggestsClosestKey) {
  EXPECT_EQ(parse_error(test_schema(), "[txn]\nprotocol = \"occ\"\n\n\n\n\ncorutines = 8\n"),
            "conf/occ.toml:7:1: unknown key 'txn.corutines' (did you mean 'txn.coroutines'?)");
}

TEST(ConfigFile, UnknownKeySuggestsSameNameInOtherSection) {
  EXPECT_EQ(parse_error(test_schema(), "[txn]\ndoorbell_batching = false\n"),
            "conf/occ.toml:2:1: unknown key 'txn.doorbell_batching' (did you mean "
            "'txn.options.doorbell_batching'?)");
}

TEST(ConfigFile, UnknownKeyWithNothingCloseHasNoSuggestion) {
  EXPECT_EQ(parse_error(test_schema(), "[txn]\nqqqqqqqqqqqq = 1\n"),
            "conf/occ.toml:2:1: unknown key 'txn.qqqqqqqqqqqq'");
}

TEST(ConfigFile, QuotedKeyWithDotIsNotAPath) {
  // One key literally named "txn.coroutines" at the root, not txn.coroutines.
  EXPECT_EQ(parse_error(test_schema(), "\"txn.coroutines\" = 5\n"),
            "conf/occ.toml:1:1: unknown key '\"txn.coroutines\"' (did you mean 'txn.coroutines'?)");
}

TEST(ConfigFile, UnknownSectionSuggestsClosestSection) {
  EXPECT_EQ(parse_error(test_schema(), "[txm]\ncoroutines = 3\n"),
            "conf/occ.toml:1:2: unknown section 'txm' (did you mean 'txn'?)");
  EXPECT_EQ(parse_error(test_schema(), "[txn.pipline]\nfetch = \"rpc\"\n"),
            "conf/occ.toml:1:6: unknown section 'txn.pipline' (did you mean 'txn.pipeline'?)");
  // A right section name at the wrong level.
  EXPECT_EQ(parse_error(test_schema(), "[pipeline]\nfetch = \"rpc\"\n"),
            "conf/occ.toml:1:2: unknown section 'pipeline' (did you mean 'txn.pipeline'?)");
}

TEST(ConfigFile, TypeErrorsNameExpectedAndFound) {
  EXPECT_EQ(parse_error(test_schema(), "[txn]\ncoroutines = \"ten\"\n"),
            "conf/occ.toml:2:14: expected an integer for txn.coroutines, found a string");
  EXPECT_EQ(parse_error(test_schema(), "[txn]\ncoroutines = 2.5\n"),
            "conf/occ.toml:2:14: expected an integer for txn.coroutines, found a float");
  EXPECT_EQ(parse_error(test_schema(), "verbose = 1\n"),
            "conf/occ.toml:1:11: expected a boolean (true or false) for verbose, found an integer");
  EXPECT_EQ(parse_error(test_schema(), "[run]\nname = 1979-05-27\n"),
            "conf/occ.toml:2:8: expected a string for run.name, found a date");
}

TEST(ConfigFile, ArrayOrTableForScalarIsTypeError) {
  EXPECT_EQ(parse_error(test_schema(), "[txn]\ncoroutines = [1, 2]\n"),
            "conf/occ.toml:2:14: expected an integer for txn.coroutines, found an array");
  EXPECT_EQ(parse_error(test_schema(), "[txn.coroutines]\nx = 1\n"),
            "conf/occ.toml:1:1: expected an integer for txn.coroutines, found a table");
}

TEST(ConfigFile, SectionGivenAValue) {
  EXPECT_EQ(parse_error(test_schema(), "txn = 5\n"),
            "conf/occ.toml:1:7: 'txn' is a section: expected a table, found an integer");
}

TEST(ConfigFile, EnumErrorListsAllowedAndSuggests) {
  Result<Config> r = Config::parse(test_schema(), "[txn]\nprotocol = \"occc\"\n", "conf/occ.toml", {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "conf/occ.toml:2:12: txn.protocol = \"occc\" is not one of: nowait, waitdie, occ, mvcc, sundial, "
            "calvin (did you mean 'occ'?)");
  EXPECT_EQ(r.error().code, EINVAL);
}

TEST(ConfigFile, FirstErrorInFileOrderIsReported) {
  // toml++ iterates tables alphabetically; the user should see line 1 first.
  EXPECT_EQ(parse_error(test_schema(), "zzz = 1\naaa = 2\n"), "conf/occ.toml:1:1: unknown key 'zzz'");
}

TEST(ConfigFile, SyntaxErrorHasPosition) {
  std::string msg = parse_error(test_schema(), "verbose = true\nbroken = = 2\n");
  EXPECT_EQ(msg.rfind("conf/occ.toml:2:10: TOML syntax error: ", 0), 0u) << msg;
  EXPECT_GT(msg.size(), std::string("conf/occ.toml:2:10: TOML syntax error: ").size()) << "no description";
}

TEST(ConfigFile, DuplicateKeyIsSyntaxError) {
  std::string msg = parse_error(test_schema(), "[txn]\ncoroutines = 1\ncoroutines = 2\n");
  EXPECT_EQ(msg.rfind("conf/occ.toml:3:", 0), 0u) << msg;
  EXPECT_NE(msg.find("TOML syntax error"), std::string::npos) << msg;
}

TEST(ConfigOverride, AppliedAfterFileAndLastWins) {
  Config c = parse_ok(test_schema(), "[txn]\ncoroutines = 4\nprotocol = \"mvcc\"\n",
                      {"txn.coroutines=8", "txn.coroutines=16", "verbose=true"});
  EXPECT_EQ(c.get_int("txn.coroutines"), 16);
  EXPECT_EQ(c.origin("txn.coroutines"), "--set");
  EXPECT_EQ(c.get_string("txn.protocol"), "mvcc");  // untouched by --set
  EXPECT_EQ(c.origin("txn.protocol"), "conf/occ.toml:3:1");
  EXPECT_TRUE(c.get_bool("verbose"));
}

TEST(ConfigOverride, IntegersAcceptHexAndUnderscores) {
  Config c = parse_ok(test_schema(), "", {"rdma.mr_bytes=0x1000"});
  EXPECT_EQ(c.get_int("rdma.mr_bytes"), 4096);
  c = parse_ok(test_schema(), "", {"rdma.mr_bytes=1_000_000"});
  EXPECT_EQ(c.get_int("rdma.mr_bytes"), 1000000);
  c = parse_ok(test_schema(), "", {"txn.coroutines = 7"});
  EXPECT_EQ(c.get_int("txn.coroutines"), 7);
}

TEST(ConfigOverride, FloatsAcceptIntegers) {
  Config c = parse_ok(test_schema(), "", {"rdma.shm.latency_us=2", "workload.ycsb.theta=0.5"});
  EXPECT_EQ(c.get_float("rdma.shm.latency_us"), 2.0);
  EXPECT_EQ(c.get_float("workload.ycsb.theta"), 0.5);
}

TEST(ConfigOverride, StringsAreVerbatimWithQuotesStripped) {
  Config c = parse_ok(test_schema(), "", {"run.name=a b=c # not a comment", "txn.protocol=calvin"});
  EXPECT_EQ(c.get_string("run.name"), "a b=c # not a comment");
  EXPECT_EQ(c.get_string("txn.protocol"), "calvin");
  c = parse_ok(test_schema(), "", {"run.name=\"quoted\"", "txn.protocol=\"nowait\""});
  EXPECT_EQ(c.get_string("run.name"), "quoted");
  EXPECT_EQ(c.get_string("txn.protocol"), "nowait");
}

TEST(ConfigOverride, Errors) {
  EXPECT_EQ(set_error("txn.coroutines=abc"), "--set txn.coroutines=abc: expected an integer for txn.coroutines");
  EXPECT_EQ(set_error("txn.coroutines="), "--set txn.coroutines=: expected an integer for txn.coroutines");
  EXPECT_EQ(set_error("txn.coroutines=1.5"),
            "--set txn.coroutines=1.5: expected an integer for txn.coroutines, found a float");
  EXPECT_EQ(set_error("txn.coroutines=0"), "--set txn.coroutines=0: txn.coroutines = 0 is out of range [1, 1024]");
  EXPECT_EQ(set_error("txn.coroutines=0x800"),
            "--set txn.coroutines=0x800: txn.coroutines = 2048 is out of range [1, 1024]");
  EXPECT_EQ(set_error("verbose=yes"), "--set verbose=yes: expected a boolean (true or false) for verbose");
  EXPECT_EQ(set_error("workload.ycsb.theta=high"),
            "--set workload.ycsb.theta=high: expected a number for workload.ycsb.theta");
  EXPECT_EQ(set_error("txn.coroutines"), "--set txn.coroutines: expected section.key=value");
  EXPECT_EQ(set_error("=5"), "--set =5: empty key before '='");
  EXPECT_EQ(set_error("txn.corutines=5"),
            "--set txn.corutines=5: unknown key 'txn.corutines' (did you mean 'txn.coroutines'?)");
  EXPECT_EQ(set_error("txn=5"), "--set txn=5: 'txn' is a section, not a key");
  EXPECT_EQ(set_error("txn.protocol=OCC2"),
            "--set txn.protocol=OCC2: txn.protocol = \"OCC2\" is not one of: nowait, waitdie, occ, mvcc, sundial, "
            "calvin (did you mean 'occ'?)");
  EXPECT_EQ(set_error("run.name=\xff"), "--set run.name=\xff: the value for run.name is not valid UTF-8");
}

TEST(ConfigOverride, OnlyOneLiteralIsRead) {
  // A value may not smuggle in more TOML.
  EXPECT_EQ(set_error("txn.coroutines=4\nverbose = true"),
            "--set txn.coroutines=4\nverbose = true: expected an integer for txn.coroutines");
}

TEST(ConfigOverride, EveryOverrideIsValidatedEvenIfOverriddenLater) {
  EXPECT_EQ(set_error("txn.coroutines=0"), "--set txn.coroutines=0: txn.coroutines = 0 is out of range [1, 1024]");
  Result<Config> r = Config::parse(test_schema(), "", "x", {"txn.coroutines=0", "txn.coroutines=5"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "--set txn.coroutines=0: txn.coroutines = 0 is out of range [1, 1024]");
}

Schema schema_with_check() {
  Schema s = test_schema();
  s.add_check([](const Config& c) -> std::string {
    if (c.get_string("txn.protocol") == "calvin" && c.get_string("txn.pipeline.fetch") == "onesided")
      return "txn.protocol = \"calvin\" (" + c.origin("txn.protocol") +
             ") does not support txn.pipeline.fetch = \"onesided\" (allowed: rpc)";
    return "";
  });
  return s;
}

TEST(ConfigCheck, CrossKeyCheckFailsWithItsMessage) {
  Result<Config> r = Config::parse(schema_with_check(), "[txn]\nprotocol = \"calvin\"\n", "conf/calvin.toml",
                                   {"txn.pipeline.fetch=onesided"});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message,
            "txn.protocol = \"calvin\" (conf/calvin.toml:2:1) does not support txn.pipeline.fetch = \"onesided\" "
            "(allowed: rpc)");
}

TEST(ConfigCheck, CrossKeyCheckPassesAndSeesOverrides) {
  // The file alone would fail the check; the override, applied first, fixes it.
  Result<Config> r =
      Config::parse(schema_with_check(), "[txn]\nprotocol = \"calvin\"\n[txn.pipeline]\nfetch = \"onesided\"\n",
                    "conf/calvin.toml", {"txn.pipeline.fetch=rpc"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->get_string("txn.pipeline.fetch"), "rpc");
}

TEST(ConfigOutput, TomlHasEveryKeyAndReadsBack) {
  Config c = parse_ok(test_schema(), "[txn]\ncoroutines = 12\n", {"run.name=say \"hi\"\\n"});
  const std::string expected =
      "verbose = false\n"
      "\n[rdma]\n"
      "mr_bytes = 1048576\n"
      "\n[rdma.shm]\n"
      "latency_us = 0.0\n"
      "\n[run]\n"
      "name = \"say \\\"hi\\\"\\\\n\"\n"
      "\n[txn]\n"
      "coroutines = 12\n"
      "protocol = \"occ\"\n"
      "\n[txn.options]\n"
      "doorbell_batching = true\n"
      "\n[txn.pipeline]\n"
      "fetch = \"rpc\"\n"
      "\n[workload.ycsb]\n"
      "theta = 0.99\n";
  EXPECT_EQ(c.to_toml(), expected);

  Config back = parse_ok(test_schema(), c.to_toml());
  EXPECT_EQ(back.to_toml(), expected);
  EXPECT_EQ(back.get_string("run.name"), "say \"hi\"\\n");
  EXPECT_EQ(back.get_int("txn.coroutines"), 12);
}

TEST(ConfigOutput, JsonIsNestedEscapedAndComplete) {
  Config c = parse_ok(test_schema(), "[run]\nname = \"a\\\"b\\\\c\\n\\t\\u0001\\u007f é\"\n");
  EXPECT_EQ(c.get_string("run.name"), "a\"b\\c\n\t\x01\x7f é");
  EXPECT_EQ(c.to_json(),
            "{\"verbose\":false,"
            "\"rdma\":{\"mr_bytes\":1048576,\"shm\":{\"latency_us\":0.0}},"
            "\"run\":{\"name\":\"a\\\"b\\\\c\\n\\t\\u0001\\u007f é\"},"
            "\"txn\":{\"coroutines\":10,\"protocol\":\"occ\","
            "\"options\":{\"doorbell_batching\":true},\"pipeline\":{\"fetch\":\"rpc\"}},"
            "\"workload\":{\"ycsb\":{\"theta\":0.99}}}");
}

TEST(ConfigOutput, JsonSectionOrderNeverReopensAnObject) {
  // '-' sorts before '.', so ordering by whole path would put "a-b" between
  // "a" and "a.c" and open "a" twice.
  Schema s;
  s.add_int("a.x", 1, 0, 9, "").add_int("a-b.y", 2, 0, 9, "").add_int("a.c.z", 3, 0, 9, "");
  EXPECT_EQ(parse_ok(s, "").to_json(), "{\"a\":{\"x\":1,\"c\":{\"z\":3}},\"a-b\":{\"y\":2}}");
  EXPECT_EQ(parse_ok(s, "").to_toml(), "[a]\nx = 1\n\n[a.c]\nz = 3\n\n[a-b]\ny = 2\n");
}

TEST(ConfigOutput, NonFiniteFloats) {
  Schema s;
  double inf = std::numeric_limits<double>::infinity();
  s.add_float("f.hi", inf, 0, inf, "").add_float("f.lo", -inf, -inf, 0, "").add_float("f.x", 1e300, 0, inf, "");
  Config c = parse_ok(s, "");
  EXPECT_EQ(c.to_toml(), "[f]\nhi = inf\nlo = -inf\nx = 1e+300\n");
  EXPECT_EQ(c.to_json(), "{\"f\":{\"hi\":\"inf\",\"lo\":\"-inf\",\"x\":1e+300}}");
  EXPECT_EQ(parse_ok(s, c.to_toml()).to_toml(), c.to_toml());
}

class ConfigLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "rdtx_config_XXXXXX";
    ASSERT_NE(mkdtemp(dir_.data()), nullptr);
  }
  void TearDown() override {
    if (!file_.empty()) unlink(file_.c_str());
    rmdir(dir_.c_str());
  }
  std::string write(const std::string& text) {
    file_ = dir_ + "/preset.toml";
    std::ofstream(file_) << text;
    return file_;
  }
  std::string dir_, file_;
};

TEST_F(ConfigLoad, ReadsFileThenOverrides) {
  std::string path = write("[txn]\ncoroutines = 4\nprotocol = \"sundial\"\n");
  Result<Config> r = Config::load(test_schema(), path, {"txn.coroutines=6"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->get_int("txn.coroutines"), 6);
  EXPECT_EQ(r->get_string("txn.protocol"), "sundial");
  EXPECT_EQ(r->origin("txn.protocol"), path + ":3:1");
}

TEST_F(ConfigLoad, ErrorsNameTheFile) {
  std::string path = write("[txn]\ncoroutines = 2000\n");
  Result<Config> r = Config::load(test_schema(), path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, path + ":2:14: txn.coroutines = 2000 is out of range [1, 1024]");
}

TEST_F(ConfigLoad, MissingFile) {
  std::string path = dir_ + "/nope.toml";
  Result<Config> r = Config::load(test_schema(), path, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "cannot read '" + path + "': No such file or directory");
  EXPECT_EQ(r.error().code, ENOENT);
}

TEST_F(ConfigLoad, DirectoryIsNotAFile) {
  Result<Config> r = Config::load(test_schema(), dir_, {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, "cannot read '" + dir_ + "': Is a directory");
}

TEST_F(ConfigLoad, NoFileMeansDefaultsAndOverrides) {
  Result<Config> r = Config::load(test_schema(), "", {"verbose=true"});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r->get_bool("verbose"));
  EXPECT_EQ(r->get_int("txn.coroutines"), 10);
}

TEST(SchemaDescribe, ListsTypeDefaultRangeAndDoc) {
  Schema s;
  s.add_int("txn.coroutines", 10, 1, 1024, "coordinator coroutines per worker")
      .add_enum("txn.protocol", "occ", {"nowait", "occ"}, "concurrency-control protocol")
      .add_float("workload.ycsb.theta", 0.99, 0.0, 1.0, "Zipf skew")
      .add_string("run.name", "bench", "name recorded in reports")
      .add_bool("verbose", false, "");
  EXPECT_EQ(s.describe(),
            "KEY                  TYPE    DEFAULT  RANGE         DESCRIPTION\n"
            "run.name             string  \"bench\"                name recorded in reports\n"
            "txn.coroutines       int     10       [1, 1024]     coordinator coroutines per worker\n"
            "txn.protocol         enum    \"occ\"    nowait | occ  concurrency-control protocol\n"
            "verbose              bool    false\n"
            "workload.ycsb.theta  float   0.99     [0.0, 1.0]    Zipf skew\n");
}

TEST(SchemaDeathTest, KeyThatIsAlsoASection) {
  EXPECT_DEATH(Schema().add_int("txn.coroutines", 1, 0, 9, "").add_int("txn", 1, 0, 9, ""),
               "'txn' is declared as a key but is a section of other keys");
  EXPECT_DEATH(Schema().add_int("txn", 1, 0, 9, "").add_int("txn.coroutines", 1, 0, 9, ""),
               "'txn.coroutines' is declared under 'txn', which is a key");
}

TEST(SchemaDeathTest, BadDeclarations) {
  EXPECT_DEATH(Schema().add_bool("a.b", true, "").add_bool("a.b", false, ""), "'a.b' is declared twice");
  EXPECT_DEATH(Schema().add_bool("a..b", true, ""), "'a..b' is not a dotted path");
  EXPECT_DEATH(Schema().add_bool("a.b c", true, ""), "'a.b c' is not a dotted path");
  EXPECT_DEATH(Schema().add_int("a.n", 0, 1, 9, ""), "'a.n': default 0 is outside \\[1, 9\\]");
  EXPECT_DEATH(Schema().add_float("a.f", 0.5, 1, 0, ""), "'a.f': default 0.5 is outside \\[1.0, 0.0\\]");
  EXPECT_DEATH(Schema().add_enum("a.e", "x", {"y", "z"}, ""), "'a.e': default 'x' is not one of its allowed values");
}

TEST(ConfigDeathTest, GetterMisuseAbortsNamingThePath) {
  Config c = parse_ok(test_schema(), "");
  EXPECT_DEATH(c.get_int("txn.corutines"), "get_int\\(\"txn.corutines\"\\): no such key in the schema");
  EXPECT_DEATH(c.get_int("txn.protocol"), "get_int\\(\"txn.protocol\"\\): the key is a string");
  EXPECT_DEATH(c.origin("nope"), "origin\\(\"nope\"\\): no such key");
}

}  // namespace
}  // namespace rdtx::config
