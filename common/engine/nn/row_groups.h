// A first dense layer's pre-activation split by groups of kernel rows: W^T x + b computed as
// b + P_0 + P_1 + ..., where P_g multiplies the kernel rows of group g (the rows one parameter
// server holds) by their input features, added in group order.
//
// Why: a parameter server that holds part of the first layer's kernel can compute its P_g for a
// worker's next batch right after the update, and reply with that (out x examples floats) instead
// of the updated rows (docs/DESIGN-NOTES.md, "Forward on the servers"). For the result to be the
// same whichever side computes a group, every P_g in the worker's model, the standalone trainer
// and the server goes through row_group_product below, on the same rows and examples, on 64-byte
// aligned operands.
//
// Thread rules: plain functions; the scratch belongs to the caller.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/base/aligned.h"

namespace pstrain::nn {

// result (columns x examples, column-major, 64-byte aligned) = sum over i of kernel_rows[i]
// (columns floats) times inputs[i, :] (inputs: rows.size() x examples, column-major, leading
// dimension kernel_rows.size(), 64-byte aligned). `gathered` is scratch for the rows, back to back.
template <typename T>
void row_group_product(std::span<const T* const> kernel_rows, int64_t columns, const T* inputs, int64_t examples,
                       std::vector<T, CacheAlignedAllocator<T>>& gathered, T* result);

}  // namespace pstrain::nn
