// Encoded images as users have them (PNG, JPEG) decoded to 8-bit pixels, and resized, for image
// datasets given as folders of files (Keras' image_dataset_from_directory: docs/DESIGN-NOTES.md
// "Dataset store (issue 50)"). Decoding is libpng's and libjpeg-turbo's; a file that does not
// decode is a DataError naming it, never a crash or a partial image.
//
// Colour modes are Keras' `color_mode`: grayscale (1 channel), rgb (3), rgba (4). A file of
// another layout is converted by its decoder: a colour image to grayscale by libjpeg's
// (Y = 0.299 R + 0.587 G + 0.114 B) or libpng's conversion, grayscale to rgb by repeating the
// value, an alpha channel added as opaque or dropped.
//
// Resizing is bilinear with half-pixel centres and no antialiasing, tf.image.resize's default
// (what image_dataset_from_directory applies to every image), rounded to the nearest uint8 for
// storage (Keras keeps the float values: at most 0.5 / 255 apart once scaled).
//
// Thread rules: pure functions; reentrant.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pstrain {

enum class ColorMode { kGrayscale, kRgb, kRgba };
uint32_t color_mode_channels(ColorMode mode);

struct Image {
  uint32_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // height x width x channels, row-major
};

// Which decoder `bytes` needs, from its signature: "png", "jpeg", or "" for neither.
std::string image_format(std::span<const uint8_t> bytes);

// Decodes a PNG or JPEG into `mode`'s channels. Throws DataError naming `name` (and what is
// wrong) for anything else, a truncated or corrupt file, or an image over 2^26 pixels.
Image decode_image(std::span<const uint8_t> bytes, ColorMode mode, const std::string& name);

// `in` resized to height x width (each at least 1), bilinear with half-pixel centres.
Image resize_bilinear(const Image& in, uint32_t height, uint32_t width);

}  // namespace pstrain
