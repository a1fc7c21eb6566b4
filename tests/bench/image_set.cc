// image_set — writes image datasets as users have them, for tests/bench/image_upload_bench.sh:
//
//   image_set idx IMAGES.idx[.gz] LABELS.idx[.gz] OUT.zip|OUT.tar
//       an IDX pair (Fashion-MNIST, MNIST) as class folders "0".."9" of grayscale PNG files named
//       by their index in the IDX file (zero-padded, so a folder's sorted order is the file's);
//   image_set jpegs COUNT CLASSES SEED OUT.zip|OUT.tar
//       COUNT colour JPEGs of 24 to 160 pixels a side in CLASSES folders, drawn from SEED: each
//       class a hue over a seeded pattern of stripes and noise.
//
// The archive is a zip (stored entries: images do not compress) or a tar, by OUT's extension.
#include <png.h>

#include <cstdio>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/data/idx.h"
#include "tests/image_files.h"

namespace {

using pstrain::testing::ArchiveFiles;

void write(const std::string& out, const ArchiveFiles& files) {
  if (out.size() > 4 && out.substr(out.size() - 4) == ".tar") {
    pstrain::testing::write_tar(out, files);
  } else {
    pstrain::testing::write_zip(out, files);
  }
}

int idx(const std::string& images_path, const std::string& labels_path, const std::string& out) {
  const pstrain::IdxArray images = pstrain::read_idx(images_path, 3);
  const pstrain::IdxArray labels = pstrain::read_idx(labels_path, 1);
  const uint32_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  ArchiveFiles files;
  files.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<uint8_t> px(images.values.begin() + size_t{i} * h * w, images.values.begin() + size_t{i + 1} * h * w);
    char name[64];
    std::snprintf(name, sizeof name, "%u/%06u.png", unsigned{labels.values[i]}, i);
    files.emplace_back(name, pstrain::testing::write_png(px, h, w, PNG_FORMAT_GRAY));
  }
  write(out, files);
  std::cout << n << " PNG files of " << h << "x" << w << " written to " << out << "\n";
  return 0;
}

int jpegs(int count, int classes, uint32_t seed, const std::string& out) {
  std::mt19937 rng(seed);
  ArchiveFiles files;
  for (int i = 0; i < count; ++i) {
    const int label = static_cast<int>(rng() % static_cast<uint32_t>(classes));
    const uint32_t h = 24 + rng() % 137, w = 24 + rng() % 137;
    const uint32_t stripe = 3 + rng() % 9;
    std::vector<uint8_t> rgb(size_t{h} * w * 3);
    for (uint32_t y = 0; y < h; ++y) {
      for (uint32_t x = 0; x < w; ++x) {
        const bool on = ((x + y) / stripe) % 2 == 0;
        for (int c = 0; c < 3; ++c) {
          const int base = c == label % 3 ? 200 : 40 + 30 * ((label / 3 + c) % 3);
          rgb[(size_t{y} * w + x) * 3 + static_cast<size_t>(c)] =
              static_cast<uint8_t>(std::min(255, (on ? base : base / 2) + static_cast<int>(rng() % 40)));
        }
      }
    }
    char name[64];
    std::snprintf(name, sizeof name, "class-%02d/%06d.jpg", label, i);
    files.emplace_back(name, pstrain::testing::write_jpeg(rgb, h, w));
  }
  write(out, files);
  std::cout << count << " JPEG files in " << classes << " classes written to " << out << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "idx") return idx(args[1], args[2], args[3]);
  if (args.size() == 5 && args[0] == "jpegs") {
    return jpegs(std::stoi(args[1]), std::stoi(args[2]), static_cast<uint32_t>(std::stoul(args[3])), args[4]);
  }
  std::cerr << "usage: image_set idx IMAGES LABELS OUT.zip|OUT.tar\n"
               "       image_set jpegs COUNT CLASSES SEED OUT.zip|OUT.tar\n";
  return 2;
}
