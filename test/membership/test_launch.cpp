// lib/membership/launcher: the node id, the number of nodes and the run id
// of a process started by mpirun (Open MPI), srun (Slurm) or a PMI launcher,
// from fake environments; malformed variables are refused naming them.
#include <gtest/gtest.h>

#include <map>

#include "membership/launcher.hpp"

namespace rdtx::membership {
namespace {

Result<std::optional<Launch>> detect(const std::map<std::string, std::string>& env, uint32_t max = 1024) {
  return detect_launch(max, [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(Launch, NoLauncherIsNone) {
  auto l = detect({{"PATH", "/bin"}, {"OMPI_COMM_WORLD_SIZE", "4"}});
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_FALSE(l->has_value());
}

TEST(Launch, OpenMpi) {
  // As mpirun 4.1 sets them (the second of two ranks).
  auto l = detect({{"OMPI_COMM_WORLD_RANK", "1"},
                   {"OMPI_COMM_WORLD_SIZE", "2"},
                   {"OMPI_MCA_ess_base_jobid", "1530068993"},
                   {"PMIX_NAMESPACE", "1530068993"},
                   {"PMIX_RANK", "1"}});
  ASSERT_TRUE(l.ok()) << l.error().message;
  ASSERT_TRUE(l->has_value());
  EXPECT_EQ((*l)->launcher, "Open MPI");
  EXPECT_EQ((*l)->rank, 1u);
  EXPECT_EQ((*l)->size, 2u);
  EXPECT_EQ((*l)->run_id(), "ompi-1530068993");
}

TEST(Launch, SlurmWithItsStep) {
  auto l = detect({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_JOB_ID", "4711"}, {"SLURM_STEP_ID", "2"}});
  ASSERT_TRUE(l.ok()) << l.error().message;
  ASSERT_TRUE(l->has_value());
  EXPECT_EQ((*l)->launcher, "Slurm");
  EXPECT_EQ((*l)->rank, 3u);
  EXPECT_EQ((*l)->size, 8u);
  EXPECT_EQ((*l)->run_id(), "slurm-4711.2");
}

TEST(Launch, OpenMpiInsideASlurmAllocationCountsItsOwnRanks) {
  auto l = detect({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_JOB_ID", "9"},
                   {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_MCA_ess_base_jobid", "77"}});
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ((*l)->launcher, "Open MPI");
  EXPECT_EQ((*l)->rank, 2u);
}

TEST(Launch, Pmi) {
  auto l = detect({{"PMI_RANK", "0"}, {"PMI_SIZE", "3"}, {"PMI_KVSNAME", "kvs_123_0"}});
  ASSERT_TRUE(l.ok()) << l.error().message;
  EXPECT_EQ((*l)->run_id(), "pmi-kvs_123_0");
}

TEST(Launch, RefusesMalformedVariablesNamingThem) {
  const std::pair<std::map<std::string, std::string>, const char*> cases[] = {
      {{{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "1"}},
       "OMPI_COMM_WORLD_RANK = 'x' is not a rank"},
      {{{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "1"}},
       "is not a rank"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_MCA_ess_base_jobid", "1"}}, "OMPI_COMM_WORLD_SIZE is not"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}, {"OMPI_MCA_ess_base_jobid", "1"}},
       "is not a number of processes 1..64"},
      {{{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "65"}, {"OMPI_MCA_ess_base_jobid", "1"}},
       "is not a number of processes 1..64"},
      {{{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "1"}},
       "rank 2 (OMPI_COMM_WORLD_RANK) is not below the 2 processes"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}, "SLURM_JOB_ID, the id of the launch, is not"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_JOB_ID", "a b"}}, "is not a plain id"},
      {{{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"PMI_KVSNAME", "x/y"}}, "is not a plain id"},
  };
  for (const auto& [env, want] : cases) {
    auto l = detect(env, 64);
    ASSERT_FALSE(l.ok()) << want;
    EXPECT_EQ(l.error().code, EINVAL);
    EXPECT_NE(l.error().message.find(want), std::string::npos) << l.error().message;
  }
}

}  // namespace
}  // namespace rdtx::membership
