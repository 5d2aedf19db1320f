// The launcher that started this process, from its environment: Open MPI's
// mpirun, Slurm's srun, or an MPICH-style (Hydra, PMI) launcher. Each gives
// every process its rank among the processes it started, their number, and
// an id of the launch, which rdtx-bench turns into the node id, the number
// of nodes and the run id of a process cluster whose endpoints rendezvous in
// ZooKeeper (doc/deployment.md "Starting under mpirun or srun").
//
//   Open MPI   OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_MCA_ess_base_jobid (or PMIX_NAMESPACE)
//   Slurm      SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS), SLURM_JOB_ID and SLURM_STEP_ID
//   PMI        PMI_RANK, PMI_SIZE, PMI_KVSNAME (MPICH's Hydra)
//
// Open MPI's variables come first: an mpirun inside a Slurm allocation sets
// both, and its ranks are the ones that count.
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/result.hpp"

namespace rdtx::membership {

struct Launch {
  std::string launcher;  // "Open MPI", "Slurm", "PMI"
  uint32_t rank = 0;
  uint32_t size = 0;
  std::string job;  // the launch's id, as the launcher gives it
  // The run id of the launch: "<launcher tag>-<job>" ("ompi-1530068993",
  // "slurm-4711.0"), the same in every process of it and new with each.
  std::string run_id() const;
};

// Reads the variables through `getenv` (std::getenv by default). nullopt:
// no launcher's rank variable is set. EINVAL naming the variable when one is
// set but malformed: not a number, a size of 0 or above `max_size`, a rank
// not below the size, a missing size or job id.
Result<std::optional<Launch>> detect_launch(uint32_t max_size,
                                            const std::function<const char*(const char*)>& getenv = nullptr);

}  // namespace rdtx::membership
