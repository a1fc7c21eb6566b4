// Zip (libzip) and tar (POSIX ustar, pax, GNU long names) archives listed and read by entry:
// archive.h.
#include "common/data/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>

#include "common/data/format_parts.h"

namespace pstrain {
namespace {

using format_detail::fail;
using format_detail::Kind;

// Caps on a listing, so that it stays small beside the archive: a path's bytes, the entries.
constexpr size_t kMaxPath = 4096;
constexpr size_t kMaxEntries = 20'000'000;

// "a/./b/" -> "a/b"; "./x" -> "x". Empty and "." components go; ".." stays (the folder reader
// refuses it: no entry may name a path outside the archive).
std::string clean_path(const std::string& raw) {
  std::string out;
  size_t start = 0;
  while (start <= raw.size()) {
    size_t slash = raw.find('/', start);
    if (slash == std::string::npos) slash = raw.size();
    const std::string part = raw.substr(start, slash - start);
    if (!part.empty() && part != ".") out += (out.empty() ? "" : "/") + part;
    start = slash + 1;
  }
  return out;
}

struct ZipDeleter {
  void operator()(zip_t* z) const { zip_discard(z); }
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};

class ZipArchive final : public Archive {
 public:
  ZipArchive(const std::string& path, std::string source) : source_(std::move(source)) {
    int error = 0;
    zip_.reset(zip_open(path.c_str(), ZIP_RDONLY, &error));
    if (!zip_) {
      zip_error_t ze;
      zip_error_init_with_code(&ze, error);
      const std::string why = zip_error_strerror(&ze);
      zip_error_fini(&ze);
      fail(Kind::kUnreadable, source_ + ": cannot open as a zip archive: " + why);
    }
    const zip_int64_t n = zip_get_num_entries(zip_.get(), 0);
    for (zip_int64_t i = 0; i < n; ++i) {
      zip_stat_t st;
      zip_stat_init(&st);
      if (zip_stat_index(zip_.get(), static_cast<zip_uint64_t>(i), 0, &st) != 0 || !(st.valid & ZIP_STAT_NAME)) {
        fail(Kind::kUnreadable, source_ + ": entry " + std::to_string(i) + " cannot be read: " + zip_strerror(zip_.get()));
      }
      ArchiveEntry e;
      const std::string name = st.name;
      e.type = !name.empty() && name.back() == '/' ? ArchiveEntry::Type::kDirectory : ArchiveEntry::Type::kFile;
      e.path = clean_path(name);
      e.size = (st.valid & ZIP_STAT_SIZE) ? st.size : 0;
      e.index = static_cast<uint64_t>(i);
      if (e.path.empty()) continue;
      if (e.path.size() > kMaxPath) fail(Kind::kUnreadable, source_ + ": entry " + std::to_string(i) + ": a path over " + std::to_string(kMaxPath) + " bytes");
      if (entries_.size() >= kMaxEntries) fail(Kind::kTooLarge, source_ + ": more than " + std::to_string(kMaxEntries) + " entries");
      entries_.push_back(std::move(e));
    }
  }

  std::vector<uint8_t> read(const ArchiveEntry& entry, uint64_t max_bytes) override {
    const std::string where = source_ + ":" + entry.path;
    if (entry.size > max_bytes) {
      fail(Kind::kTooLarge, where + ": " + std::to_string(entry.size) + " bytes, over the cap of " + std::to_string(max_bytes));
    }
    std::unique_ptr<zip_file_t, ZipDeleter> file(zip_fopen_index(zip_.get(), entry.index, 0));
    if (!file) fail(Kind::kUnreadable, where + ": cannot open: " + zip_strerror(zip_.get()));
    std::vector<uint8_t> bytes(entry.size);
    uint64_t done = 0;
    while (done < bytes.size()) {
      const zip_int64_t got = zip_fread(file.get(), bytes.data() + done, bytes.size() - done);
      if (got < 0) fail(Kind::kUnreadable, where + ": cannot read: " + zip_error_strerror(zip_file_get_error(file.get())));
      if (got == 0) fail(Kind::kUnreadable, where + ": the entry ends before its recorded size");
      done += static_cast<uint64_t>(got);
    }
    return bytes;
  }

