#include "server/step_reduction.h"

#include <algorithm>
#include <vector>

#include "common/engine/nn/gradient_scaling.h"
#include "common/engine/simd/bf16_product.h"
#include "common/engine/simd/kernels.h"

namespace pstrain {
namespace {

// out = (s0 + s1 + ...) / examples (+ 2 * l2 * w) in one pass: the same arithmetic, in the same
// order, as summing the slices into `out` and then calling nn::scale_and_regularize (so a sync
// run stays bit-identical to the standalone trainer), without the copy and the second pass.
void sum_scale_and_regularize(const std::vector<const float*>& slices, const float* w, size_t n, int64_t examples,
                              float l2, float* out) {
  const float inv = 1.0f / static_cast<float>(examples);
  if (slices.size() == 2 && l2 == 0.0f) {
    const float* a = slices[0];
    const float* b = slices[1];
    for (size_t i = 0; i < n; ++i) out[i] = (a[i] + b[i]) * inv;
    return;
  }
  if (slices.size() == 1 && l2 == 0.0f) {
    const float* a = slices[0];
    for (size_t i = 0; i < n; ++i) out[i] = a[i] * inv;
    return;
  }
  std::copy(slices[0], slices[0] + n, out);
  for (size_t p = 1; p < slices.size(); ++p) {
    const float* g = slices[p];
    for (size_t i = 0; i < n; ++i) out[i] += g[i];
  }
  nn::scale_and_regularize(out, w, n, examples, l2);
}

}  // namespace

FactorRows factor_rows(const GradientFactors& f, size_t first_row, size_t rows) {
  const auto begin = std::lower_bound(f.rows.begin(), f.rows.end(), static_cast<uint32_t>(first_row));
  const auto end = std::lower_bound(begin, f.rows.end(), static_cast<uint32_t>(first_row + rows));
  const auto listed = static_cast<size_t>(end - begin);
  if (listed == 0 || f.examples == 0) return {nullptr, 0, nullptr};
  if (!f.multiplied) {
    // As the worker's engine computes a kernel gradient (common/engine/simd/kernels.h, and
    // bf16_product.h for mixed precision's layers): the same value for every element whatever
    // rows the push lists.
    const auto m = static_cast<int64_t>(f.columns), n = static_cast<int64_t>(f.rows.size());
    const auto k = static_cast<int64_t>(f.examples);
    f.product.resize(f.rows.size() * f.columns);
    if (f.bf16) {
      simd::product_bf16(m, n, k, {f.deltas.data(), 1, m}, {f.inputs.data(), 1, n}, false, f.product.data(), m);
    } else {
      simd::product(m, n, k, {f.deltas.data(), 1, m}, {f.inputs.data(), 1, n}, false, f.product.data(), m);
    }
    f.multiplied = true;
  }
  const auto position = static_cast<size_t>(begin - f.rows.begin());
  return {f.rows.data() + position, listed, f.product.data() + position * f.columns};
}

namespace {

// Writes (first) or adds a factored gradient into rows [first_row, first_row + rows) of a kernel,
// `out` being those rows. Unlisted rows are exact zeros, written or skipped, so sums stay what a
// dense push gives.
void accumulate_factors(const GradientFactors& f, size_t first_row, size_t rows, bool first, float* out) {
  const size_t columns = f.columns;
  const FactorRows part = factor_rows(f, first_row, rows);
  size_t next = 0;  // among the listed rows
  for (size_t r = 0; r < rows; ++r) {
    float* row = out + r * columns;
    if (next < part.listed && part.rows[next] == first_row + r) {
      const float* p = part.values + next * columns;
      if (first) {
        std::copy_n(p, columns, row);
      } else {
        for (size_t c = 0; c < columns; ++c) row[c] += p[c];
      }
      ++next;
    } else if (first) {
      std::fill_n(row, columns, 0.0f);
    }
  }
}

// One slice of a step, row by row: every row (`dense`) or the listed ones (possibly none),
// `values` holding them back to back.
struct SliceRows {
  bool dense = false;
  const uint32_t* rows = nullptr;  // kernel row numbers, ascending
  size_t listed = 0;
  const float* values = nullptr;
  size_t next = 0;  // cursor into rows
};

// out = (the slices' sum, in slice order) / examples (+ 2 * l2 * w), row by row, where a slice
// without a row adds nothing: the arithmetic of sum_scale_and_regularize on the dense forms
// (adding an absent row's zeros changes nothing), without building them.
void sum_rows_scale_and_regularize(std::vector<SliceRows>& slices, size_t first_row, size_t rows, size_t columns,
                                   const float* w, int64_t examples, float l2, float* out) {
  const float inv = 1.0f / static_cast<float>(examples);
  const float two_l2 = 2.0f * l2;
  std::vector<const float*> present(slices.size());
  for (SliceRows& s : slices) s.next = 0;
  for (size_t r = 0; r < rows; ++r) {
    size_t k = 0;
    for (SliceRows& s : slices) {
      if (s.dense) {
        present[k++] = s.values + r * columns;
      } else if (s.next < s.listed && s.rows[s.next] == first_row + r) {
        present[k++] = s.values + s.next++ * columns;
      }
    }
    float* o = out + r * columns;
    const float* wr = w + r * columns;
    if (k == 0) {
      for (size_t c = 0; c < columns; ++c) o[c] = l2 == 0.0f ? 0.0f : 0.0f * inv + two_l2 * wr[c];
    } else if (k == 1 && l2 == 0.0f) {
      const float* a = present[0];
      for (size_t c = 0; c < columns; ++c) o[c] = a[c] * inv;
    } else if (k == 2 && l2 == 0.0f) {
      const float* a = present[0];
      const float* b = present[1];
      for (size_t c = 0; c < columns; ++c) o[c] = (a[c] + b[c]) * inv;
    } else {
      std::copy_n(present[0], columns, o);
      for (size_t j = 1; j < k; ++j) {
        const float* g = present[j];
        for (size_t c = 0; c < columns; ++c) o[c] += g[c];
      }
      nn::scale_and_regularize(o, wr, columns, examples, l2);
    }
  }
}

}  // namespace

// Adding a sparse push's absent elements (exact zeros) would change nothing, so skipping them
// keeps the sum bit-identical to the dense one (0 + a == a).
void accumulate_push(const PushRequest& push, const ShardChunk& chunk, bool first, float* out) {
  const size_t n = chunk.info.size;
  if (push.factors) {
    const size_t columns = push.factors->columns;
    accumulate_factors(*push.factors, chunk.info.offset / columns, n / columns, first, out);
  } else if (push.sparse) {
    if (first) std::fill(out, out + n, 0.0f);
    for (const GradientPart& part : push.parts) {
      float* o = out + part.offset;
      for (size_t i = 0; i < part.values.size(); ++i) o[i] += part.values[i];
    }
  } else if (first) {
    std::copy_n(push.gradient.data(), n, out);
  } else {
    for (size_t i = 0; i < n; ++i) out[i] += push.gradient[i];
  }
}

void reduce_step(ShardChunk& chunk, const SyncBarrier::Step& step) {
  float* out = chunk.scratch.data();
  const size_t n = chunk.info.size;
  if (step.all_dense) {
    std::vector<const float*> gradients;
    for (const SyncBarrier::Pending* push : step.counted) gradients.push_back(push->request.gradient.data());
    sum_scale_and_regularize(gradients, chunk.values.data(), n, step.examples, chunk.l2, out);
  } else if (!step.any_sparse) {
    // Dense and factored pushes: summed row by row from the products, none multiplied out into
    // a dense buffer.
    const size_t columns = chunk.row_columns;
    std::vector<SliceRows> slices;
    for (const SyncBarrier::Pending* push : step.counted) {
      if (push->request.factors) {
        slices.push_back({false, push->factor_rows, push->factor_listed, push->factor_values});
      } else {
        slices.push_back({true, nullptr, 0, push->request.gradient.data()});
      }
    }
    sum_rows_scale_and_regularize(slices, chunk.info.offset / columns, n / columns, columns, chunk.values.data(),
                                  step.examples, chunk.l2, out);
  } else {
    for (size_t i = 0; i < step.counted.size(); ++i) accumulate_push(step.counted[i]->request, chunk, i == 0, out);
    nn::scale_and_regularize(out, chunk.values.data(), n, step.examples, chunk.l2);
  }
}

}  // namespace pstrain
