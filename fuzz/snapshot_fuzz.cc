// Fuzz target: the backup blob decoder (common/storage/chunk_snapshot.h). Any bytes go to
// decode_snapshot, which must answer nullopt or a snapshot; the encoding has one form per
// snapshot, so a blob that decodes must encode back to exactly the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/storage/chunk_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string blob(reinterpret_cast<const char*>(data), size);
  const std::optional<pstrain::ChunkSnapshot> chunk = pstrain::decode_snapshot(blob);
  if (!chunk) return 0;
  for (const auto& slot : chunk->optimizer_state.slots) {
    if (slot.values.size() != chunk->values.size()) {
      std::fprintf(stderr, "a slot's size differs from the values'\n");
      std::abort();
    }
  }
  if (pstrain::encode_snapshot(*chunk) != blob) {
    std::fprintf(stderr, "encode(decode(blob)) != blob\n");
    std::abort();
  }
  return 0;
}
