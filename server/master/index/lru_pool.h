// LruAllocator: the allocator of the master's LRU lists (master.h).
//
// Every replica has a node in its tier's LRU list: two links and the
// object pointer, 24 bytes, which malloc keeps in a 32-byte chunk (its
// header and 16-byte rounding). The pool carves 24-byte cells from 1 MiB
// slabs instead and keeps freed ones on a free list: 8 bytes less per
// replica (docs/master.md, "Memory per object"). Slabs are never given
// back to the system, only reused; one pool serves every master in the
// process, under its own mutex (allocations happen under a master's mu_
// held exclusively, so it is uncontended but for tests running several
// masters). Under AddressSanitizer the lists use malloc, so that their
// nodes keep its use-after-free checks.
#ifndef SHELF_SERVER_MASTER_INDEX_LRU_POOL_H_
#define SHELF_SERVER_MASTER_INDEX_LRU_POOL_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/base/config.h"
#include "absl/base/thread_annotations.h"
#include "common/mutex.h"

namespace shelf::master {

class LruNodePool {
 public:
  static constexpr size_t kCellBytes = 24;
  static constexpr size_t kSlabBytes = 1 << 20;

  static LruNodePool& Get() {
    static LruNodePool* pool = new LruNodePool;  // never destroyed: lists may outlive statics
    return *pool;
  }

  void* Allocate() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (free_ != nullptr) {
      Cell* c = free_;
      free_ = c->next;
      return c;
    }
    if (next_ == end_) {
      slabs_.push_back(std::make_unique<Cell[]>(kSlabBytes / sizeof(Cell)));
      next_ = slabs_.back().get();
      end_ = next_ + kSlabBytes / sizeof(Cell);
    }
    return next_++;
  }

  void Free(void* p) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    Cell* c = static_cast<Cell*>(p);
    c->next = free_;
    free_ = c;
  }

 private:
  union Cell {
    Cell* next;
    alignas(8) unsigned char bytes[kCellBytes];
  };
  static_assert(sizeof(Cell) == kCellBytes);

  Mutex mu_;
  std::vector<std::unique_ptr<Cell[]>> slabs_ ABSL_GUARDED_BY(mu_);
  Cell* next_ ABSL_GUARDED_BY(mu_) = nullptr;
  Cell* end_ ABSL_GUARDED_BY(mu_) = nullptr;
  Cell* free_ ABSL_GUARDED_BY(mu_) = nullptr;
};

// Stateless: every LruAllocator is equal, so lists splice freely.
template <typename T>
struct LruAllocator {
  using value_type = T;

  LruAllocator() = default;
  template <typename U>
  LruAllocator(const LruAllocator<U>&) {}  // NOLINT: rebinding is implicit

  static constexpr bool Pooled(size_t n) {
#if defined(ABSL_HAVE_ADDRESS_SANITIZER)
    return false;
#else
    return n == 1 && sizeof(T) == LruNodePool::kCellBytes && alignof(T) <= 8;
#endif
  }
  T* allocate(size_t n) {
    if (Pooled(n)) return static_cast<T*>(LruNodePool::Get().Allocate());
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (Pooled(n)) {
      LruNodePool::Get().Free(p);
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  template <typename U>
  bool operator==(const LruAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const LruAllocator<U>&) const {
    return false;
  }
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_INDEX_LRU_POOL_H_
