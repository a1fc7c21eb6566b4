#include "common/data/image_decode.h"

#include <png.h>
#include <stdio.h>  // jpeglib.h needs FILE
#include <jpeglib.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>

#include "common/base/error.h"

namespace pstrain {
namespace {

constexpr uint64_t kMaxPixels = uint64_t{1} << 26;  // 64 Mpixels: 256 MiB as RGBA

void check_size(uint64_t height, uint64_t width, const std::string& name) {
  if (height == 0 || width == 0) throw DataError(name + ": an image of no pixels");
  if (height * width > kMaxPixels) {
    throw DataError(name + ": " + std::to_string(width) + " x " + std::to_string(height) + " pixels, more than " +
                    std::to_string(kMaxPixels) + " allowed");
  }
}

// RGBA pixels to `mode`: grayscale as Y = 0.299 R + 0.587 G + 0.114 B (exact for gray inputs).
Image from_rgba(const std::vector<uint8_t>& rgba, uint32_t height, uint32_t width, ColorMode mode) {
  Image out{height, width, color_mode_channels(mode), {}};
  const size_t n = size_t{height} * width;
  out.pixels.resize(n * out.channels);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = rgba.data() + 4 * i;
    switch (mode) {
      case ColorMode::kGrayscale:
        out.pixels[i] = static_cast<uint8_t>((299u * p[0] + 587u * p[1] + 114u * p[2] + 500u) / 1000u);
        break;
      case ColorMode::kRgb: std::memcpy(&out.pixels[3 * i], p, 3); break;
      case ColorMode::kRgba: std::memcpy(&out.pixels[4 * i], p, 4); break;
    }
  }
  return out;
}

Image decode_png(std::span<const uint8_t> bytes, ColorMode mode, const std::string& name) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  if (png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    throw DataError(name + ": not a PNG it can read (" + why + ")");
  }
  try {
    check_size(image.height, image.width, name);
  } catch (...) {
    png_image_free(&image);
    throw;
  }
  image.format = PNG_FORMAT_RGBA;  // 8 bits a channel, sRGB; converted to `mode` below
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(image));
  if (png_image_finish_read(&image, nullptr, rgba.data(), 0, nullptr) == 0) {
    const std::string why = image.message;
    png_image_free(&image);
    throw DataError(name + ": a PNG that does not decode (" + why + ")");
  }
  return from_rgba(rgba, image.height, image.width, mode);
}

// libjpeg reports errors through error_exit, which must not return: it jumps back here.
struct JpegError {
  jpeg_error_mgr manager;
  std::jmp_buf back;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr info) {
  auto* error = reinterpret_cast<JpegError*>(info->err);
  (*info->err->format_message)(info, error->message);
  std::longjmp(error->back, 1);
}

void jpeg_quiet(j_common_ptr, int) {}  // warnings (e.g. extraneous bytes) are not errors

// The decode itself, with no object that has a destructor: a longjmp out of libjpeg skips them.
// Returns false with `error->message` set on failure.
bool jpeg_decode(const uint8_t* data, size_t size, J_COLOR_SPACE space, JpegError* error, jpeg_decompress_struct* info,
                 std::vector<uint8_t>* pixels, uint32_t* height, uint32_t* width, uint32_t* channels) {
  info->err = jpeg_std_error(&error->manager);
  error->manager.error_exit = jpeg_error_exit;
  error->manager.emit_message = jpeg_quiet;
  if (setjmp(error->back) != 0) {
    jpeg_destroy_decompress(info);
    return false;
  }
  jpeg_create_decompress(info);
  jpeg_mem_src(info, data, static_cast<unsigned long>(size));
  jpeg_read_header(info, TRUE);
  if (uint64_t{info->image_height} * info->image_width > kMaxPixels || info->image_height == 0 ||
      info->image_width == 0) {
    std::snprintf(error->message, sizeof error->message, "%u x %u pixels, not 1 to %llu", info->image_width,
                  info->image_height, static_cast<unsigned long long>(kMaxPixels));
    jpeg_destroy_decompress(info);
    return false;
  }
  info->out_color_space = space;
  jpeg_start_decompress(info);
  *height = info->output_height;
  *width = info->output_width;
  *channels = static_cast<uint32_t>(info->output_components);
  const size_t row = size_t{*width} * *channels;
  pixels->resize(row * *height);
  while (info->output_scanline < info->output_height) {
    JSAMPROW rows[1] = {pixels->data() + row * info->output_scanline};
    jpeg_read_scanlines(info, rows, 1);
  }
  jpeg_finish_decompress(info);
  jpeg_destroy_decompress(info);
  return true;
}

