// Matrix views used by the layers.
//
// Activations are column-major matrices with one column per example: a column holds the example's
// values in TensorFlow's row-major [height, width, channels] order, so flatten and reshape cost
// nothing. Parameters are views into one flat buffer (see ParamLayout); a dense kernel stored
// row-major as [in, out] is, read column-major, the [out x in] matrix the forward product needs.
#pragma once

#include <Eigen/Core>

namespace pstrain::nn {

template <typename T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <typename T>
using MatMap = Eigen::Map<Mat<T>>;
template <typename T>
using ConstMatMap = Eigen::Map<const Mat<T>>;
template <typename T>
using VecMap = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstVecMap = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, 1>>;

}  // namespace pstrain::nn
