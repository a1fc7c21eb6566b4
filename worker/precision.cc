#include "worker/precision.h"

#include "common/engine/nn/onednn_conv.h"

namespace pstrain {

std::string apply_precision(Precision precision, nn::DataParallelModel<float>& model) {
  if (precision == Precision::kFloat32) return "";
  if (!nn::onednn_bf16()) {
    return std::string("mixed_bfloat16: this CPU computes no bfloat16 products (oneDNN ") + nn::onednn_isa() +
           "): training in float32";
  }
  const auto switched = model.use_bf16_products();
  return "mixed_bfloat16: " + std::to_string(switched.convolutions) + " convolution(s) and " +
         std::to_string(switched.dense) + " dense layer(s) compute their products in bfloat16 (oneDNN " +
         nn::onednn_isa() + "), dense kernel gradients too (simd::product_bf16); " +
         (switched.one_channel > 0 ? std::to_string(switched.one_channel) + " one-channel convolution(s), " : std::string()) +
         "weights, optimizer, losses and every other layer float32";
}

}  // namespace pstrain
