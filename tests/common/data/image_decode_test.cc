// Image files decoded and resized (common/data/image_decode.h): PNGs written here with libpng
// decode to their exact pixels in every colour mode, JPEGs (lossy) to within a few levels, and
// anything else (a truncated or corrupt file, another format, empty bytes) is a DataError naming
// the file; the bilinear resize against values computed by hand.
#include "common/data/image_decode.h"

#include <doctest/doctest.h>
#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "tests/image_files.h"

namespace pstrain {
namespace {

using testing::gradient;
using testing::write_jpeg;
using testing::write_png;

std::string error_of(const std::vector<uint8_t>& bytes, const std::string& name) {
  try {
    decode_image(bytes, ColorMode::kRgb, name);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("image decode - PNGs give their exact pixels, a grayscale one in every colour mode") {
  std::vector<uint8_t> gray;
  for (int i = 0; i < 28 * 20; ++i) gray.push_back(static_cast<uint8_t>((i * 37) % 256));
  const std::vector<uint8_t> png = write_png(gray, 28, 20, PNG_FORMAT_GRAY);
  CHECK(image_format(png) == "png");
  const Image g = decode_image(png, ColorMode::kGrayscale, "a.png");
  CHECK(g.height == 28);
  CHECK(g.width == 20);
  CHECK(g.channels == 1);
  CHECK(g.pixels == gray);  // what Fashion-MNIST as PNG files needs: the IDX bytes again
  const Image rgb = decode_image(png, ColorMode::kRgb, "a.png");
  REQUIRE(rgb.pixels.size() == gray.size() * 3);
  for (size_t i = 0; i < gray.size(); ++i) {
    CHECK(rgb.pixels[3 * i] == gray[i]);
    CHECK(rgb.pixels[3 * i + 2] == gray[i]);
  }
  const Image rgba = decode_image(png, ColorMode::kRgba, "a.png");
  CHECK(rgba.pixels[3] == 255);  // opaque
  // A colour PNG: rgb exact, grayscale by the luma weights.
  const std::vector<uint8_t> colour = gradient(9, 7);
  const std::vector<uint8_t> cpng = write_png(colour, 9, 7, PNG_FORMAT_RGB);
  CHECK(decode_image(cpng, ColorMode::kRgb, "c.png").pixels == colour);
  const Image cg = decode_image(cpng, ColorMode::kGrayscale, "c.png");
  for (size_t i = 0; i < 9 * 7; ++i) {
    const double y = 0.299 * colour[3 * i] + 0.587 * colour[3 * i + 1] + 0.114 * colour[3 * i + 2];
    CHECK(std::abs(cg.pixels[i] - y) <= 0.5 + 1e-9);
  }
}

TEST_CASE("image decode - a JPEG gives its pixels within a few levels, in colour and as grayscale") {
  const std::vector<uint8_t> colour = gradient(32, 48);
  const std::vector<uint8_t> jpeg = write_jpeg(colour, 32, 48);
  CHECK(image_format(jpeg) == "jpeg");
  const Image rgb = decode_image(jpeg, ColorMode::kRgb, "p.jpg");
  CHECK(rgb.height == 32);
  CHECK(rgb.width == 48);
  REQUIRE(rgb.pixels.size() == colour.size());
  int worst = 0;
  for (size_t i = 0; i < colour.size(); ++i) worst = std::max(worst, std::abs(rgb.pixels[i] - colour[i]));
  CHECK(worst <= 8);
  const Image gray = decode_image(jpeg, ColorMode::kGrayscale, "p.jpg");
  CHECK(gray.channels == 1);
  CHECK(gray.pixels.size() == 32u * 48u);
  CHECK(decode_image(jpeg, ColorMode::kRgba, "p.jpg").pixels[3] == 255);
}

TEST_CASE("image decode - truncated, corrupt, empty and other files are errors naming the file") {
  const std::vector<uint8_t> png = write_png(std::vector<uint8_t>(64, 7), 8, 8, PNG_FORMAT_GRAY);
  std::vector<uint8_t> cut(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() / 2));
  CHECK(error_of(cut, "cats/cut.png").find("cats/cut.png") == 0);
  std::vector<uint8_t> broken = png;
  for (size_t i = 40; i < broken.size(); i += 3) broken[i] ^= 0x5a;
  CHECK(error_of(broken, "cats/broken.png").find("cats/broken.png: ") == 0);
  const std::vector<uint8_t> jpeg = write_jpeg(gradient(16, 16), 16, 16);
  std::vector<uint8_t> jcut(jpeg.begin(), jpeg.begin() + 20);
  CHECK(error_of(jcut, "dogs/cut.jpg").find("dogs/cut.jpg: a JPEG that does not decode") == 0);
  CHECK(error_of({}, "empty.png").find("empty.png: neither a PNG nor a JPEG") == 0);
  const std::string text = "GIF89a not supported";
  CHECK(error_of({text.begin(), text.end()}, "x.gif").find("x.gif: neither a PNG nor a JPEG") == 0);
}

TEST_CASE("image resize - bilinear with half-pixel centres, as computed by hand") {
  // 2 x 2 -> 4 x 4: output pixel i samples at (i + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25
  // (clamped to 0 and 1 at the edges).
  Image in{2, 2, 1, {0, 100, 200, 40}};
  const Image up = resize_bilinear(in, 4, 4);
  CHECK(up.pixels[0] == 0);                // (0, 0): clamped to the corner
  CHECK(up.pixels[1] == 25);               // x 0.25 on row 0: 0 + 0.25 * 100
  CHECK(up.pixels[2] == 75);               // x 0.75
  CHECK(up.pixels[3] == 100);
  // (y 0.25, x 0.25): top 0 + 0.25 * 100 = 25, bottom 200 + 0.25 * (40 - 200) = 160, then
  // 25 + 0.25 * (160 - 25) = 58.75, rounded to 59.
  CHECK(up.pixels[5] == 59);
  CHECK(up.pixels[15] == 40);
  // 4 x 4 -> 2 x 2: each output samples at 1.5 in the middle of a 2 x 2 block: its mean.
  Image big{4, 4, 1, {}};
  for (int i = 0; i < 16; ++i) big.pixels.push_back(static_cast<uint8_t>(i * 10));
  const Image down = resize_bilinear(big, 2, 2);
  CHECK(down.pixels == std::vector<uint8_t>{25, 45, 105, 125});
  CHECK(resize_bilinear(big, 4, 4).pixels == big.pixels);
  CHECK_THROWS_AS(resize_bilinear(big, 0, 4), DataError);
}

}  // namespace pstrain
