// A sparse table's sync steps as the standalone trainer computes them, for the tests of the
// servers' pieces and the workers' table client: slices' compact gradients drawn at random and
// the trainer's whole-table update (worker/local_trainer.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "common/base/rng.h"
#include "common/engine/optim/optimizer.h"

namespace pstrain::testing {

// One slice's compact gradient of a step: distinct rows (ascending) and a row of values each.
struct SliceRows {
  std::vector<uint32_t> rows;
  std::vector<float> grads;
};

// `count` distinct rows of a table of `rows` rows, with `dim` gradient values each.
inline SliceRows random_rows(Rng& rng, int64_t rows, int64_t dim, size_t count) {
  std::set<uint32_t> picked;
  while (picked.size() < count) picked.insert(static_cast<uint32_t>(rng.uniform_float(0, 1) * (rows - 1)));
  SliceRows s{{picked.begin(), picked.end()}, {}};
  // Products of two draws: full mantissas over several binades, so that a sum's order shows in
  // its bits (one uniform draw is on a grid whose sums are mostly exact).
  for (size_t i = 0; i < s.rows.size() * dim; ++i) s.grads.push_back(rng.uniform_float(-1, 1) * rng.uniform_float(0.01f, 3));
  return s;
}

// The trainer's step on the whole table (worker/local_trainer.cc): the slices' compact rows
// summed in slice order over the step's distinct rows, scaled by the examples, then the lazy
// update of those rows or the dense update of every row.
inline void trainer_step(const optim::Optimizer& optimizer, bool lazy, const std::vector<SliceRows>& slices,
                         int64_t examples, int64_t dim, std::vector<float>& table, optim::OptimizerState& state) {
  const auto d = static_cast<size_t>(dim);
  std::set<uint32_t> all;
  for (const SliceRows& s : slices) all.insert(s.rows.begin(), s.rows.end());
  const std::vector<uint32_t> rows(all.begin(), all.end());
  std::vector<float> sum(rows.size() * d, 0.0f);
  for (size_t k = 0; k < slices.size(); ++k) {
    std::vector<float> replica(rows.size() * d, 0.0f);  // a replica's compact gradient
    for (size_t i = 0; i < slices[k].rows.size(); ++i) {
      const auto at = static_cast<size_t>(std::lower_bound(rows.begin(), rows.end(), slices[k].rows[i]) - rows.begin());
      for (size_t c = 0; c < d; ++c) replica[at * d + c] += slices[k].grads[i * d + c];
    }
    for (size_t i = 0; i < sum.size(); ++i) sum[i] = k == 0 ? replica[i] : sum[i] + replica[i];
  }
  const float inv = 1.0f / static_cast<float>(examples);
  for (float& g : sum) g *= inv;
  if (lazy) {
    optimizer.apply_rows(table, d, rows, sum, state);
  } else {
    std::vector<float> dense(table.size(), 0.0f);
    for (size_t k = 0; k < rows.size(); ++k) std::copy_n(sum.data() + k * d, d, dense.data() + rows[k] * d);
    optimizer.apply(table, dense, state);
  }
}

}  // namespace pstrain::testing
