#include "txn/stages/owner_atomics.hpp"

#include <cstring>

#include "env/log.hpp"
#include "env/tsc.hpp"
#include "txn/options.hpp"
#include "txn/protocol.hpp"  // kStages

namespace rdtx::txn {

namespace {
const env::LogType kLog("rdtx.txn.atomics");
// An empty poll spends this much (a virtual clock advances by it; real
// time spins it): the loopback round trip takes modelled time on shm.
constexpr uint64_t kPollStepNs = 20;
}  // namespace

const char* describe(OwnerAtomicsMode m) {
  switch (m) {
    case OwnerAtomicsMode::kCpu:
      return "CPU atomics (device atomics coherent with CPU)";
    case OwnerAtomicsMode::kCpuNoMix:
      return "CPU atomics (device atomics not coherent with CPU, but this pipeline never puts NIC atomics and "
             "owner-side read-modify-writes on the same words)";
    case OwnerAtomicsMode::kLoopback:
      return "loopback RDMA (device atomics not coherent with CPU)";
    case OwnerAtomicsMode::kCpuForced:
      return "CPU atomics, FORCED (txn.options owner_atomics_cpu, tests only): NOT SAFE, device atomics not "
             "coherent with CPU";
  }
  return "?";
}

OwnerAtomicsMode owner_atomics_mode(const rdma::DeviceCaps& caps, uint32_t atomic_stages, const Options& o) {
  if (caps.atomics_coherent_with_cpu) return OwnerAtomicsMode::kCpu;
  bool nic = false, cpu = false;  // some stage touches the words with NIC atomics, some on the owner's CPU
  for (int s = 0; s < kStages; ++s) {
    const Primitive p = o.stage(static_cast<Stage>(s));
    if ((atomic_stages & stage_bit(static_cast<Stage>(s))) == 0 || p == Primitive::kOff) continue;
    nic |= p != Primitive::kRpc;
    cpu |= p == Primitive::kRpc || p == Primitive::kHybrid;
  }
  if (!(nic && cpu)) return OwnerAtomicsMode::kCpuNoMix;
  return o.owner_atomics_cpu ? OwnerAtomicsMode::kCpuForced : OwnerAtomicsMode::kLoopback;
}

void log_owner_atomics(OwnerAtomicsMode m, const rdma::DeviceCaps& caps) {
  if (caps.atomics_coherent_with_cpu)
    RDTX_LOG(kLog, Info, "owner atomics: %s on %s", describe(m), caps.name.c_str());
  else
    RDTX_LOG(kLog, Notice, "owner atomics: %s on %s", describe(m), caps.name.c_str());
}

OwnerAtomics::~OwnerAtomics() {
  if (dev_ != nullptr && mem_ != nullptr) (void)dev_->dereg_mr(mr_);
}

Result<void> OwnerAtomics::init_loopback(rdma::Device& dev, std::vector<uint32_t> rkey_by_table, uint64_t* errors) {
  const char* name = dev.caps().name.c_str();
  auto mem = dev.alloc_memory(64);
  if (!mem.ok()) return make_error(mem.error().code, "owner atomics on %s: %s", name, mem.error().message.c_str());
  auto mr = dev.reg_mr((*mem)->data(), 64, rdma::kLocalWrite);
  if (!mr.ok()) return make_error(mr.error().code, "owner atomics on %s: %s", name, mr.error().message.c_str());
  mem_ = std::move(*mem);
  mr_ = *mr;
  dev_ = &dev;
  // One atomic in flight at a time: a send queue of one, a CQ of a few.
  auto cq = dev.create_cq(4);
  if (!cq.ok()) return make_error(cq.error().code, "owner atomics on %s: CQ: %s", name, cq.error().message.c_str());
  rdma::QpInit init;
  init.type = rdma::QpType::kRc;
  init.send_cq = cq->get();
  init.max_send_wr = 1;
  init.max_inline = 0;
  auto qp = dev.create_qp(init);
  if (!qp.ok()) return make_error(qp.error().code, "owner atomics on %s: QP: %s", name, qp.error().message.c_str());
  // Loopback: the QP is its own peer (verbs: its own QPN and GID), as the
  // cluster connects a worker's QP to its own node.
  const rdma::QpAddress self = (*qp)->address();
  if (auto c = (*qp)->connect(self); !c.ok())
    return make_error(c.error().code, "owner atomics on %s: connecting a QP to itself: %s", name,
                      c.error().message.c_str());
  cq_ = std::move(*cq);
  self_ = self;
  rkeys_ = std::move(rkey_by_table);
  errors_ = errors;
  qp_ = std::move(*qp);
  return {};
}

uint64_t OwnerAtomics::nic(rdma::Opcode op, TableId table, std::byte* word, uint64_t compare_add, uint64_t swap) {
  if (table >= rkeys_.size()) return fail(op, word, "no region of its table");
  auto* result = static_cast<uint64_t*>(mem_->data());
  *result = kUnknown;
  rdma::WorkRequest wr;
  wr.opcode = op;
  wr.flags = rdma::kSignaled;
  wr.local = result;
  wr.length = 8;
  wr.lkey = mr_.lkey;
  wr.remote_addr = reinterpret_cast<uint64_t>(word);
  wr.rkey = rkeys_[table];
  wr.compare_add = compare_add;
  wr.swap = swap;
  rdma::WorkRequest* bad = nullptr;
  if (qp_->post_send(&wr, &bad) != 0) return fail(op, word, "post_send refused it");
  rdma::Completion wc;
  const uint64_t deadline = env::hw_tsc() + kTimeoutNs / 1'000'000'000 * env::hw_tsc_hz();
  int n;
  while ((n = cq_->poll(&wc, 1)) == 0) {
    if (env::hw_tsc() > deadline) return fail(op, word, "no completion within 2 s");
    env::spend_ticks(env::ns_to_tsc(kPollStepNs));
  }
  if (n < 0 || wc.status != rdma::Status::kSuccess)
    return fail(op, word, n < 0 ? "poll failed" : rdma::to_string(wc.status));
  // The NIC wrote the word before it wrote the completion we saw; later
  // loads of this thread (a protocol's checks after taking a lock) must not
  // be ordered before either.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return std::atomic_ref<uint64_t>(*result).load(std::memory_order_relaxed);
}

uint64_t OwnerAtomics::fail(rdma::Opcode op, const std::byte* word, const char* why) {
  ++failures_;
  if (errors_ != nullptr) ++*errors_;
  RDTX_LOG(kLog, Error, "owner atomics: loopback %s on word %p of %s failed (%s): the word's state is unknown",
           rdma::to_string(op), static_cast<const void*>(word), dev_->caps().name.c_str(), why);
  // A failed request leaves the QP in the error state; what it left in
  // flight is flushed. Bring it back for the next one.
  if (auto c = qp_->connect(self_); !c.ok())
    RDTX_LOG(kLog, Error, "owner atomics: reconnecting the loopback QP of %s: %s", dev_->caps().name.c_str(),
             c.error().message.c_str());
  rdma::Completion wc;
  while (cq_->poll(&wc, 1) > 0) {
  }
  return kUnknown;
}

}  // namespace rdtx::txn
