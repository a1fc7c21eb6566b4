// Cache-line aligned float buffers for everything the math reads or writes.
//
// Why: BLAS kernels take different paths (and so round differently) depending on how their
// operands are aligned, and malloc's alignment varies from run to run. With every operand on a
// 64-byte boundary a run is bit-reproducible, which the sync-equivalence and recovery tests need.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace pstrain {

template <typename T>
struct CacheAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheAlignedAllocator() = default;
  template <typename U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}

  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlignment)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }
  template <typename U>
  bool operator==(const CacheAlignedAllocator<U>&) const {
    return true;
  }
};

using AlignedFloats = std::vector<float, CacheAlignedAllocator<float>>;

// The same alignment, but resize() leaves new elements uninitialized: for buffers that are
// written in full before they are read (a product), where zero-filling first is a wasted pass.
template <typename T>
struct UninitializedAllocator : CacheAlignedAllocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialization: no value for trivial types
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using ScratchFloats = std::vector<float, UninitializedAllocator<float>>;

}  // namespace pstrain
