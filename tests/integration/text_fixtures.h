// What the text integration tests share: archives of files as an upload's bytes, and seeded
// two-class reviews (pos, neg) as class folders of .txt files.
#pragma once

#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/image_files.h"
#include "tests/test_support.h"

namespace pstrain::testing {

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// `files` as a .zip (or a .tar): the body of a dataset upload.
inline std::string archive_of(const ArchiveFiles& files, bool zip) {
  const TempDir dir;
  const std::string path = dir.file(zip ? "a.zip" : "a.tar");
  if (zip) write_zip(path, files);
  else write_tar(path, files);
  return file_bytes(path);
}

// Seeded reviews: each document 6 to 20 words, mostly neutral, the rest the class's own words
// (one in five the other class's), with capitals and punctuation the tokenizer strips.
inline ArchiveFiles seeded_reviews(int per_class, uint32_t seed) {
  static const std::vector<std::string> neutral = {"the", "film", "a", "and", "plot", "actor", "scene", "it", "was", "of", "story", "music"};
  static const std::vector<std::string> good = {"Great", "wonderful!", "superb", "moving,", "loved", "brilliant."};
  static const std::vector<std::string> bad = {"Awful", "boring!", "dull", "weak,", "hated", "terrible."};
  std::mt19937 rng(seed);
  ArchiveFiles files;
  for (int i = 0; i < per_class; ++i) {
    for (int cls = 0; cls < 2; ++cls) {
      std::string text;
      const int words = 6 + static_cast<int>(rng() % 15);
      for (int w = 0; w < words; ++w) {
        const uint32_t r = rng() % 100;
        const auto& own = cls == 1 ? good : bad;
        const auto& other = cls == 1 ? bad : good;
        const std::string& word = r < 65 ? neutral[rng() % neutral.size()] : r < 93 ? own[rng() % own.size()] : other[rng() % other.size()];
        text += (w == 0 ? "" : rng() % 9 == 0 ? "\n" : " ") + word;
      }
      files.push_back({std::string(cls == 1 ? "pos/" : "neg/") + std::to_string(i) + ".txt", {text.begin(), text.end()}});
    }
  }
  return files;
}

}  // namespace pstrain::testing
