#include "common/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <memory>

#include "common/base/error.h"

namespace pstrain {
namespace {

// The largest file we are willing to load (4 GiB of values): guards against a corrupt header
// asking for an absurd allocation.
constexpr uint64_t kMaxValues = uint64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw DataError(path + ": " + what);
}

// Reads exactly `n` bytes or reports how many were available. A piece of a larger item says so:
// `before` bytes of it were read earlier, and it has `total` bytes in all.
void read_exact(gzFile file, const std::string& path, void* dst, size_t n, const char* what, uint64_t before = 0,
                uint64_t total = 0) {
  auto* out = static_cast<uint8_t*>(dst);
  size_t done = 0;
  while (done < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
    const int got = gzread(file, out + done, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(file, &errnum);
      fail(path, std::string("read error (") + (msg ? msg : "unknown") + ") while reading " + what);
    }
    if (got == 0) {
      fail(path, std::string("truncated: ") + what + " needs " + std::to_string(total != 0 ? total : n) +
                     " bytes but the file ends after " + std::to_string(before + done));
    }
    done += static_cast<size_t>(got);
  }
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  GzFile file(gzopen(path.c_str(), "rb"));
  if (!file) fail(path, "cannot open (missing or unreadable)");
  gzbuffer(file.get(), 1 << 20);

  uint8_t magic[4];
  read_exact(file.get(), path, magic, 4, "the magic number");
  if (magic[0] != 0 || magic[1] != 0) {
    fail(path, "wrong magic number: not an IDX file (first two bytes must be zero)");
  }
  if (magic[2] != 0x08) {
    fail(path, "unsupported IDX value type 0x" + std::to_string(magic[2]) +
                   " (only unsigned bytes, 0x08, are supported)");
  }
  const int rank = magic[3];
  if (rank != expected_rank) {
    fail(path, "wrong number of dimensions: header says " + std::to_string(rank) + ", expected " +
                   std::to_string(expected_rank));
  }

  IdxArray array;
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    uint8_t raw[4];
    read_exact(file.get(), path, raw, 4, "the dimension sizes");
    const uint32_t size = big_endian_u32(raw);
    if (size == 0) fail(path, "dimension " + std::to_string(d) + " is zero");
    array.dims.push_back(size);
    count *= size;
    if (count > kMaxValues) fail(path, "dimensions describe more than 4 GiB of data");
  }

  // The values are read in pieces, the vector growing as they arrive: a header that claims more
  // than the file holds fails as truncated without first allocating (and zeroing) the claimed
  // size, up to 4 GiB for a file of 20 bytes (found by fuzz/datasets_fuzz.cc).
  constexpr uint64_t kPiece = uint64_t{16} << 20;
  while (array.values.size() < count) {
    const size_t done = array.values.size();
    const size_t n = static_cast<size_t>(std::min(count - done, kPiece));
    array.values.resize(done + n);
    read_exact(file.get(), path, array.values.data() + done, n, "the values", done, count);
  }
  uint8_t extra;
  if (gzread(file.get(), &extra, 1) > 0) {
    fail(path, "has trailing data after the " + std::to_string(count) + " values its header declares");
  }
  return array;
}

}  // namespace pstrain
