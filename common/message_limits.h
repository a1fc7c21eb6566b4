// How big one message of the protocol may get (docs/DESIGN-NOTES.md, "Message sizes").
#pragma once

#include <cstddef>

namespace pstrain::rpc {

// The payload of one message of a large transfer: backup replicas (storeReplica, adoptBackup)
// travel in parts of at most this many bytes of chunk blobs (a part holds at least one chunk;
// chunks are at most kDefaultMaxChunkFloats floats and their optimizer slots, a few MB), one part
// in flight at a time; a pushFactors call covers chunks of at most this many bytes of values
// (its reply carries them). A server's shard of a big model is hundreds of MB, far over Cap'n
// Proto's traversal limit of 64 MiB per message (8 Mi words), which every receiver keeps at its
// default: no message of the protocol grows with the model.
inline constexpr size_t kMaxPartBytes = size_t{16} << 20;

}  // namespace pstrain::rpc