Image decode_jpeg(std::span<const uint8_t> bytes, ColorMode mode, const std::string& name) {
  const J_COLOR_SPACE space =
      mode == ColorMode::kGrayscale ? JCS_GRAYSCALE : mode == ColorMode::kRgb ? JCS_RGB : JCS_EXT_RGBA;
  JpegError error{};
  jpeg_decompress_struct info{};
  Image out;
  if (!jpeg_decode(bytes.data(), bytes.size(), space, &error, &info, &out.pixels, &out.height, &out.width,
                   &out.channels)) {
    throw DataError(name + ": a JPEG that does not decode (" + error.message + ")");
  }
  if (out.channels != color_mode_channels(mode)) {
    throw DataError(name + ": a JPEG decoded to " + std::to_string(out.channels) + " channels, not " +
                    std::to_string(color_mode_channels(mode)));
  }
  return out;
}

}  // namespace

uint32_t color_mode_channels(ColorMode mode) {
  switch (mode) {
    case ColorMode::kGrayscale: return 1;
    case ColorMode::kRgb: return 3;
    case ColorMode::kRgba: return 4;
  }
  return 0;
}

std::string image_format(std::span<const uint8_t> bytes) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return "png";
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return "jpeg";
  return "";
}

Image decode_image(std::span<const uint8_t> bytes, ColorMode mode, const std::string& name) {
  const std::string format = image_format(bytes);
  if (format == "png") return decode_png(bytes, mode, name);
  if (format == "jpeg") return decode_jpeg(bytes, mode, name);
  throw DataError(name + ": neither a PNG nor a JPEG (" + std::to_string(bytes.size()) + " bytes)");
}

Image resize_bilinear(const Image& in, uint32_t height, uint32_t width) {
  if (height == 0 || width == 0) throw DataError("an image resized to no pixels");
  if (height == in.height && width == in.width) return in;
  Image out{height, width, in.channels, {}};
  out.pixels.resize(size_t{height} * width * in.channels);
  const double sy = static_cast<double>(in.height) / height, sx = static_cast<double>(in.width) / width;
  // One axis' sample: the two source indices and the weight of the second (half-pixel centres,
  // clamped at the edges).
  struct Tap {
    uint32_t a, b;
    double t;
  };
  const auto taps = [](uint32_t out_n, uint32_t in_n, double scale) {
    std::vector<Tap> v(out_n);
    for (uint32_t i = 0; i < out_n; ++i) {
      const double at = std::clamp((i + 0.5) * scale - 0.5, 0.0, static_cast<double>(in_n - 1));
      const auto a = static_cast<uint32_t>(std::floor(at));
      v[i] = {a, std::min(a + 1, in_n - 1), at - a};
    }
    return v;
  };
  const std::vector<Tap> ys = taps(height, in.height, sy), xs = taps(width, in.width, sx);
  const uint32_t c_n = in.channels;
  const auto px = [&](uint32_t y, uint32_t x, uint32_t c) {
    return static_cast<double>(in.pixels[(size_t{y} * in.width + x) * c_n + c]);
  };
  for (uint32_t y = 0; y < height; ++y) {
    const Tap& ty = ys[y];
    for (uint32_t x = 0; x < width; ++x) {
      const Tap& tx = xs[x];
      for (uint32_t c = 0; c < c_n; ++c) {
        const double top = px(ty.a, tx.a, c) + (px(ty.a, tx.b, c) - px(ty.a, tx.a, c)) * tx.t;
        const double bottom = px(ty.b, tx.a, c) + (px(ty.b, tx.b, c) - px(ty.b, tx.a, c)) * tx.t;
        const double v = top + (bottom - top) * ty.t;
        out.pixels[(size_t{y} * width + x) * c_n + c] = static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return out;
}

}  // namespace pstrain
