// Archives of files as users send them (a .zip, or a .tar), read entry by entry: what the class
// folder datasets (image_folders.h) are uploaded as; a directory can be read the same way. Zip archives are read by libzip (stored or
// deflated entries); tar archives by this file (POSIX ustar, pax extended headers' `path`, GNU
// long names; uncompressed, so that entries can be read in any order by their offset).
//
// Only the listing is held in memory (a path and two numbers an entry); an entry's bytes are
// read when asked for, up to a cap. Every defect is a DatasetFormatError (kUnreadable) naming the
// archive and the entry.
//
// Thread rules: an Archive is single-owner (libzip's handle is not shareable).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pstrain {

struct ArchiveEntry {
  enum class Type { kFile, kDirectory, kOther };  // kOther: a link, a device, a fifo
  std::string path;  // as stored, '/'-separated, without a leading "./" or a trailing '/'
  Type type = Type::kFile;
  uint64_t size = 0;   // bytes (files)
  uint64_t index = 0;  // the reader's handle: a zip entry's index, a tar entry's data offset
};

class Archive {
 public:
  virtual ~Archive() = default;
  // Opens `path` as a zip or a tar, whichever its first bytes say; `source` names it in errors.
  static std::unique_ptr<Archive> open(const std::string& path, const std::string& source);
  // A directory read the same way (a class-folder dataset dropped into the data directory): its
  // files and folders, paths relative to it; a symbolic link is kOther (never followed).
  static std::unique_ptr<Archive> open_directory(const std::string& dir, const std::string& source);
  // Whether the file at `path` starts like a zip archive ("PK\3\4" or an empty one's "PK\5\6").
  static bool looks_like_zip(const std::string& path);

  const std::vector<ArchiveEntry>& entries() const { return entries_; }
  // The entry's bytes; an entry larger than `max_bytes` is a kTooLarge error naming it.
  virtual std::vector<uint8_t> read(const ArchiveEntry& entry, uint64_t max_bytes) = 0;

 protected:
  std::vector<ArchiveEntry> entries_;
};

}  // namespace pstrain
