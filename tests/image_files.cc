// Test images and archives: image_files.h.
#include "tests/image_files.h"

#include <png.h>
#include <stdio.h>
#include <jpeglib.h>
#include <zip.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace pstrain::testing {
namespace {

// (Not doctest's REQUIRE: the bench's image_set tool links this file without doctest; a thrown
// error fails a test case all the same.)
void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("image_files: ") + what);
}

}  // namespace

std::vector<uint8_t> write_png(const std::vector<uint8_t>& pixels, uint32_t height, uint32_t width, uint32_t format) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = width;
  image.height = height;
  image.format = format;
  png_alloc_size_t size = 0;
  require(png_image_write_to_memory(&image, nullptr, &size, 0, pixels.data(), 0, nullptr) != 0, "png_image_write_to_memory (size)");
  std::vector<uint8_t> out(size);
  require(png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, nullptr) != 0, "png_image_write_to_memory");
  out.resize(size);
  return out;
}

std::vector<uint8_t> write_jpeg(const std::vector<uint8_t>& rgb, uint32_t height, uint32_t width) {
  jpeg_compress_struct info{};
  jpeg_error_mgr error{};
  info.err = jpeg_std_error(&error);
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = width;
  info.image_height = height;
  info.input_components = 3;
  info.in_color_space = JCS_RGB;
  jpeg_set_defaults(&info);
  jpeg_set_quality(&info, 95, TRUE);
  jpeg_start_compress(&info, TRUE);
  while (info.next_scanline < height) {
    JSAMPROW row = const_cast<uint8_t*>(rgb.data() + size_t{info.next_scanline} * width * 3);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  std::vector<uint8_t> out(buffer, buffer + size);
  jpeg_destroy_compress(&info);
  std::free(buffer);
  return out;
}

std::vector<uint8_t> gradient(uint32_t height, uint32_t width) {
  std::vector<uint8_t> rgb;
  for (uint32_t y = 0; y < height; ++y) {
    for (uint32_t x = 0; x < width; ++x) {
      rgb.push_back(static_cast<uint8_t>(x * 255 / (width - 1)));
      rgb.push_back(static_cast<uint8_t>(y * 255 / (height - 1)));
      rgb.push_back(static_cast<uint8_t>(128));
    }
  }
  return rgb;
}

void write_zip(const std::string& path, const ArchiveFiles& files) {
  int error = 0;
  zip_t* archive = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &error);
  require(archive != nullptr, "zip_open");
  for (const auto& [name, bytes] : files) {
    if (!name.empty() && name.back() == '/') {
      require(zip_dir_add(archive, name.c_str(), ZIP_FL_ENC_UTF_8) >= 0, "zip_dir_add");
      continue;
    }
    zip_source_t* source = zip_source_buffer(archive, bytes.data(), bytes.size(), 0);
    require(source != nullptr, "zip_source_buffer");
    const zip_int64_t index = zip_file_add(archive, name.c_str(), source, ZIP_FL_ENC_UTF_8);
    require(index >= 0, "zip_file_add");
    zip_set_file_compression(archive, static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0);  // images do not compress
  }
  require(zip_close(archive) == 0, "zip_close");  // (the buffers are read here: `files` outlives the call)
}

namespace {

void octal(char* field, size_t n, uint64_t value) {
  std::snprintf(field, n, "%0*llo", static_cast<int>(n - 1), static_cast<unsigned long long>(value));
}

std::string header(const std::string& name, uint64_t size, char type) {
  std::string h(512, '\0');
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  octal(h.data() + 100, 8, type == '5' ? 0755 : 0644);
  octal(h.data() + 108, 8, 0);
  octal(h.data() + 116, 8, 0);
  octal(h.data() + 124, 12, size);
  octal(h.data() + 136, 12, 1700000000);
  std::memset(h.data() + 148, ' ', 8);
  h[156] = type;
  std::memcpy(h.data() + 257, "ustar\0" "00", 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h.data() + 148, 8, "%06o", sum);
  return h;
}

std::string padded(const std::string& data) { return data + std::string((512 - data.size() % 512) % 512, '\0'); }

}  // namespace

void write_tar(const std::string& path, const ArchiveFiles& files) {
  std::string out;
  for (const auto& [name, bytes] : files) {
    const bool dir = !name.empty() && name.back() == '/';
    if (name.size() > 99) {
      std::string record = " path=" + name + "\n";
      size_t len = record.size() + 1;
      while (std::to_string(len).size() + record.size() != len) len = std::to_string(len).size() + record.size();
      record = std::to_string(len) + record;
      out += header("PaxHeader", record.size(), 'x') + padded(record);
    }
    out += header(name, dir ? 0 : bytes.size(), dir ? '5' : '0');
    if (!dir) out += padded(std::string(bytes.begin(), bytes.end()));
  }
  out += std::string(1024, '\0');
  std::ofstream(path, std::ios::binary) << out;
}

void write_tar_with_pax(const std::string& path, const std::string& pax, const std::string& name,
                        const std::vector<uint8_t>& bytes) {
  const std::string out = header("PaxHeader", pax.size(), 'x') + padded(pax) + header(name, bytes.size(), '0') +
                          padded(std::string(bytes.begin(), bytes.end())) + std::string(1024, '\0');
  std::ofstream(path, std::ios::binary) << out;
}

}  // namespace pstrain::testing
