// Strong types for identifiers, so that a node id, a worker index and a step cannot be mixed up
// by accident: each is its own type, made explicitly from its number and turned back into it
// only at the edges (RPC messages, JSON, logs).
//
// Thread rules: plain values.
#pragma once

#include <kj/string.h>

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

namespace pstrain {

template <typename Tag, typename Rep>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  friend constexpr auto operator<=>(StrongId, StrongId) = default;
  friend std::ostream& operator<<(std::ostream& out, StrongId id) { return out << id.value_; }

 private:
  Rep value_{};
};

// For KJ_REQUIRE and kj::str.
template <typename Tag, typename Rep>
kj::String KJ_STRINGIFY(const StrongId<Tag, Rep>& id) {
  return kj::str(id.value());
}

// A node as the coordinator registered it (1, 2, ...; 0 is no node). A node that registers again
// gets a new id.
using NodeId = StrongId<struct NodeIdTag, uint32_t>;

}  // namespace pstrain

template <typename Tag, typename Rep>
struct std::hash<pstrain::StrongId<Tag, Rep>> {
  size_t operator()(pstrain::StrongId<Tag, Rep> id) const noexcept { return std::hash<Rep>()(id.value()); }
};
