#include "common/storage/chunk_snapshot.h"

#include <cstring>

namespace pstrain {
namespace {

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
bool take(const std::string& in, size_t& at, T* value) {
  if (at + sizeof(T) > in.size()) return false;
  std::memcpy(value, in.data() + at, sizeof(T));
  at += sizeof(T);
  return true;
}

bool take_floats(const std::string& in, size_t& at, uint64_t n, float* out) {
  if (n > (in.size() - at) / sizeof(float)) return false;
  // A chunk of zero values has no storage (out is null), and memcpy's pointers must not be null
  // even for zero bytes (found by fuzz/snapshot_fuzz.cc).
  if (n == 0) return true;
  std::memcpy(out, in.data() + at, n * sizeof(float));
  at += n * sizeof(float);
  return true;
}

}  // namespace

// Layout: key u32, version u64, iterations i64, size u64, values, slot count u32, then per slot:
// name length u32, name, values (size floats); then, only when there are worker states: their
// count u32 and per state worker u32, length u64, values (length floats).
std::string encode_snapshot(const ChunkSnapshot& c) {
  std::string out;
  put(out, c.key);
  put(out, c.version);
  put(out, c.optimizer_state.iterations);
  put(out, static_cast<uint64_t>(c.values.size()));
  out.append(reinterpret_cast<const char*>(c.values.data()), c.values.size() * sizeof(float));
  put(out, static_cast<uint32_t>(c.optimizer_state.slots.size()));
  for (const auto& slot : c.optimizer_state.slots) {
    put(out, static_cast<uint32_t>(slot.name.size()));
    out += slot.name;
    out.append(reinterpret_cast<const char*>(slot.values.data()), slot.values.size() * sizeof(float));
  }
  if (!c.worker_state.empty()) {
    put(out, static_cast<uint32_t>(c.worker_state.size()));
    for (const auto& [worker, state] : c.worker_state) {
      put(out, worker);
      put(out, static_cast<uint64_t>(state.size()));
      out.append(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
    }
  }
  return out;
}

std::optional<ChunkSnapshot> decode_snapshot(const std::string& blob) {
  ChunkSnapshot c;
  size_t at = 0;
  uint64_t size = 0;
  uint32_t slots = 0;
  if (!take(blob, at, &c.key) || !take(blob, at, &c.version) || !take(blob, at, &c.optimizer_state.iterations) ||
      !take(blob, at, &size)) {
    return std::nullopt;
  }
  if (size > blob.size() / sizeof(float)) return std::nullopt;
  c.values.resize(size);
  if (!take_floats(blob, at, size, c.values.data()) || !take(blob, at, &slots) || slots > 8) return std::nullopt;
  for (uint32_t s = 0; s < slots; ++s) {
    uint32_t name_size = 0;
    if (!take(blob, at, &name_size) || name_size > 64 || at + name_size > blob.size()) return std::nullopt;
    optim::Slot slot{blob.substr(at, name_size), std::vector<float>(size)};
    at += name_size;
    if (!take_floats(blob, at, size, slot.values.data())) return std::nullopt;
    c.optimizer_state.slots.push_back(std::move(slot));
  }
  if (at < blob.size()) {
    uint32_t states = 0;
    if (!take(blob, at, &states) || states == 0 || states > 65536) return std::nullopt;
    for (uint32_t i = 0; i < states; ++i) {
      uint32_t worker = 0;
      uint64_t length = 0;
      if (!take(blob, at, &worker) || !take(blob, at, &length) || length > (blob.size() - at) / sizeof(float)) {
        return std::nullopt;
      }
      // In ascending order of worker, as encode_snapshot writes them (std::map's order), so
      // that a blob has one form: a worker twice or out of order is not a snapshot.
      if (!c.worker_state.empty() && worker <= c.worker_state.rbegin()->first) return std::nullopt;
      std::vector<float>& state = c.worker_state[worker];
      state.resize(length);
      if (!take_floats(blob, at, length, state.data())) return std::nullopt;
    }
  }
  if (at != blob.size()) return std::nullopt;
  return c;
}

}  // namespace pstrain
