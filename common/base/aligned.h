// Cache-line aligned float buffers for everything the math reads or writes.
//
// Why: BLAS kernels take different paths (and so round differently) depending on how their
// operands are aligned, and malloc's alignment varies from run to run. With every operand on a
// 64-byte boundary a run is bit-reproducible, which the sync-equivalence and recovery tests need.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

namespace pstrain {

template <typename T>
struct CacheAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};
  static constexpr size_t kLine = 64;

  CacheAlignedAllocator() = default;
  template <typename U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}

  // The allocation is rounded up to whole cache lines and the tail beyond n elements is zeroed:
  // Cap'n Proto sends a buffer referenced without copying (rpc::reference_tensor and friends) in
  // whole 8-byte words, so it reads up to 7 bytes past the last element. Those bytes must belong
  // to the allocation (AddressSanitizer found a 3-float chunk read past its end) and must not
  // carry stale heap contents onto the wire.
  T* allocate(size_t n) {
    const size_t bytes = n * sizeof(T);
    const size_t padded = (bytes + kLine - 1) / kLine * kLine;
    auto* p = static_cast<std::byte*>(::operator new(padded == 0 ? kLine : padded, kAlignment));
    std::memset(p + bytes, 0, (padded == 0 ? kLine : padded) - bytes);
    return reinterpret_cast<T*>(p);
  }
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
