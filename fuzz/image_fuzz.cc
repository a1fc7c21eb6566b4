// Fuzz target: image files as uploads bring them (common/data/image_decode.h), PNG and JPEG
// through libpng and libjpeg-turbo, on arbitrary bytes. Only DataError is an expected answer.
// What decodes must be consistent: as many pixels as its size and colour mode say, in every
// mode, and a resize of it the size asked for. run.sh gives this target -malloc_limit_mb=600: a
// header may make the decoder allocate the image it claims (at most 2^26 pixels as RGBA,
// 256 MiB), never more.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "common/base/error.h"
#include "common/data/image_decode.h"
#include "fuzz/fuzz_check.h"

namespace {

using pstrain::fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace pstrain;
  const std::span<const uint8_t> bytes(data, size);
  for (ColorMode mode : {ColorMode::kGrayscale, ColorMode::kRgb, ColorMode::kRgba}) {
    try {
      const Image image = decode_image(bytes, mode, "fuzz");
      check(image.channels == color_mode_channels(mode), "channels of the mode");
      check(image.height > 0 && image.width > 0, "a decoded image has pixels");
      check(image.pixels.size() == size_t{image.height} * image.width * image.channels, "pixels as the size says");
      const Image small = resize_bilinear(image, 5, 7);
      check(small.pixels.size() == 5u * 7u * image.channels, "a resize of the size asked");
    } catch (const DataError&) {
    }
  }
  return 0;
}
