#include "rdtx-bench/zk_registration.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>

#include "membership/config_store.hpp"
#include "membership/coordinator.hpp"
#include "membership/zk_client.hpp"
#include "rdtx-bench/bench_config.hpp"
#include "txn/replication.hpp"

namespace rdtx::bench {

namespace {

std::string endpoint_of(const cluster::NodeAddress& a) {
  const bool v6 = a.host.find(':') != std::string::npos;
  return (v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(a.port);
}

// Unique to this start of the run: node 0's host, pid and clock. A path
// left behind by a crashed run is then another run's, and refused as such.
std::string new_run_id() {
  char host[64] = "host";
  ::gethostname(host, sizeof host - 1);
  for (char* c = host; *c != '\0'; ++c)
    if (*c <= ' ' || *c > '~') *c = '_';
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s-%d-%llx", host, static_cast<int>(::getpid()), static_cast<unsigned long long>(us));
  return buf;
}

}  // namespace

membership::Configuration initial_configuration(const config::Config& cfg, const run::RunConfig& run,
                                                const std::string& run_id) {
  membership::Configuration c;
  c.run_id = run_id;
  c.number = 1;
  c.cm = 0;
  const auto hosts = parse_hosts(cfg.get_string("cluster.hosts"));  // checked with the configuration
  for (const cluster::NodeAddress& a : *hosts) c.members.emplace(a.id, endpoint_of(a));
  const uint32_t data_nodes = run.cluster.data_nodes();
  for (uint32_t p = 0; p < data_nodes; ++p) {
    membership::Placement pl;
    pl.primary = p;
    for (uint32_t k = 1; k < run.cluster.replicas; ++k) pl.backups.push_back(txn::backup_node(p, k, data_nodes));
    c.partitions.push_back(std::move(pl));
  }
  return c;
}

struct ZkRegistration::State {
  std::unique_ptr<membership::ZkClient> zk;
  std::unique_ptr<membership::ConfigStore> store;
  uint32_t self = 0;
};

ZkRegistration::ZkRegistration(std::unique_ptr<State> s) : state_(std::move(s)) {}

ZkRegistration::~ZkRegistration() {
  if (!state_ || state_->self != 0 || !state_->store) return;
  if (auto r = state_->store->remove_all(); !r.ok())
    std::fprintf(stderr, "rdtx-bench: warning: the run's znodes stay behind: %s\n", r.error().message.c_str());
}

Result<std::unique_ptr<ZkRegistration>> ZkRegistration::start(const config::Config& cfg, const run::RunConfig& run,
                                                              cluster::Bootstrap& boot) {
  auto addr = membership::parse_coordinator(cfg.get_string("cluster.coordinator"));  // checked with the configuration
  if (!addr.ok()) return addr.error();
  auto state = std::make_unique<State>();
  state->self = boot.self();
  // The run id comes from node 0, so that every node claims the path for
  // the same run.
  std::string mine = state->self == 0 ? new_run_id() : "";
  auto ids = boot.all_gather(std::as_bytes(std::span(mine.data(), mine.size())), "zk run id");
  if (!ids.ok()) return ids.error();
  const auto& id0 = (*ids)[0];
  const std::string run_id(reinterpret_cast<const char*>(id0.data()), id0.size());

  membership::ZkOptions o;
  o.servers = addr->connect_string();
  auto zk = membership::ZkClient::connect(o);
  if (!zk.ok()) return zk.error();
  state->zk = std::move(*zk);
  auto store = membership::ConfigStore::open(*state->zk, addr->root, run_id);
  if (!store.ok()) return store.error();
  state->store = std::make_unique<membership::ConfigStore>(std::move(*store));
  // From here on, an error return destroys `reg`: node 0 removes what it
  // wrote (never another run's: open() refused that path above).
  std::unique_ptr<ZkRegistration> reg(new ZkRegistration(std::move(state)));
  State& st = *reg->state_;
  const membership::Configuration first = initial_configuration(cfg, run, run_id);
  if (st.self == 0)
    if (auto r = st.store->create_initial(first); !r.ok()) return r.error();
  RDTX_TRY(boot.barrier("zk configuration"));
  RDTX_TRY(st.store->register_member(first, st.self));
  RDTX_TRY(boot.barrier("zk members"));
  if (st.self == 0) {
    auto regs = st.store->registered();
    if (!regs.ok()) return regs.error();
    for (const auto& [id, endpoint] : first.members)
      if (!regs->contains(id))
        return make_error(EPROTO, "zookeeper %s: zk path %s/members: node %u did not register", o.servers.c_str(),
                          addr->root.c_str(), id);
    reg->summary_ = "configuration 1 of run " + run_id + " in zookeeper " + o.servers + " at " + addr->root +
                    ": CM node 0, " + std::to_string(regs->size()) + " members registered, " +
                    std::to_string(first.partitions.size()) + " partitions";
  } else {
    reg->summary_ = "node " + std::to_string(st.self) + " registered in zookeeper " + o.servers + " at " + addr->root +
                    "/members/" + std::to_string(st.self);
  }
  return reg;
}

}  // namespace rdtx::bench
