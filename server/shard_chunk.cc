#include "server/shard_chunk.h"

#include "common/engine/nn/moving_statistics.h"

namespace pstrain {

std::optional<std::span<const float>> ShardChunk::values_at(uint64_t at) const {
  if (at >= values_since && at <= version) return std::span<const float>(values);
  // (A lazy table piece's previous_version has rows, not a whole `previous`: table_row_at.)
  if (at == previous_version && previous.size() == info.size) return std::span<const float>(previous);
  return std::nullopt;
}

const std::vector<float>* ShardChunk::state_of(uint32_t worker) const {
  const auto it = worker_state.find(worker);
  return it == worker_state.end() ? nullptr : &it->second;
}

void ShardChunk::step(optim::Optimizer& optimizer, std::span<const float> gradient, float lr_scale) {
  optimizer.apply(values, gradient, optimizer_state, previous, lr_scale);
  if (moving_momentum >= 0) nn::moving_average(values.data(), gradient.data(), info.size, moving_momentum, previous.data());
  std::swap(values, previous);
  previous_version = version;
  values_since = version + 1;
}

void ShardChunk::restore(const ChunkSnapshot& snapshot) {
  values = snapshot.values;
  optimizer_state = snapshot.optimizer_state;
  version = snapshot.version;
  worker_state = snapshot.worker_state;
  previous_version = UINT64_MAX;
  values_since = version;
  held_examples = -1;
  held_factor.reset();
}

void ShardChunk::reset(const optim::Optimizer& optimizer) {
  values = initial;
  optimizer_state = optimizer.make_state(info.size);
  version = 0;
  worker_state.clear();
  previous_version = UINT64_MAX;
  values_since = 0;
  held_examples = -1;
  held_factor.reset();
}

void ShardChunk::release_pulls() {
  for (size_t i = 0; i < waiting_pulls.size();) {
    if (waiting_pulls[i].first <= version) {
      auto done = std::move(waiting_pulls[i].second);
      waiting_pulls.erase(waiting_pulls.begin() + static_cast<long>(i));
      done(version);
    } else {
      ++i;
    }
  }
}

}  // namespace pstrain