 private:
  std::string source_;
  std::unique_ptr<zip_t, ZipDeleter> zip_;
};

// A tar header field of digits in octal (or GNU's base-256 for large sizes).
uint64_t tar_number(const char* field, size_t n, const std::string& where) {
  if (n > 0 && (static_cast<unsigned char>(field[0]) & 0x80) != 0) {
    uint64_t v = static_cast<unsigned char>(field[0]) & 0x7f;
    for (size_t i = 1; i < n; ++i) {
      if (v >> 56) fail(Kind::kUnreadable, where + ": a tar header number is too large");
      v = (v << 8) | static_cast<unsigned char>(field[i]);
    }
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < n && field[i] == ' ') ++i;
  for (; i < n && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60) fail(Kind::kUnreadable, where + ": a tar header number is too large");
    v = v * 8 + static_cast<uint64_t>(field[i] - '0');
  }
  if (i < n && field[i] != 0 && field[i] != ' ') fail(Kind::kUnreadable, where + ": a tar header number is not octal");
  return v;
}

std::string tar_string(const char* field, size_t n) { return std::string(field, strnlen(field, n)); }

class TarArchive final : public Archive {
 public:
  TarArchive(const std::string& path, std::string source) : source_(std::move(source)) {
    fd_.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_.fd < 0) fail(Kind::kUnreadable, source_ + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_.fd, &st) != 0) fail(Kind::kUnreadable, source_ + ": cannot stat: " + std::strerror(errno));
    file_bytes_ = static_cast<uint64_t>(st.st_size);
    list();
  }

  std::vector<uint8_t> read(const ArchiveEntry& entry, uint64_t max_bytes) override {
    const std::string where = source_ + ":" + entry.path;
    if (entry.size > max_bytes) {
      fail(Kind::kTooLarge, where + ": " + std::to_string(entry.size) + " bytes, over the cap of " + std::to_string(max_bytes));
    }
    std::vector<uint8_t> bytes(entry.size);
    read_at(entry.index, bytes.data(), bytes.size(), where);
    return bytes;
  }

 private:
  void read_at(uint64_t offset, void* data, size_t n, const std::string& where) {
    size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(fd_.fd, static_cast<char*>(data) + done, n - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(Kind::kUnreadable, where + ": cannot read: " + std::strerror(errno));
      if (got == 0) fail(Kind::kUnreadable, where + ": the tar archive ends inside an entry (truncated)");
      done += static_cast<size_t>(got);
    }
  }

  // pax extended header records: "<length> <key>=<value>\n", the length counting the whole
  // record (its own digits, the space and the newline).
  static std::map<std::string, std::string> pax_records(const std::string& text, const std::string& where) {
    std::map<std::string, std::string> out;
    size_t at = 0;
    while (at < text.size()) {
      const size_t space = text.find(' ', at);
      uint64_t len = 0;
      const auto [end, ec] = std::from_chars(text.data() + at, text.data() + (space == std::string::npos ? at : space), len);
      if (space == std::string::npos || ec != std::errc() || end != text.data() + space || len <= space - at + 1 ||
          len > text.size() - at || text[at + len - 1] != '\n') {
        fail(Kind::kUnreadable, where + ": a malformed pax header");
      }
      const std::string record = text.substr(space + 1, at + len - 1 - (space + 1));
      const size_t eq = record.find('=');
      if (eq != std::string::npos) out[record.substr(0, eq)] = record.substr(eq + 1);
      at += len;
    }
    return out;
  }

  void list() {
    uint64_t offset = 0;
    std::string long_name;  // from a GNU 'L' entry or a pax 'path', for the next entry
    char h[512];
    for (;;) {
      if (offset + 512 > file_bytes_) {
        if (offset == file_bytes_ && offset > 0) return;  // no end blocks: accepted, as GNU tar does
        fail(Kind::kUnreadable, source_ + ": not a tar archive, or truncated (a header at byte " + std::to_string(offset) +
                                    " runs past the end)");
      }
      read_at(offset, h, sizeof h, source_);
      if (std::all_of(h, h + 512, [](char c) { return c == 0; })) return;  // the end blocks
      const std::string where = source_ + " (tar header at byte " + std::to_string(offset) + ")";
      if (offset == 0 && static_cast<unsigned char>(h[0]) == 0x1f && static_cast<unsigned char>(h[1]) == 0x8b) {
        fail(Kind::kUnreadable, source_ + ": a gzip-compressed file; send the tar uncompressed (images do not compress) or a zip");
      }
      uint64_t sum = 0;
      for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
      bool sum_matches = false;
      try {
        sum_matches = tar_number(h + 148, 8, where) == sum;
      } catch (const DatasetFormatError&) {
      }
      if (!sum_matches) fail(Kind::kUnreadable, where + ": not a tar archive (bad header checksum), nor a zip");
      const uint64_t size = tar_number(h + 124, 12, where);
      const char type = h[156];
      const uint64_t data = offset + 512;
      if (data + size > file_bytes_ || size > file_bytes_) {
        fail(Kind::kUnreadable, where + ": the archive ends inside an entry (truncated)");
      }
      offset = data + (size + 511) / 512 * 512;
      if (type == 'L' || type == 'x') {
        if (size > (1u << 20)) fail(Kind::kUnreadable, where + ": an extended header over 1 MiB");
        std::string text(size, '\0');
        read_at(data, text.data(), size, where);
        if (type == 'L') {
          long_name = tar_string(text.data(), text.size());
        } else {
          const auto records = pax_records(text, where);
          if (const auto it = records.find("path"); it != records.end()) long_name = it->second;
        }
        continue;
      }
      if (type == 'g' || type == 'K') continue;  // global pax settings, GNU long link names
      std::string name = tar_string(h, 100);
      if (std::memcmp(h + 257, "ustar\0", 6) == 0) {  // POSIX (GNU's "ustar  " keeps other fields there)
        const std::string prefix = tar_string(h + 345, 155);
        if (!prefix.empty()) name = prefix + "/" + name;
      }
      if (!long_name.empty()) name = std::move(long_name);
      long_name.clear();
      if (name.size() > kMaxPath) fail(Kind::kUnreadable, where + ": a path over " + std::to_string(kMaxPath) + " bytes");
      if (entries_.size() >= kMaxEntries) fail(Kind::kTooLarge, source_ + ": more than " + std::to_string(kMaxEntries) + " entries");
      ArchiveEntry e;
      e.type = (type == '0' || type == 0 || type == '7') ? ArchiveEntry::Type::kFile
               : type == '5'                             ? ArchiveEntry::Type::kDirectory
                                                         : ArchiveEntry::Type::kOther;
      if (e.type == ArchiveEntry::Type::kFile && !name.empty() && name.back() == '/') e.type = ArchiveEntry::Type::kDirectory;
      e.path = clean_path(name);
      e.size = size;
      e.index = data;
      if (!e.path.empty()) entries_.push_back(std::move(e));
    }
  }

  // Closed on destruction, also when the constructor throws (a refused upload leaks nothing).
  struct Fd {
    int fd = -1;
    Fd() = default;
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  };
  std::string source_;
  Fd fd_;
  uint64_t file_bytes_ = 0;
};

