// Collectives: every node sends node 0 a contribution naming the operation
// (kind, name, sequence number); node 0 waits for all of them, checks that
// everybody is in the same operation, and answers every node with the
// result. all_gather, gather, barrier and agree are this one exchange with
// different contributions and results (doc/bootstrap.md, "Topology").
#include <map>

#include "cluster/bootstrap_impl.hpp"

namespace rdtx::cluster {

using namespace detail;

namespace {

// The first difference between node 0's config and node `node`'s, in node
// 0's key order, then keys only `node` has; a key's first occurrence counts.
std::optional<std::string> config_mismatch(const Config& root, const Config& other, uint32_t node) {
  std::map<std::string_view, std::string_view> in_root, in_other;
  for (const auto& [k, v] : root) in_root.emplace(k, v);
  for (const auto& [k, v] : other) in_other.emplace(k, v);
  std::string n = "node " + std::to_string(node);
  for (const auto& [k, v] : root) {
    auto it = in_other.find(k);
    if (it == in_other.end())
      return "bootstrap: config mismatch: " + n + " has no " + k + ", node 0 has " + k + " = " + v;
    if (it->second != v)
      return "bootstrap: config mismatch: " + n + " has " + k + " = " + std::string(it->second) + ", node 0 has " + v;
  }
  for (const auto& [k, v] : other)
    if (!in_root.count(k)) return "bootstrap: config mismatch: " + n + " has " + k + " = " + v + ", node 0 has no " + k;
  return std::nullopt;
}

}  // namespace

Result<void> Bootstrap::Impl::check_name(OpKind kind, std::string_view what) const {
  if (what.size() > kMaxTextBytes)
    return make_error(EINVAL, "bootstrap: the name of %s is %zu bytes long, at most %zu allowed", to_string(kind),
                      what.size(), kMaxTextBytes);
  return {};
}

// Node 0: waits for every joiner's contribution to this operation and
// returns all contributions by node id (its own at [0]). An excluded node
// is not waited for and its slot is empty, also when exclude() comes while
// this waits (it notifies the wait, which re-evaluates).
Result<std::vector<std::vector<std::byte>>> Bootstrap::Impl::root_collect(OpKind kind, std::string_view what,
                                                                          std::span<const std::byte> mine) {
  RDTX_TRY(check_name(kind, what));
  const std::string op = describe(static_cast<uint8_t>(kind), what);
  const uint64_t s = ++seq;
  const int64_t deadline = now_ms() + static_cast<int64_t>(o.op_timeout_ms);
  {
    // A signal already caught ends the run before this node takes part;
    // fail() sends the abort messages on their way.
    std::unique_lock lk(mu);
    check_stop_locked();
    if (failed.load(std::memory_order_relaxed)) {
      Error e = failure;
      lk.unlock();
      return fail(std::move(e));
    }
  }
  wait_until(
      [&] {
        if (failed.load(std::memory_order_relaxed)) return true;
        for (uint32_t i = 1; i < n; ++i)
          if (awaited_locked(peers[i])) return false;
        return true;
      },
      deadline);
  std::unique_lock lk(mu);
  if (failed.load(std::memory_order_relaxed)) {
    // A failure seen while waiting (a stop notice, a lost peer): its abort
    // messages go out now, not only when this Bootstrap is destroyed.
    Error e = failure;
    lk.unlock();
    return fail(std::move(e));
  }
  std::vector<std::vector<std::byte>> blobs(n);
  blobs[0].assign(mine.begin(), mine.end());
  std::optional<Error> err;
  for (uint32_t i = 1; i < n && !err; ++i) {
    Peer& p = peers[i];
    if (p.excluded) continue;  // its slot stays empty
    if (p.inbox.empty()) {
      if (p.fd < 0 && p.left_to_membership) {
        err = Error{ECONNRESET, "bootstrap: " + who(i) + " " + p.gone + " during " + op +
                                    " (lost while monitored; the membership service did not exclude it within the "
                                    "operation's " + seconds(o.op_timeout_ms) + ")"};
      } else if (p.fd < 0) {
        err = Error{ECONNRESET, "bootstrap: " + who(i) + " " + p.gone + " during " + op};
      } else {
        uint32_t late = 0;
        for (uint32_t k = i + 1; k < n; ++k) late += peers[k].inbox.empty() && !peers[k].excluded;
        err = Error{ETIMEDOUT, "bootstrap: " + who(i) + " did not reach " + op + " within " + seconds(o.op_timeout_ms) +
                                   (late ? " (nor did " + std::to_string(late) + " more)" : std::string())};
      }
      break;
    }
    Frame f = std::move(p.inbox.front());
    p.inbox.pop_front();
    const OpMessage m = parse_op(f.payload);
    if (!m.ok) {
      err = Error{EPROTO, "bootstrap: " + who(i) + " sent an invalid message: a truncated contribution"};
    } else if (!m.is(s, kind, what)) {
      err = Error{EPROTO, "bootstrap: " + who(i) + " is in " + describe(m.kind, m.name) + " (operation #" +
                              std::to_string(m.seq) + ") while node 0 is in " + op + " (operation #" +
                              std::to_string(s) + ")"};
    } else {
      blobs[i].assign(m.body.begin(), m.body.end());
    }
  }
  lk.unlock();
  if (err) return fail(std::move(*err));
  return blobs;
}

// Node 0: sends every joiner the result and waits until it is sent.
Result<void> Bootstrap::Impl::root_respond(OpKind kind, std::string_view what, std::span<const std::byte> body) {
  const std::string op = describe(static_cast<uint8_t>(kind), what);
  auto payload = op_header(kind, what, seq);
  if (payload.size() + body.size() > kMaxPayload)
    return fail(make_error(EMSGSIZE, "bootstrap: the result of %s is %zu bytes, more than the limit of %u", op.c_str(),
                           body.size(), kMaxPayload));
  payload.insert(payload.end(), body.begin(), body.end());
  {
    std::lock_guard lk(mu);
    for (uint32_t i = 1; i < n; ++i) queue_locked(peers[i], kResult, payload);
  }
  if (!flush(now_ms() + static_cast<int64_t>(o.op_timeout_ms))) {
    std::unique_lock lk(mu);
    for (uint32_t i = 1; i < n; ++i)
      if (peers[i].fd >= 0 && !peers[i].excluded && !peers[i].out.empty()) {
        Error e{ETIMEDOUT,
                "bootstrap: " + who(i) + " did not read the result of " + op + " within " + seconds(o.op_timeout_ms)};
        lk.unlock();
        return fail(std::move(e));
      }
  }
  std::lock_guard lk(mu);
  if (failed.load(std::memory_order_relaxed)) return failure;
  return {};
}

// A joiner: sends its contribution to node 0 and returns node 0's result.
Result<std::vector<std::byte>> Bootstrap::Impl::exchange(OpKind kind, std::string_view what,
                                                         std::span<const std::byte> mine) {
  RDTX_TRY(check_name(kind, what));
  const std::string op = describe(static_cast<uint8_t>(kind), what);
  const uint64_t s = ++seq;
  // Node 0 sees every node and names the late one: give its verdict time
  // to arrive when this node entered the operation before node 0 did.
  const uint64_t wait_ms = o.op_timeout_ms + 1000;
  const int64_t deadline = now_ms() + static_cast<int64_t>(wait_ms);
  Peer& root = peers[0];
  {
    std::unique_lock lk(mu);
    // A signal already caught: node 0 gets the stop notice (sent now, by
    // fail()), not a contribution that would let the others complete the
    // operation.
    check_stop_locked();
    if (stop_seen && failed.load(std::memory_order_relaxed)) {
      Error e = failure;
      lk.unlock();
      return fail(std::move(e));
    }
    if (failed.load(std::memory_order_relaxed)) return failure;
    auto payload = op_header(kind, what, s);
    if (payload.size() + mine.size() > kMaxPayload) {
      Error e = make_error(EMSGSIZE, "bootstrap: %s's contribution to %s is %zu bytes, more than the limit of %u",
                           me().c_str(), op.c_str(), mine.size(), kMaxPayload);
      fail_locked(e);
      return e;
    }
    payload.insert(payload.end(), mine.begin(), mine.end());
    queue_locked(root, kContrib, payload);
  }
  wait_until([&] { return failed.load(std::memory_order_relaxed) || !root.inbox.empty() || root.fd < 0; }, deadline);
  std::unique_lock lk(mu);
  if (failed.load(std::memory_order_relaxed)) return failure;
  if (root.inbox.empty()) {
    if (root.fd < 0)
      fail_locked(Error{ECONNRESET, "bootstrap: " + who(0) + " " + root.gone + " during " + op});
    else
      fail_locked(Error{ETIMEDOUT, "bootstrap: " + who(0) + " did not complete " + op + " within " + seconds(wait_ms) +
                                       " (node 0, or a node it waits for, is late)"});
    return failure;
  }
  Frame f = std::move(root.inbox.front());
  root.inbox.pop_front();
  const OpMessage m = parse_op(f.payload);
  if (f.type != kResult || !m.ok || !m.is(s, kind, what)) {
    fail_locked(Error{EPROTO, "bootstrap: " + who(0) + " sent an invalid message: not the result of " + op});
    return failure;
  }
  return std::vector<std::byte>(m.body.begin(), m.body.end());
}

Result<std::vector<std::vector<std::byte>>> Bootstrap::all_gather(std::span<const std::byte> mine,
                                                                  std::string_view what) {
  Impl& m = *impl_;
  if (m.o.self == 0) {
    auto blobs = m.root_collect(OpKind::kAllGather, what, mine);
    if (!blobs.ok()) return blobs.error();
    size_t total = 4;
    for (const auto& b : *blobs) total += 4 + b.size();
    if (total > kMaxPayload)
      return m.fail(make_error(EMSGSIZE, "bootstrap: the blobs of %s total %zu bytes, more than the limit of %u",
                               describe(static_cast<uint8_t>(OpKind::kAllGather), what).c_str(), total, kMaxPayload));
    RDTX_TRY(m.root_respond(OpKind::kAllGather, what, encode_blobs(*blobs)));
    return blobs;
  }
  auto body = m.exchange(OpKind::kAllGather, what, mine);
  if (!body.ok()) return body.error();
  auto blobs = decode_blobs(*body, m.n);
  if (!blobs)
    return m.fail(Error{EPROTO, "bootstrap: " + m.who(0) + " sent an invalid message: a malformed result of " +
                                    describe(static_cast<uint8_t>(OpKind::kAllGather), what)});
  return std::move(*blobs);
}

Result<std::vector<std::vector<std::byte>>> Bootstrap::gather(std::span<const std::byte> mine, std::string_view what) {
  Impl& m = *impl_;
  if (m.o.self == 0) {
    auto blobs = m.root_collect(OpKind::kGather, what, mine);
    if (!blobs.ok()) return blobs.error();
    RDTX_TRY(m.root_respond(OpKind::kGather, what, {}));
    return blobs;
  }
  auto body = m.exchange(OpKind::kGather, what, mine);
  if (!body.ok()) return body.error();
  return std::vector<std::vector<std::byte>>{};
}

Result<void> Bootstrap::barrier(std::string_view what) {
  Impl& m = *impl_;
  if (m.o.self == 0) {
    auto blobs = m.root_collect(OpKind::kBarrier, what, {});
    if (!blobs.ok()) return blobs.error();
    return m.root_respond(OpKind::kBarrier, what, {});
  }
  auto body = m.exchange(OpKind::kBarrier, what, {});
  if (!body.ok()) return body.error();
  return {};
}

Result<void> Bootstrap::agree(const std::vector<std::pair<std::string, std::string>>& config) {
  Impl& m = *impl_;
  constexpr std::string_view kWhat = "config";
  auto mine = encode_config(config);
  if (m.o.self != 0) {
    auto body = m.exchange(OpKind::kAgree, kWhat, mine);
    if (!body.ok()) return body.error();
    return {};
  }
  auto blobs = m.root_collect(OpKind::kAgree, kWhat, mine);
  if (!blobs.ok()) return blobs.error();
  for (uint32_t i = 1; i < m.n; ++i) {
    if (i < 64 && (m.excluded_mask.load(std::memory_order_acquire) >> i & 1)) continue;  // its slot is empty
    auto theirs = decode_config((*blobs)[i]);
    if (!theirs)
      return m.fail(Error{EPROTO, "bootstrap: " + m.who(i) + " sent an invalid message: a malformed config"});
    if (auto diff = config_mismatch(config, *theirs, i)) return m.fail(Error{EINVAL, std::move(*diff)});
  }
  return m.root_respond(OpKind::kAgree, kWhat, {});
}

}  // namespace rdtx::cluster
