// /rdtx/rpc/endpoints: every endpoint of this process with the counters its
// owner last published, registered by lib/rpc itself (as a DPDK library
// registers /<lib>/... at init), not by whoever runs the endpoints.
#include <string>

#include "env/telemetry.hpp"
#include "rpc/endpoint_impl.hpp"

namespace rdtx::rpc {

namespace {

// The counters in the reply, by key. Declared once: a counter added to
// EndpointStats and here appears in the reply.
constexpr struct {
  const char* key;
  uint64_t EndpointStats::*member;
} kEndpointCounters[] = {
    {"calls", &EndpointStats::calls},
    {"oneways", &EndpointStats::oneways},
    {"passives", &EndpointStats::passives},
    {"requests_handled", &EndpointStats::requests_handled},
    {"replies_received", &EndpointStats::replies_received},
    {"datagrams_sent", &EndpointStats::datagrams_sent},
    {"datagrams_received", &EndpointStats::datagrams_received},
    {"doorbells", &EndpointStats::doorbells},
    {"timeouts", &EndpointStats::timeouts},
    {"passive_timeouts", &EndpointStats::passive_timeouts},
    {"passive_failures", &EndpointStats::passive_failures},
    {"stale_replies", &EndpointStats::stale_replies},
    {"stale_configuration", &EndpointStats::stale_configuration},
    {"timeout_max_ns", &EndpointStats::timeout_max_ns},
    {"longest_reply_ns", &EndpointStats::longest_reply_ns},
    {"duplicates", &EndpointStats::duplicates},
    {"send_failures", &EndpointStats::send_failures},
    {"credit_returns_sent", &EndpointStats::credit_returns_sent},
    {"credit_returns_received", &EndpointStats::credit_returns_received},
    {"credit_stalls", &EndpointStats::credit_stalls},
    {"credit_resets", &EndpointStats::credit_resets},
};

struct EndpointListing {
  stats::PublishedList<EndpointStats> list;
  env::TelemetryCommand command;  // last: unbound before the list goes

  EndpointListing() {
    auto cmd = env::telemetry_register(
        "/rdtx/rpc/endpoints", "rdtx rpc: counters per endpoint (ep<id>). Parameter: an endpoint id for that one only",
        [this](std::string_view params, env::TelemetryDict& out) {
          list.for_each([&](const std::string& name, const EndpointStats& s) {
            if (!params.empty() && name != "ep" + std::string(params)) return;
            out.add_dict(name, [&](env::TelemetryDict& d) {
              for (const auto& c : kEndpointCounters) d.add_u64(c.key, s.*c.member);
              d.add_u64("malformed", s.malformed_total());
            });
          });
        });
    if (cmd.ok())
      command = std::move(*cmd);
    else
      RDTX_LOG(rpc_log(), Warning, "%s", cmd.error().message.c_str());
  }
};

}  // namespace

stats::PublishedList<EndpointStats>& endpoint_list() {
  static EndpointListing listing;
  return listing.list;
}

}  // namespace rdtx::rpc
