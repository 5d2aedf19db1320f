#include "env/mempool.hpp"

#include <rte_errno.h>
#include <rte_mempool.h>

#include <atomic>
#include <cstdio>

namespace rdtx::env {

namespace {
rte_mempool* M(void* p) { return static_cast<rte_mempool*>(p); }
}  // namespace

Mempool& Mempool::operator=(Mempool&& o) noexcept {
  if (this != &o) {
    this->~Mempool();
    mp_ = o.mp_;
    o.mp_ = nullptr;
  }
  return *this;
}

Mempool::~Mempool() {
  if (mp_ != nullptr) rte_mempool_free(M(mp_));
  mp_ = nullptr;
}

Result<Mempool> Mempool::create(const char* name, unsigned n, unsigned elt_size, unsigned cache_size) {
  static std::atomic<unsigned> seq{0};
  char full[RTE_MEMPOOL_NAMESIZE];
  std::snprintf(full, sizeof full, "%.16s_%u", name, seq.fetch_add(1));
  rte_mempool* mp = rte_mempool_create(full, n, elt_size, cache_size, 0, nullptr, nullptr, nullptr, nullptr,
                                       SOCKET_ID_ANY, 0);
  if (mp == nullptr)
    return make_error(rte_errno, "cannot create mempool '%s' (%u x %u B): %s", name, n, elt_size, rte_strerror(rte_errno));
  return Mempool(mp);
}

void* Mempool::get() {
  void* obj = nullptr;
  return rte_mempool_get(M(mp_), &obj) == 0 ? obj : nullptr;
}
void Mempool::put(void* obj) { rte_mempool_put(M(mp_), obj); }
bool Mempool::get_bulk(void** objs, unsigned n) { return rte_mempool_get_bulk(M(mp_), objs, n) == 0; }
void Mempool::put_bulk(void* const* objs, unsigned n) { rte_mempool_put_bulk(M(mp_), objs, n); }
unsigned Mempool::available() const { return rte_mempool_avail_count(M(mp_)); }
unsigned Mempool::in_use() const { return rte_mempool_in_use_count(M(mp_)); }

}  // namespace rdtx::env
