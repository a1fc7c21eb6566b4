// A file the coordinator keeps in pieces in its RocksDB (a model, a checkpoint, an uploaded
// model), as a download reads it: piece after piece, never whole in memory.
//
// Thread rules: read_piece does blocking RocksDB reads: call it off every event loop (the HTTP
// server's file thread), one piece at a time, in order. Ownership: the function holds what it
// reads from (the store, which outlives the server that sends it; or shared in-memory pieces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace pstrain {

// A file is stored in pieces of at most this many bytes (one RocksDB value each).
inline constexpr size_t kMaxModelPieceBytes = size_t{16} << 20;

struct StoredFile {
  int64_t bytes = 0;  // of the whole file
  // Piece `index` (0, 1, ...: they add up to `bytes`), or nullopt if it is gone (the file was
  // deleted meanwhile: the download ends short).
  std::function<std::optional<std::string>(size_t index)> read_piece;
};

}  // namespace pstrain