class DirectoryArchive final : public Archive {
 public:
  DirectoryArchive(const std::string& dir, std::string source) : dir_(dir), source_(std::move(source)) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::recursive_directory_iterator it(dir, fs::directory_options::none, ec), end;
    if (ec) fail(Kind::kUnreadable, source_ + ": cannot list: " + ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) fail(Kind::kUnreadable, source_ + ": cannot list: " + ec.message());
      ArchiveEntry e;
      e.path = it->path().lexically_relative(dir).generic_string();
      if (entries_.size() >= kMaxEntries) fail(Kind::kTooLarge, source_ + ": more than " + std::to_string(kMaxEntries) + " entries");
      const fs::file_status st = it->symlink_status(ec);
      e.type = fs::is_symlink(st)     ? ArchiveEntry::Type::kOther
               : fs::is_directory(st) ? ArchiveEntry::Type::kDirectory
               : fs::is_regular_file(st) ? ArchiveEntry::Type::kFile
                                          : ArchiveEntry::Type::kOther;
      if (e.type == ArchiveEntry::Type::kFile) e.size = it->file_size(ec);
      e.index = entries_.size();
      entries_.push_back(std::move(e));
    }
  }

  std::vector<uint8_t> read(const ArchiveEntry& entry, uint64_t max_bytes) override {
    const std::string where = source_ + "/" + entry.path;
    if (entry.size > max_bytes) {
      fail(Kind::kTooLarge, where + ": " + std::to_string(entry.size) + " bytes, over the cap of " + std::to_string(max_bytes));
    }
    const int fd = ::open((dir_ + "/" + entry.path).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail(Kind::kUnreadable, where + ": cannot open: " + std::strerror(errno));
    std::vector<uint8_t> bytes(entry.size);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        const std::string why = got < 0 ? std::strerror(errno) : "the file shrank while read";
        ::close(fd);
        fail(Kind::kUnreadable, where + ": cannot read: " + why);
      }
      done += static_cast<size_t>(got);
    }
    ::close(fd);
    return bytes;
  }

 private:
  std::string dir_, source_;
};

}  // namespace

std::unique_ptr<Archive> Archive::open_directory(const std::string& dir, const std::string& source) {
  return std::make_unique<DirectoryArchive>(dir, source);
}

bool Archive::looks_like_zip(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  const ssize_t got = ::pread(fd, magic, 4, 0);
  ::close(fd);
  return got == 4 && magic[0] == 'P' && magic[1] == 'K' && ((magic[2] == 3 && magic[3] == 4) || (magic[2] == 5 && magic[3] == 6));
}

std::unique_ptr<Archive> Archive::open(const std::string& path, const std::string& source) {
  if (looks_like_zip(path)) return std::make_unique<ZipArchive>(path, source);
  return std::make_unique<TarArchive>(path, source);
}

}  // namespace pstrain
