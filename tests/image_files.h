// Image files and archives written for tests: PNGs (libpng) and JPEGs (libjpeg) from pixels, and
// .zip (libzip) and .tar (ustar, written here) archives of named files, as users make them.
//
// Failures throw std::runtime_error (no doctest here: tools link it too).
//
// Thread rules: pure functions; reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace pstrain::testing {

// `pixels` (height x width x the format's channels) as a PNG; `format` is libpng's
// PNG_FORMAT_GRAY, _RGB, _RGBA, ...
std::vector<uint8_t> write_png(const std::vector<uint8_t>& pixels, uint32_t height, uint32_t width, uint32_t format);
// RGB `pixels` as a JPEG of quality 95.
std::vector<uint8_t> write_jpeg(const std::vector<uint8_t>& rgb, uint32_t height, uint32_t width);
// A smooth RGB gradient (JPEG keeps it within a few levels).
std::vector<uint8_t> gradient(uint32_t height, uint32_t width);

using ArchiveFiles = std::vector<std::pair<std::string, std::vector<uint8_t>>>;  // path, bytes; a path
                                                                                   // ending in '/' is a folder
void write_zip(const std::string& path, const ArchiveFiles& files);
// A POSIX ustar archive; paths over 100 bytes get a pax header (as GNU tar writes them).
void write_tar(const std::string& path, const ArchiveFiles& files);
// A tar of one file preceded by a pax header holding `pax` as it is (malformed ones included).
void write_tar_with_pax(const std::string& path, const std::string& pax, const std::string& name,
                        const std::vector<uint8_t>& bytes);

}  // namespace pstrain::testing
