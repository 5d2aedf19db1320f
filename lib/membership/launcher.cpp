#include "membership/launcher.hpp"

#include <cerrno>
#include <cstdlib>

namespace rdtx::membership {

namespace {

struct Vars {
  const char* name;  // the launcher
  const char* tag;   // in the run id
  const char* rank;
  const char* size[2];  // the first set is taken
  const char* job[2];
  const char* step;  // appended to the job id with a '.', if set
};

constexpr Vars kLaunchers[] = {
    {"Open MPI", "ompi", "OMPI_COMM_WORLD_RANK", {"OMPI_COMM_WORLD_SIZE", nullptr},
     {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"}, nullptr},
    {"Slurm", "slurm", "SLURM_PROCID", {"SLURM_NTASKS", "SLURM_NPROCS"}, {"SLURM_JOB_ID", "SLURM_JOBID"},
     "SLURM_STEP_ID"},
    {"PMI", "pmi", "PMI_RANK", {"PMI_SIZE", nullptr}, {"PMI_KVSNAME", nullptr}, nullptr},
};

bool parse_u32(const char* s, uint32_t& out) {
  if (s == nullptr || *s < '0' || *s > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0' || v > UINT32_MAX) return false;
  out = static_cast<uint32_t>(v);
  return true;
}

// Printable ASCII without spaces: it goes into a znode's text and a path.
bool plain(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s)
    if (c <= ' ' || c > '~' || c == '/') return false;
  return true;
}

}  // namespace

std::string Launch::run_id() const {
  for (const Vars& v : kLaunchers)
    if (launcher == v.name) return std::string(v.tag) + "-" + job;
  return "launch-" + job;
}

Result<std::optional<Launch>> detect_launch(uint32_t max_size, const std::function<const char*(const char*)>& getenv) {
  auto get = [&](const char* name) -> const char* {
    if (name == nullptr) return nullptr;
    return getenv ? getenv(name) : std::getenv(name);
  };
  for (const Vars& v : kLaunchers) {
    const char* rank = get(v.rank);
    if (rank == nullptr) continue;
    Launch l;
    l.launcher = v.name;
    if (!parse_u32(rank, l.rank))
      return make_error(EINVAL, "%s launch: %s = '%s' is not a rank", v.name, v.rank, rank);
    const char* size_name = get(v.size[0]) != nullptr ? v.size[0] : v.size[1];
    const char* size = get(size_name);
    if (size == nullptr) return make_error(EINVAL, "%s launch: %s is set but %s is not", v.name, v.rank, v.size[0]);
    if (!parse_u32(size, l.size) || l.size == 0 || l.size > max_size)
      return make_error(EINVAL, "%s launch: %s = '%s' is not a number of processes 1..%u", v.name, size_name, size,
                        max_size);
    if (l.rank >= l.size)
      return make_error(EINVAL, "%s launch: rank %u (%s) is not below the %u processes (%s)", v.name, l.rank, v.rank,
                        l.size, size_name);
    const char* job_name = get(v.job[0]) != nullptr ? v.job[0] : v.job[1];
    const char* job = get(job_name);
    if (job == nullptr)
      return make_error(EINVAL, "%s launch: %s is set but %s, the id of the launch, is not", v.name, v.rank, v.job[0]);
    l.job = job;
    if (const char* step = get(v.step)) l.job += std::string(".") + step;
    if (!plain(l.job))
      return make_error(EINVAL, "%s launch: %s = '%s' is not a plain id (printable, no spaces or '/', 128 at most)",
                        v.name, job_name, job);
    return std::optional<Launch>(std::move(l));
  }
  return std::optional<Launch>();
}

}  // namespace rdtx::membership
