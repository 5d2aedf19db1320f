#include "rdtx-bench/zk_registration.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <thread>

#include "membership/config_store.hpp"
#include "membership/coordinator.hpp"
#include "membership/launcher.hpp"
#include "membership/lease.hpp"
#include "membership/zk_client.hpp"
#include "rdtx-bench/bench_config.hpp"
#include "runtime/shutdown.hpp"
#include "txn/replication.hpp"
#include "txn/types.hpp"

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

namespace {

// A free TCP port on `host`'s first address: bound to port 0 and let go.
// (Another process may take it before the bootstrap binds it; the
// bootstrap's "port in use" error then names it.)
Result<uint16_t> free_port(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0)
    return make_error(EINVAL, "cluster.host '%s' does not resolve: %s", host.c_str(), ::gai_strerror(rc));
  const int fd = ::socket(res->ai_family, SOCK_STREAM, 0);
  sockaddr_storage sa{};
  socklen_t len = static_cast<socklen_t>(res->ai_addrlen);
  std::memcpy(&sa, res->ai_addr, res->ai_addrlen);
  ::freeaddrinfo(res);
  if (fd < 0) return make_error(errno, "a socket for cluster.host '%s': %s", host.c_str(), std::strerror(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return make_error(err, "cannot bind a port on cluster.host '%s' (is it an address of this machine?): %s",
                      host.c_str(), std::strerror(err));
  }
  ::close(fd);
  return ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
}

}  // namespace

Result<LaunchRendezvous> rendezvous(const config::Config& cfg, int node_arg) {
  auto launch = membership::detect_launch(txn::kMaxNodes);
  if (!launch.ok()) return launch.error();
  if (!launch->has_value())
    return make_error(EINVAL,
                      "cluster.hosts is empty and no launcher started this process: list every node's host:port in "
                      "cluster.hosts, or start the nodes with mpirun or srun, which give each its node id, and let "
                      "them rendezvous in ZooKeeper (cluster.coordinator)");
  const membership::Launch& l = **launch;
  const std::string& coordinator = cfg.get_string("cluster.coordinator");
  if (coordinator.empty())
    return make_error(EINVAL,
                      "started by %s (rank %u of %u) without cluster.hosts: the nodes' endpoints rendezvous in "
                      "ZooKeeper: set cluster.coordinator (zk://host:port/path), or list the nodes in cluster.hosts",
                      l.launcher.c_str(), l.rank, l.size);
  if (node_arg >= 0 && static_cast<uint32_t>(node_arg) != l.rank)
    return make_error(EINVAL, "--node %d, but %s started this process as rank %u: leave --node out under a launcher",
                      node_arg, l.launcher.c_str(), l.rank);
  LaunchRendezvous out;
  out.node = static_cast<int>(l.rank);
  out.run_id = l.run_id();
  const int64_t nodes = cfg.get_int("cluster.nodes");
  if (cfg.origin("cluster.nodes") != "default" && nodes != static_cast<int64_t>(l.size))
    return make_error(EINVAL, "cluster.nodes = %lld (%s), but %s started %u processes: one process per node",
                      static_cast<long long>(nodes), cfg.origin("cluster.nodes").c_str(), l.launcher.c_str(), l.size);
  out.overrides.push_back("cluster.nodes=" + std::to_string(l.size));
  std::string host = cfg.get_string("cluster.host");
  if (host.empty()) {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0)
      return make_error(errno, "cluster.host is empty and the host name is unknown: %s", std::strerror(errno));
    host = name;
  }
  auto port = free_port(host);
  if (!port.ok()) return port.error();
  const bool v6 = host.find(':') != std::string::npos;
  const std::string endpoint = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(*port);

  auto addr = membership::parse_coordinator(coordinator);  // checked with the configuration
  if (!addr.ok()) return addr.error();
  membership::ZkOptions o;
  o.servers = addr->connect_string();
  auto zk = membership::ZkClient::connect(o);
  if (!zk.ok()) return zk.error();
  auto store = membership::ConfigStore::open(**zk, addr->root, out.run_id);
  if (!store.ok()) return store.error();
  RDTX_TRY(store->publish_endpoint(l.rank, endpoint));
  const auto timeout_ms = static_cast<uint64_t>(cfg.get_float("cluster.connect_timeout_s") * 1000);
  auto all = store->endpoints(l.size, timeout_ms, [] { return runtime::shutdown_requested(); });
  if (!all.ok()) return all.error();
  std::string hosts;
  for (const std::string& e : *all) hosts += (hosts.empty() ? "" : ",") + e;
  out.overrides.push_back("cluster.hosts=" + hosts);
  out.summary = "started by " + l.launcher + " as node " + std::to_string(l.rank) + " of " + std::to_string(l.size) +
                " (run " + out.run_id + "); endpoints from zookeeper " + o.servers + " at " + addr->root +
                "/endpoints: " + hosts;
  return out;
}

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
  cluster::Bootstrap* boot = nullptr;
  membership::Configuration config;  // the newest this node acted on
  membership::LeaseOptions lease;
  std::unique_ptr<membership::LeaseAgent> agent;
  cluster::Cluster* cluster = nullptr;  // its RPC datagrams carry the configuration number
  std::thread manager;
  std::atomic<bool> stopping{false};
  bool started = false, stopped = false;  // the main thread's
  std::optional<LeaseFigures> figures;    // set by stop()
  std::mutex mu;  // guards verdict
  std::optional<Error> verdict;
  Recover recover;  // set before start()

  void set_verdict(Error e) {
    std::lock_guard lk(mu);
    if (!verdict) verdict = std::move(e);
  }
  bool has_verdict() {
    std::lock_guard lk(mu);
    return verdict.has_value();
  }
  void manage();
  void reconfigure(const std::vector<membership::Suspicion>& suspects);
  void adopt(const membership::Configuration& next);
  bool elect();
  Error fenced_error(const std::string& more) const;
  std::vector<uint32_t> await_acks(uint64_t written_at);
  void refuse(const std::vector<uint32_t>& gone);
  Error end_of_run(const membership::Configuration& next, const std::string& removed) const;
  // Whether the configuration leaves every partition a primary and this
  // run can resolve a removed node's transactions (the run goes on).
  bool goes_on() const;
  void after_removal(const std::vector<uint32_t>& gone);
};

