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

// The most pushes one pushBatch call may carry (a server refuses more). Workers batch a step's
// small chunks per server (worker/chunk_pushes.h), far fewer than this; the cap bounds the work a
// single call can queue on a server.
inline constexpr size_t kMaxBatchedPushes = 1024;
// A worker sends a chunk whose gradient is at least this many bytes in a push of its own, as soon
// as backward has it; smaller ones wait, per server, until this many bytes are pending or the step
// ends, and go in one pushBatch (DESIGN-NOTES "Batched pushes").
inline constexpr size_t kBatchedPushBytes = size_t{256} << 10;

}  // namespace pstrain::rpc
