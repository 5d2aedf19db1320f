// rdtx-bench --print-config: its output is a config file that loads back to
// the same configuration, for every preset in conf/ (issue 46 item 5).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "rdtx-bench/bench_config.hpp"
#include "txn/options.hpp"

using namespace rdtx;

namespace {

std::vector<std::string> presets() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(RDTX_CONF_DIR))
    if (e.is_regular_file() && e.path().extension() == ".toml") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

// Loaded back, the printed file gives every key the same value and the same
// meaning (a default some code reads differently from the same value given,
// as a pipeline stage the protocol maps to its own primitive, keeps its
// meaning). Without to_config_file() (every key printed, as to_toml()
// does) no preset but the occ ones loads back.
TEST(PrintConfig, EveryPresetRoundTrips) {
  const config::Schema schema = bench::make_schema();
  const std::vector<std::string> files = presets();
  ASSERT_GT(files.size(), 50u) << "presets under " << RDTX_CONF_DIR;
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    auto cfg = config::Config::load(schema, f, {});
    ASSERT_TRUE(cfg.ok()) << cfg.error().message;
    const std::string printed = cfg->to_config_file(schema);
    auto back = config::Config::parse(schema, printed, "pc.toml", {});
    ASSERT_TRUE(back.ok()) << back.error().message << "\n" << printed;
    EXPECT_EQ(back->flat(), cfg->flat());
    // A key the preset gave is given again; a default the checks refuse
    // as given stays a default (a comment).
    for (const auto& [path, spec] : schema.keys()) {
      if (cfg->origin(path) != "default") {
        EXPECT_NE(back->origin(path), "default") << path;
      }
    }
    // What reads a default differently from the same value given (a
    // pipeline stage the protocol maps to its own primitive) reads the same.
    const txn::Options a = txn::options_from(*cfg), b = txn::options_from(*back);
    for (int s = 0; s < static_cast<int>(txn::Stage::kCount_); ++s)
      EXPECT_EQ(a.pipeline[s], b.pipeline[s]) << txn::to_string(static_cast<txn::Stage>(s));
    EXPECT_EQ(a.protocol_settings, b.protocol_settings);
    EXPECT_EQ(a.input_fingerprint, b.input_fingerprint);
    EXPECT_EQ(back->to_config_file(schema), printed);
  }
}

// A key that does not apply is a comment: visible, not loaded.
TEST(PrintConfig, KeysThatDoNotApplyAreComments) {
  const config::Schema schema = bench::make_schema();
  auto cfg = config::Config::parse(schema, "[txn]\nprotocol = \"2pl\"\n", "t.toml", {});
  ASSERT_TRUE(cfg.ok()) << cfg.error().message;
  const std::string printed = cfg->to_config_file(schema);
  EXPECT_NE(printed.find("\n# virtual_cost = "), std::string::npos) << printed;
  EXPECT_NE(printed.find("\nprotocol = \"2pl\"\n"), std::string::npos) << printed;
  EXPECT_NE(printed.find("\nvirtual_time = false\n"), std::string::npos) << printed;
}