namespace {

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// CLOCK_REALTIME, in seconds, of a time of the lease agents' clock: to line
// up with a kill's time in another process's log.
double wall_of(uint64_t lease_ns) {
  const uint64_t mono = membership::lease_clock_ns();
  const double wall =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return wall - (static_cast<double>(mono) - static_cast<double>(lease_ns)) / 1e9;
}

std::string nodes_text(const std::vector<uint32_t>& ids) {
  std::string s;
  for (uint32_t id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

}  // namespace

// What configuration `next` leaves the run: partitions without a live
// primary end it (a backup taking over is recovery, issue 48); a run that
// goes on without a member is not there yet either.
Error ZkRegistration::State::end_of_run(const membership::Configuration& next, const std::string& removed) const {
  const auto lost = membership::lost_partitions(next);
  if (!lost.empty())
    return make_error(EHOSTDOWN,
                      "membership: configuration %llu removed %s, which leaves partition%s %s without a live primary "
                      "(a backup taking over is recovery, not implemented yet): the run ends",
                      static_cast<unsigned long long>(next.number), removed.c_str(), lost.size() > 1 ? "s" : "",
                      nodes_text(lost).c_str());
  return make_error(ENOTSUP,
                    "membership: configuration %llu removed %s; no partition was lost, but this run cannot resolve "
                    "a removed node's transactions: the run ends",
                    static_cast<unsigned long long>(next.number), removed.c_str());
}

// Configuration `config` removed `gone`: a lost partition ends the run;
// otherwise every survivor resolves the removed nodes' transactions
// (txn/recovery.hpp) through the store, and the run goes on without them.
bool ZkRegistration::State::goes_on() const { return membership::lost_partitions(config).empty() && recover; }

void ZkRegistration::State::after_removal(const std::vector<uint32_t>& gone) {
  const std::string removed = "node" + std::string(gone.size() > 1 ? "s " : " ") + nodes_text(gone);
  if (!goes_on()) return set_verdict(end_of_run(config, removed));
  uint64_t mask = 0;
  for (uint32_t n : gone) mask |= n < 64 ? uint64_t{1} << n : 0;
  std::vector<uint32_t> members;
  for (const auto& [id, endpoint] : config.members) members.push_back(id);
  const uint64_t t0 = membership::lease_clock_ns();
  const uint64_t number = config.number;
  // Each phase waits for every member, at most a few leases (a member that
  // does not answer is suspected meanwhile, and this recovery fails).
  const uint64_t timeout_ms = std::max<uint64_t>(1000, 8 * lease.lease_ns / 1'000'000);
  auto line = recover(mask, [&](const std::string& phase, const std::string& mine) {
    return store->exchange(number, phase, self, mine, members, timeout_ms,
                           [this] { return stopping.load(std::memory_order_acquire); });
  });
  if (!line.ok())
    return set_verdict(make_error(line.error().code,
                                  "membership: configuration %llu removed %s; resolving its transactions failed: %s: "
                                  "the run ends",
                                  static_cast<unsigned long long>(number), removed.c_str(),
                                  line.error().message.c_str()));
  for (uint32_t n : gone)
    if (auto r = boot->exclude(n); !r.ok())
      return set_verdict(make_error(r.error().code, "membership: %s", r.error().message.c_str()));
  std::fprintf(stderr,
               "rdtx-bench: membership: node %u resolved the transactions of %s %.1f ms after adopting "
               "configuration %llu: %s; the run goes on with %zu members\n",
               self, removed.c_str(), ms(membership::lease_clock_ns() - t0), static_cast<unsigned long long>(number),
               line->c_str(), members.size());
}

// The CM: configuration c+1 without the suspects, written by
// compare-and-set, announced in the grants, acknowledged by every member.
void ZkRegistration::State::reconfigure(const std::vector<membership::Suspicion>& suspects) {
  std::vector<uint32_t> gone;
  std::string why;
  for (const auto& s : suspects) {
    gone.push_back(s.node);
    char buf[200];
    std::snprintf(buf, sizeof buf, "%snode %u (no renewal granted for %.1f ms, lease %.1f ms; %llu renewals before)",
                  why.empty() ? "" : ", ", s.node, ms(s.since_grant_ns), ms(lease.lease_ns),
                  static_cast<unsigned long long>(s.renewals));
    why += buf;
  }
  const uint64_t suspected = suspects.front().at_ns;
  std::fprintf(stderr, "rdtx-bench: membership: suspected %s at %.6f\n", why.c_str(), wall_of(suspected));
  auto cur = store->read();
  if (!cur.ok()) return set_verdict(cur.error());
  if (cur->config.cm != self) {
    // Deposed: while this node was stopped, a member took over.
    runtime::request_halt();
    return set_verdict(make_error(ECANCELED,
                                  "membership: node %u is no longer the CM: configuration %llu names node %u (a "
                                  "member took over while this node did not run); it stops serving",
                                  self, static_cast<unsigned long long>(cur->config.number), cur->config.cm));
  }
  std::erase_if(gone, [&](uint32_t n) { return !cur->config.members.contains(n); });
  if (gone.empty()) return;
  auto next = membership::without(cur->config, gone);
  if (!next.ok()) return set_verdict(next.error());
  auto written = store->propose(*cur, *next);
  if (!written.ok()) return set_verdict(written.error());
  const uint64_t written_at = membership::lease_clock_ns();
  config = *next;
  // This node refuses configuration c's datagrams, and the suspects'
  // one-sided requests, from now on.
  cluster->set_configuration(static_cast<uint32_t>(config.number));
  refuse(gone);
  agent->announce(config.number);
  // Every member acknowledges within a few leases, or is suspected too.
  // A run that goes on resolves the removed nodes' transactions at once:
  // every member that takes part has adopted c+1 and refused the removed
  // nodes, which is what its acknowledgement would say (awaited after, for
  // the log line).
  const bool on = goes_on();
  if (on) after_removal(gone);
  const std::vector<uint32_t> missing = await_acks(written_at);
  const uint64_t acked_at = membership::lease_clock_ns();
  std::fprintf(stderr,
               "rdtx-bench: membership: configuration %llu (members %zu, CM node %u) written %.1f ms after the "
               "suspicion; %s %.1f ms after it was written\n",
               static_cast<unsigned long long>(config.number), config.members.size(), config.cm,
               ms(written_at - suspected),
               missing.empty() ? "acknowledged by every member"
                               : ("not acknowledged by node(s) " + nodes_text(missing) + " within").c_str(),
               ms(acked_at - written_at));
  if (!on) after_removal(gone);
}

// Every worker of this node disconnects its RC QPs to the removed nodes
// (their one-sided requests fail), on its own thread, within a lease.
void ZkRegistration::State::refuse(const std::vector<uint32_t>& gone) {
  // A halted node's loops no longer run (nor serve): nothing to wait for.
  const bool halted = runtime::halt_requested();
  if (const uint32_t behind = cluster->remove_nodes(gone, halted ? 0 : lease.lease_ns); behind != 0 && !halted)
    std::fprintf(stderr,
                 "rdtx-bench: membership: warning: %u worker(s) of node %u did not disconnect their QPs to node(s) %s "
                 "within a lease (their loops not running?)\n",
                 behind, self, nodes_text(gone).c_str());
}

// A member: a newer configuration, written by its CM or by a new one, is
// acted on and acknowledged (to whichever CM it names).
void ZkRegistration::State::adopt(const membership::Configuration& next) {
  std::vector<uint32_t> gone;
  for (const auto& [id, endpoint] : config.members)
    if (!next.members.contains(id)) gone.push_back(id);
  config = next;
  if (!config.members.contains(self)) {
    runtime::request_halt();
    return set_verdict(make_error(ECANCELED, "membership: node %u was removed from the configuration (configuration %llu)",
                                  self, static_cast<unsigned long long>(config.number)));
  }
  if (agent->cm() != config.cm) agent->switch_cm(config.cm);
  // Configuration c's datagrams, and the removed nodes' one-sided
  // requests, refused from now on; then acknowledged.
  cluster->set_configuration(static_cast<uint32_t>(config.number));
  refuse(gone);
  agent->acknowledge(config.number);
  // Going on: the resolution at once (the acknowledgement goes out with the
  // next renewal meanwhile).
  if (goes_on()) {
    std::fprintf(stderr,
                 "rdtx-bench: membership: node %u acknowledged configuration %llu (CM node %u, without node(s) %s) at "
                 "%.6f\n",
                 self, static_cast<unsigned long long>(config.number), config.cm, nodes_text(gone).c_str(),
                 wall_of(membership::lease_clock_ns()));
    return after_removal(gone);
  }
  // The acknowledgement goes out with the next renewal: wait for the one
  // after it, so that the run (which this configuration ends) does not stop
  // the lease agent first.
  const uint64_t sent = agent->renewals_sent(), bound = membership::lease_clock_ns() + 2 * lease.lease_ns;
  while (agent->renewals_sent() < sent + 2 && membership::lease_clock_ns() < bound)
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  std::fprintf(stderr,
               "rdtx-bench: membership: node %u acknowledged configuration %llu (CM node %u, without node(s) %s) at "
               "%.6f\n",
               self, static_cast<unsigned long long>(config.number), config.cm, nodes_text(gone).c_str(),
               wall_of(membership::lease_clock_ns()));
  after_removal(gone);
}

// A member whose CM's beat stood still for a lease: it tries to become the
// CM of configuration c+1 without the old CM, by the store's compare-and-set
// (of several members that try, one wins; the others adopt its
// configuration). Returns whether anything was decided.
Error ZkRegistration::State::fenced_error(const std::string& more) const {
  return make_error(ETIMEDOUT,
                    "membership: node %u fenced itself: %s; it stops serving, and its CM removes it from the "
                    "configuration%s",
                    self, agent->fence_reason().c_str(), more.c_str());
}

bool ZkRegistration::State::elect() {
  auto cur = store->read();
  if (!cur.ok()) {
    set_verdict(cur.error().code == ENOENT
                    ? fenced_error("; the run's configuration is gone from the store (its CM ended the run)")
                    : cur.error());
    return true;
  }
  if (cur->config.number > config.number) {
    adopt(cur->config);
    return true;
  }
  const uint32_t old = config.cm;
  const uint64_t silent = agent->cm_silent_ns();
  membership::Configuration mine = cur->config;
  mine.cm = self;
  auto next = membership::without(mine, {old});
  if (!next.ok()) {
    set_verdict(next.error());
    return true;
  }
  auto written = store->propose(*cur, *next);
  if (!written.ok()) {
    if (written.error().code == ESTALE) return false;  // another member won: adopt its configuration next round
    set_verdict(written.error());
    return true;
  }
  const uint64_t written_at = membership::lease_clock_ns();
  std::fprintf(stderr,
               "rdtx-bench: membership: node %u takes over as CM: the beat of CM node %u stood still for %.1f ms "
               "(lease %.1f ms); configuration %llu without it written at %.6f\n",
               self, old, ms(silent), ms(lease.lease_ns), static_cast<unsigned long long>(next->number),
               wall_of(written_at));
  config = *next;
  agent->switch_cm(self);
  agent->forget(old);
  cluster->set_configuration(static_cast<uint32_t>(config.number));
  refuse({old});
  agent->announce(config.number);
  const std::vector<uint32_t> missing = await_acks(written_at);
  std::fprintf(stderr, "rdtx-bench: membership: configuration %llu (members %zu, CM node %u) %s %.1f ms after it was written\n",
               static_cast<unsigned long long>(config.number), config.members.size(), config.cm,
               missing.empty() ? "acknowledged by every member"
                               : ("not acknowledged by node(s) " + nodes_text(missing) + " within").c_str(),
               ms(membership::lease_clock_ns() - written_at));
  set_verdict(end_of_run(config, "node " + std::to_string(old) + " (the CM)"));
  return true;
}

// The CM: the members of its configuration that have not acknowledged it,
// once all have or four leases after `written_at`.
std::vector<uint32_t> ZkRegistration::State::await_acks(uint64_t written_at) {
  const uint64_t wait_until = written_at + 4 * lease.lease_ns;
  std::vector<uint32_t> missing;
  for (;;) {
    missing.clear();
    for (const auto& [id, endpoint] : config.members)
      if (agent->acknowledged(id) < config.number) missing.push_back(id);
    if (missing.empty() || membership::lease_clock_ns() > wait_until || stopping.load()) return missing;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

void ZkRegistration::State::manage() {
  uint64_t fenced_seen = 0, next_read = 0;
  while (!stopping.load(std::memory_order_acquire)) {
    if (!has_verdict()) {
      const uint64_t now = membership::lease_clock_ns();
      if (agent->is_cm()) {
        if (auto s = agent->take_suspicions(); !s.empty()) reconfigure(s);
      } else if (agent->fenced()) {
        // Fenced (halted already): either the CM is gone, and a member takes
        // over, or it runs and removes this node; the store says which.
        if (fenced_seen == 0) {
          fenced_seen = now;
          std::fprintf(stderr, "rdtx-bench: membership: node %u fenced itself at %.6f: %s\n", self,
                       wall_of(agent->fenced_at_ns()), agent->fence_reason().c_str());
        }
        // A take-over needs the CM silent for a lease and a majority of the
        // configuration's members (this one included) whose beats move.
        const uint32_t live = agent->live_nodes(lease.lease_ns);
        if (agent->cm_silent_ns() > lease.lease_ns && 2 * live > config.members.size()) {
          (void)elect();
        } else if (now >= next_read) {
          next_read = now + lease.lease_ns / 8;
          auto cur = store->read();
          if (cur.ok() && cur->config.number > config.number)
            adopt(cur->config);
          else if (!cur.ok() && cur.error().code == ENOENT)
            set_verdict(fenced_error("; the run's configuration is gone from the store (its CM ended the run)"));
        }
        if (!has_verdict() && now - fenced_seen > 8 * lease.lease_ns)
          set_verdict(fenced_error(agent->cm_silent_ns() > lease.lease_ns
                                       ? "; its CM is silent, but only " + std::to_string(live) + " of the " +
                                             std::to_string(config.members.size()) +
                                             " members answer, no majority to take over with"
                                       : std::string()));
      } else if (const uint64_t a = agent->announced(); a > config.number) {
        if (auto cur = store->read(); !cur.ok())
          set_verdict(cur.error());
        else if (cur->config.number >= a)
          adopt(cur->config);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Result<void> ZkRegistration::attach(cluster::Cluster& c) {
  State& st = *state_;
  auto a = membership::LeaseAgent::create(*c.node(st.self).device, st.self, c.nodes(), st.config.cm, st.lease,
                                          [&st](std::span<const std::byte> m, std::string_view what) {
                                            return st.boot->all_gather(m, what);
                                          });
  if (!a.ok()) return a.error();
  st.agent = std::move(*a);
  st.cluster = &c;
  c.set_configuration(static_cast<uint32_t>(st.config.number));
  c.watch_removals();
  return {};
}

void ZkRegistration::start() {
  State& st = *state_;
  if (!st.agent || st.started) return;
  st.started = true;
  st.agent->start();
  st.stopping.store(false);
  st.manager = std::thread([&st] { st.manage(); });
}

std::optional<LeaseFigures> ZkRegistration::lease_figures() const { return state_->figures; }

void ZkRegistration::set_recovery(Recover recover) { state_->recover = std::move(recover); }

Error ZkRegistration::await_verdict() {
  // A fenced member decides within eight leases (its CM removes it, or a
  // member takes over and removes the CM); then the store's answers.
  const uint64_t end = membership::lease_clock_ns() + 12 * state_->lease.lease_ns + 10'000'000'000ull;
  while (membership::lease_clock_ns() < end) {
    if (auto v = verdict()) return *v;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return make_error(ETIMEDOUT, "membership: node %u halted and no verdict came within %.1f s", state_->self,
                    (12 * state_->lease.lease_ns + 10'000'000'000ull) / 1e9);
}

std::optional<Error> ZkRegistration::verdict() {
  std::lock_guard lk(state_->mu);
  return state_->verdict;
}

void ZkRegistration::stop() {
  State& st = *state_;
  if (!st.agent || !st.started || st.stopped) return;
  st.stopped = true;
  st.stopping.store(true, std::memory_order_release);
  if (st.manager.joinable()) st.manager.join();
  st.agent->stop();
  // The lease figures: renewals the CM saw late (more than half a lease
  // after the one before), or this member's longest gap between two.
  const char* prio = st.agent->realtime() ? "SCHED_FIFO" : "normal priority";
  LeaseFigures f;
  f.lease_ms = ms(st.lease.lease_ns);
  f.cm = st.agent->is_cm();
  f.realtime = st.agent->realtime();
  if (st.agent->is_cm()) {
    std::string per;
    uint64_t late = 0;
    for (const auto& [id, endpoint] : st.config.members) {
      if (id == st.self) continue;
      const auto r = st.agent->renewal_stats(id);
      late += r.late;
      f.renewals += r.renewals;
      f.longest_gap_ms = std::max(f.longest_gap_ms, ms(r.max_gap_ns));
      char buf[128];
      std::snprintf(buf, sizeof buf, "%snode %u %llu renewals, %llu late, longest gap %.1f ms", per.empty() ? "" : "; ",
                    id, static_cast<unsigned long long>(r.renewals), static_cast<unsigned long long>(r.late),
                    ms(r.max_gap_ns));
      per += buf;
    }
    f.late = late;
    std::fprintf(stderr, "rdtx-bench: membership: leases of %.1f ms (CM node %u, %s): %llu late renewals: %s\n",
                 ms(st.lease.lease_ns), st.self, prio, static_cast<unsigned long long>(late), per.c_str());
  } else {
    std::fprintf(stderr,
                 "rdtx-bench: membership: node %u sent %llu renewals (%s), longest gap between two %.1f ms, %llu "
                 "verbs failed\n",
                 st.self, static_cast<unsigned long long>(st.agent->renewals_sent()), prio,
                 ms(st.agent->max_send_gap_ns()), static_cast<unsigned long long>(st.agent->verb_errors()));
    f.renewals = st.agent->renewals_sent();
    f.longest_gap_ms = ms(st.agent->max_send_gap_ns());
  }
  st.figures = f;
}

ZkRegistration::ZkRegistration(std::unique_ptr<State> s) : state_(std::move(s)) {}

ZkRegistration::~ZkRegistration() {
  if (state_) stop();
  if (!state_ || state_->self != 0 || !state_->store) return;
  if (auto r = state_->store->remove_all(); !r.ok())
    std::fprintf(stderr, "rdtx-bench: warning: the run's znodes stay behind: %s\n", r.error().message.c_str());
}

Result<std::unique_ptr<ZkRegistration>> ZkRegistration::join(const config::Config& cfg, const run::RunConfig& run,
                                                              cluster::Bootstrap& boot, const std::string& launch_id) {
  auto addr = membership::parse_coordinator(cfg.get_string("cluster.coordinator"));  // checked with the configuration
  if (!addr.ok()) return addr.error();
  auto state = std::make_unique<State>();
  state->self = boot.self();
  state->boot = &boot;
  state->lease.lease_ns = static_cast<uint64_t>(cfg.get_float("cluster.lease_ms") * 1e6);
  // A fenced node stops serving at once: its loops halt without a drain.
  state->lease.on_fence = [] { runtime::request_halt(); };
  // The run id comes from node 0, so that every node claims the path for
  // the same run.
  std::string mine = state->self != 0 ? "" : !launch_id.empty() ? launch_id : new_run_id();
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
  st.config = first;
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
