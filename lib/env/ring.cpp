#include "env/ring.hpp"

#include <rte_errno.h>
#include <rte_ring.h>
#include <rte_ring_elem.h>
#include <rte_ring_peek.h>

#include <atomic>
#include <cstdio>

namespace rdtx::env {

namespace {
unsigned flags_of(Sync prod, Sync cons) {
  return (prod == Sync::kSingle ? RING_F_SP_ENQ : 0u) | (cons == Sync::kSingle ? RING_F_SC_DEQ : 0u);
}
rte_ring* R(void* r) { return static_cast<rte_ring*>(r); }
}  // namespace

Ring& Ring::operator=(Ring&& o) noexcept {
  if (this != &o) {
    this->~Ring();
    r_ = o.r_;
    esize_ = o.esize_;
    owned_ = o.owned_;
    o.r_ = nullptr;
  }
  return *this;
}

Ring::~Ring() {
  if (owned_ && r_ != nullptr) rte_ring_free(R(r_));
  r_ = nullptr;
}

Result<Ring> Ring::create(const char* name, unsigned count, unsigned esize, Sync prod, Sync cons) {
  // rte_ring names must be unique per process; make them so.
  static std::atomic<unsigned> seq{0};
  char full[RTE_RING_NAMESIZE];
  std::snprintf(full, sizeof full, "%.16s_%u", name, seq.fetch_add(1));
  rte_ring* r = rte_ring_create_elem(full, esize, count, SOCKET_ID_ANY, flags_of(prod, cons));
  if (r == nullptr)
    return make_error(rte_errno, "cannot create ring '%s' (%u x %u B): %s", name, count, esize, rte_strerror(rte_errno));
  return Ring(r, esize, true);
}

size_t Ring::memsize(unsigned count, unsigned esize) {
  ssize_t n = rte_ring_get_memsize_elem(esize, count);
  return n < 0 ? 0 : static_cast<size_t>(n);
}

Result<Ring> Ring::init_in(void* mem, unsigned count, unsigned esize, Sync prod, Sync cons) {
  if (memsize(count, esize) == 0) return make_error(EINVAL, "ring of %u x %u B: count must be a power of two and esize a multiple of 4", count, esize);
  int rc = rte_ring_init(R(mem), "rdtx", count, flags_of(prod, cons));
  if (rc != 0) return make_error(-rc, "cannot initialise ring in place: %s", rte_strerror(-rc));
  return Ring(mem, esize, false);
}

Ring Ring::attach(void* mem, unsigned esize) { return Ring(mem, esize, false); }

unsigned Ring::enqueue_burst(const void* objs, unsigned n) {
  return rte_ring_enqueue_burst_elem(R(r_), objs, esize_, n, nullptr);
}
unsigned Ring::dequeue_burst(void* objs, unsigned n) {
  return rte_ring_dequeue_burst_elem(R(r_), objs, esize_, n, nullptr);
}
unsigned Ring::peek_start(void* objs, unsigned n) {
  return rte_ring_dequeue_burst_elem_start(R(r_), objs, esize_, n, nullptr);
}
void Ring::peek_finish(unsigned k) { rte_ring_dequeue_elem_finish(R(r_), k); }
unsigned Ring::count() const { return rte_ring_count(R(r_)); }
unsigned Ring::free_count() const { return rte_ring_free_count(R(r_)); }

}  // namespace rdtx::env
