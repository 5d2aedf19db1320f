#include "membership/config_store.hpp"

#include <cerrno>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <thread>

namespace rdtx::membership {

namespace {

std::string claim_text(const std::string& run_id) { return std::string(kRunMagic) + " 1\nrun " + run_id + "\n"; }

// The run id of a root's data, or "" if it is no rdtx run's claim.
std::string run_of_claim(const std::string& data) {
  const std::string head = std::string(kRunMagic) + " 1\nrun ";
  if (data.compare(0, head.size(), head) != 0 || data.back() != '\n') return "";
  const std::string id = data.substr(head.size(), data.size() - head.size() - 1);
  return id.find_first_of(" \n") == std::string::npos ? id : "";
}

std::string member_text(const std::string& run_id, uint32_t node, const std::string& endpoint, uint64_t config) {
  return std::string(kMemberMagic) + " 1\nrun " + run_id + "\nnode " + std::to_string(node) + "\nendpoint " + endpoint +
         "\nconfig " + std::to_string(config) + "\n";
}

bool parse_member(const std::string& text, const std::string& run_id, MemberRecord& out) {
  const std::string head = std::string(kMemberMagic) + " 1\nrun " + run_id + "\nnode ";
  if (text.compare(0, head.size(), head) != 0) return false;
  const std::string rest = text.substr(head.size());
  const size_t e1 = rest.find("\nendpoint "), e2 = rest.find("\nconfig ");
  if (e1 == std::string::npos || e2 == std::string::npos || e2 < e1 || rest.back() != '\n') return false;
  const std::string node = rest.substr(0, e1), config = rest.substr(e2 + 8, rest.size() - e2 - 9);
  out.endpoint = rest.substr(e1 + 10, e2 - e1 - 10);
  auto r1 = std::from_chars(node.data(), node.data() + node.size(), out.node);
  auto r2 = std::from_chars(config.data(), config.data() + config.size(), out.config);
  return r1.ec == std::errc() && r1.ptr == node.data() + node.size() && r2.ec == std::errc() &&
         r2.ptr == config.data() + config.size();
}

}  // namespace

Error ConfigStore::error(int code, const std::string& path, const std::string& what) const {
  return Error{code, "zookeeper " + zk_->servers() + ": zk path " + path + " " + what};
}

Result<ConfigStore> ConfigStore::open(ZkClient& zk, const std::string& root, const std::string& run_id) {
  ConfigStore store(zk, root, run_id);
  if (run_id.empty() || run_id.find_first_of(" \n\t") != std::string::npos)
    return store.error(EINVAL, root,
                       "cannot be claimed with run id '" + run_id + "': a run id is non-empty and has no space");
  if (root.size() < 2 || root.front() != '/' || root.back() == '/')
    return store.error(EINVAL, root, "is not an absolute znode path below '/'");
  const size_t last = root.rfind('/');
  if (last > 0) RDTX_TRY(zk.create_path(root.substr(0, last)));
  auto created = zk.create(root, claim_text(run_id));
  if (!created.ok() && created.error().code != EEXIST) return created.error();
  if (!created.ok()) {
    auto node = zk.get(root);
    if (!node.ok()) return node.error();
    if (node->data.empty()) {
      // A bare path (made by hand, or an ancestor of another run's root):
      // claimed if nothing lives below it, by compare-and-set so that of two
      // runs claiming it at once one wins.
      auto kids = zk.children(root);
      if (!kids.ok()) return kids.error();
      if (!kids->empty())
        return store.error(EINVAL, root, "has children but no rdtx run's claim: pick a path of its own for this run");
      auto set = zk.set(root, claim_text(run_id), node->version);
      if (!set.ok() && set.error().code == ESTALE)
        return store.error(EEXIST, root, "was claimed by another run at the same time as this one");
      if (!set.ok()) return set.error();
    } else {
      const std::string owner = run_of_claim(node->data);
      if (owner.empty())
        return store.error(EINVAL, root, "holds data that is no rdtx run's claim: pick a path of its own for this run");
      if (owner != run_id)
        return store.error(EEXIST, root,
                           "belongs to another run (run id " + owner + ", ours " + run_id +
                               "): pick another path, or remove the old run's with zkCli.sh deleteall");
    }
  }
  auto members = zk.create(store.members_path(), "");
  if (!members.ok() && members.error().code != EEXIST) return members.error();
  return store;
}

Result<VersionedConfiguration> ConfigStore::read() {
  auto node = zk_->get(config_path());
  if (!node.ok() && node.error().code == ENOENT)
    return error(ENOENT, config_path(), "does not exist: no configuration was written yet");
  if (!node.ok()) return node.error();
  auto c = decode(node->data);
  if (!c.ok()) return error(EINVAL, config_path(), "holds an invalid configuration: " + c.error().message);
  if (c->run_id != run_id_)
    return error(EINVAL, config_path(), "holds a configuration of run " + c->run_id + ", ours is " + run_id_);
  return VersionedConfiguration{std::move(*c), node->version};
}

Result<VersionedConfiguration> ConfigStore::create_initial(const Configuration& first) {
  if (first.run_id != run_id_)
    return error(EINVAL, config_path(),
                 "not written: the configuration is run " + first.run_id + "'s, ours is " + run_id_);
  if (auto v = validate(first); !v.ok()) return error(EINVAL, config_path(), "not written: " + v.error().message);
  auto r = zk_->create(config_path(), encode(first));
  if (!r.ok() && r.error().code == EEXIST) {
    auto stored = read();
    if (!stored.ok()) return stored.error();
    return error(EEXIST, config_path(),
                 "holds configuration " + std::to_string(stored->config.number) + " already (CM node " +
                     std::to_string(stored->config.cm) + "): a run writes its first configuration once");
  }
  if (!r.ok()) return r.error();
  return VersionedConfiguration{first, 0};
}

Result<VersionedConfiguration> ConfigStore::propose(const VersionedConfiguration& current, const Configuration& next) {
  const std::string n = std::to_string(next.number);
  if (next.run_id != run_id_)
    return error(EINVAL, config_path(),
                 "configuration " + n + " not written: it is run " + next.run_id + "'s, ours is " + run_id_);
  if (next.number != current.config.number + 1)
    return error(EINVAL, config_path(),
                 "configuration " + n + " not written: it must follow configuration " +
                     std::to_string(current.config.number) + " as number " + std::to_string(current.config.number + 1));
  if (auto v = validate(next); !v.ok()) return error(EINVAL, config_path(), "not written: " + v.error().message);
  auto r = zk_->set(config_path(), encode(next), current.version);
  if (r.ok()) return VersionedConfiguration{next, *r};
  if (r.error().code != ESTALE) return r.error();
  // Somebody else changed it since `current` was read: say what it holds now.
  std::string now = "another configuration";
  if (auto stored = read(); stored.ok())
    now = "configuration " + std::to_string(stored->config.number) + " (CM node " + std::to_string(stored->config.cm) +
          ", version " + std::to_string(stored->version) + ")";
  return error(ESTALE, config_path(),
               "lost the race for configuration " + n + ": it holds " + now + ", written since configuration " +
                   std::to_string(current.config.number) + " (version " + std::to_string(current.version) +
                   ") was read");
}

Result<void> ConfigStore::register_member(const Configuration& expected, uint32_t self) {
  auto stored = read();
  if (!stored.ok()) return stored.error();
  const std::string who = "node " + std::to_string(self);
  const std::string diff = first_difference(stored->config, expected, "the store", who + "'s");
  if (!diff.empty())
    return error(EINVAL, config_path(), "refuses " + who + ": its configuration differs from the stored one: " + diff);
  auto it = stored->config.members.find(self);
  if (it == stored->config.members.end())
    return error(EINVAL, config_path(),
                 "refuses " + who + ": not a member of configuration " + std::to_string(stored->config.number));
  const std::string path = members_path() + "/" + std::to_string(self);
  auto r = zk_->create(path, member_text(run_id_, self, it->second, stored->config.number), NodeKind::kEphemeral);
  if (!r.ok() && r.error().code == EEXIST)
    return error(EEXIST, path, "exists: " + who + " is registered already (another live process with this node id?)");
  if (!r.ok()) return r.error();
  return {};
}

Result<void> ConfigStore::unregister_member(uint32_t self) {
  return zk_->remove(members_path() + "/" + std::to_string(self));
}

Result<std::map<uint32_t, MemberRecord>> ConfigStore::registered() {
  auto kids = zk_->children(members_path());
  if (!kids.ok()) return kids.error();
  std::map<uint32_t, MemberRecord> out;
  for (const std::string& name : *kids) {
    const std::string path = members_path() + "/" + name;
    auto node = zk_->get(path);
    if (!node.ok() && node.error().code == ENOENT) continue;  // its session ended in between
    if (!node.ok()) return node.error();
    MemberRecord m;
    if (!parse_member(node->data, run_id_, m) || std::to_string(m.node) != name)
      return error(EINVAL, path, "is no registration of a member of run " + run_id_);
    out.emplace(m.node, std::move(m));
  }
  return out;
}

Result<void> ConfigStore::publish_endpoint(uint32_t self, const std::string& endpoint) {
  if (endpoint.empty() || endpoint.find_first_of(" \n") != std::string::npos)
    return error(EINVAL, endpoints_path(), "refuses endpoint '" + endpoint + "': host:port without spaces");
  if (auto r = zk_->create(endpoints_path(), ""); !r.ok() && r.error().code != EEXIST) return r.error();
  const std::string path = endpoints_path() + "/" + std::to_string(self);
  auto r = zk_->create(path, endpoint);
  if (!r.ok() && r.error().code == EEXIST)
    return error(EEXIST, path, "exists: node " + std::to_string(self) +
                                   " published its endpoint already (two processes with one rank, or a launch id "
                                   "used twice?)");
  return r;
}

Result<std::vector<std::string>> ConfigStore::endpoints(uint32_t nodes, uint64_t timeout_ms,
                                                        const std::function<bool()>& stop) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::vector<std::string> names;
  for (;;) {
    auto kids = zk_->children(endpoints_path());
    if (!kids.ok() && kids.error().code != ENOENT) return kids.error();
    names = kids.ok() ? *kids : std::vector<std::string>{};
    if (names.size() >= nodes) break;
    if (stop && stop()) return error(ECANCELED, endpoints_path(), "rendezvous stopped");
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string missing;
      for (uint32_t n = 0; n < nodes; ++n)
        if (std::find(names.begin(), names.end(), std::to_string(n)) == names.end())
          missing += (missing.empty() ? "" : ", ") + std::to_string(n);
      return error(ETIMEDOUT, endpoints_path(),
                   "rendezvous: " + std::to_string(names.size()) + " of " + std::to_string(nodes) +
                       " nodes published their endpoints within " + std::to_string(timeout_ms / 1000) +
                       " s; missing: node(s) " + missing + " (not started, or started with another launch?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> out(nodes);
  for (const std::string& name : names) {
    uint32_t id = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
    if (ec != std::errc() || p != name.data() + name.size() || id >= nodes)
      return error(EINVAL, endpoints_path() + "/" + name,
                   "is no node id below " + std::to_string(nodes) + " (a launch of another size?)");
    auto node = zk_->get(endpoints_path() + "/" + name);
    if (!node.ok()) return node.error();
    if (node->data.empty() || node->data.find_first_of(" \n") != std::string::npos)
      return error(EINVAL, endpoints_path() + "/" + name, "holds no host:port endpoint");
    out[id] = node->data;
  }
  return out;
}

Result<std::vector<std::string>> ConfigStore::exchange(uint64_t config, const std::string& phase, uint32_t self,
                                                      const std::string& mine, const std::vector<uint32_t>& members,
                                                      uint64_t timeout_ms, const std::function<bool()>& stop) {
  // One write a phase (ZooKeeper's writes are its slow operations): the
  // phases' nodes side by side, <phase>-<node>, under the configuration's.
  const std::string dir = recovery_path() + "/c" + std::to_string(config);
  const std::string prefix = phase + "-";
  auto r = zk_->create(dir + "/" + prefix + std::to_string(self), mine);
  if (!r.ok() && r.error().code == ENOENT) {
    RDTX_TRY(zk_->create_path(dir));
    r = zk_->create(dir + "/" + prefix + std::to_string(self), mine);
  }
  if (!r.ok() && r.error().code != EEXIST) return r.error();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto kids = zk_->children(dir);
    if (!kids.ok()) return kids.error();
    std::string missing;
    for (uint32_t m : members)
      if (std::find(kids->begin(), kids->end(), prefix + std::to_string(m)) == kids->end())
        missing += (missing.empty() ? "" : ", ") + std::to_string(m);
    if (missing.empty()) break;
    if (stop && stop()) return error(ECANCELED, dir, "recovery's exchange stopped");
    if (std::chrono::steady_clock::now() >= deadline)
      return error(ETIMEDOUT, dir,
                   "recovery's '" + phase + "' exchange: node(s) " + missing + " did not answer within " +
                       std::to_string(timeout_ms) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::vector<std::string> out;
  for (uint32_t m : members) {
    auto node = zk_->get(dir + "/" + prefix + std::to_string(m));
    if (!node.ok()) return node.error();
    out.push_back(std::move(node->data));
  }
  return out;
}

Result<void> ConfigStore::remove_tree(const std::string& path) {
  auto kids = zk_->children(path);
  if (!kids.ok()) return kids.error().code == ENOENT ? Result<void>{} : Result<void>(kids.error());
  for (const std::string& k : *kids) RDTX_TRY(remove_tree(path + "/" + k));
  if (auto r = zk_->remove(path); !r.ok() && r.error().code != ENOENT) return r.error();
  return {};
}

Result<void> ConfigStore::remove_all() {
  RDTX_TRY(remove_tree(recovery_path()));
  for (const std::string& dir : {members_path(), endpoints_path()}) {
    auto kids = zk_->children(dir);
    if (!kids.ok() && kids.error().code != ENOENT) return kids.error();
    if (kids.ok())
      for (const std::string& name : *kids)
        if (auto r = zk_->remove(dir + "/" + name); !r.ok() && r.error().code != ENOENT) return r.error();
  }
  for (const std::string& path : {members_path(), endpoints_path(), config_path(), root_})
    if (auto r = zk_->remove(path); !r.ok() && r.error().code != ENOENT) return r.error();
  return {};
}

}  // namespace rdtx::membership
