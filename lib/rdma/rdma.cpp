#include <algorithm>
#include <string>

#include "rdma/driver.hpp"
#include "rdma/rdma.hpp"

namespace rdtx::rdma {

namespace {
std::vector<const Driver*>& registry() {
  static std::vector<const Driver*> list;
  return list;
}
}  // namespace

void register_driver(const Driver* drv) { registry().push_back(drv); }
const std::vector<const Driver*>& drivers() { return registry(); }

Result<std::unique_ptr<Device>> open_device(std::string_view devargs, const OpenOptions& opts) {
  std::string_view name = devargs.substr(0, devargs.find(','));
  std::string known;
  for (const Driver* d : drivers()) {
    if (name == d->name) return d->open(devargs, opts);
    known += (known.empty() ? "" : ", ") + std::string(d->name);
  }
  return make_error(ENODEV, "devargs '%.*s': no RDMA driver named '%.*s' (built drivers: %s)", int(devargs.size()),
                    devargs.data(), int(name.size()), name.data(), known.empty() ? "none" : known.c_str());
}

const char* to_string(Opcode op) {
  switch (op) {
    case Opcode::kRead: return "READ";
    case Opcode::kWrite: return "WRITE";
    case Opcode::kCompareSwap: return "CAS";
    case Opcode::kFetchAdd: return "FAA";
    case Opcode::kSend: return "SEND";
    case Opcode::kRecv: return "RECV";
  }
  return "?";
}

const char* to_string(Status st) {
  switch (st) {
    case Status::kSuccess: return "success";
    case Status::kLocalLengthError: return "local length error";
    case Status::kLocalProtectionError: return "local protection error";
    case Status::kRemoteAccessError: return "remote access error";
    case Status::kRemoteInvalidRequest: return "remote invalid request";
    case Status::kFlushed: return "flushed (QP in error state)";
    case Status::kGeneralError: return "general error";
    case Status::kLocalQpOperationError: return "local QP operation error";
  }
  return "?";
}

}  // namespace rdtx::rdma
