// Small pieces every RPC process shares: addresses, connections, signals, the ready line, and
// the conversions between protocol structs and engine types.
//
// Thread rules: everything here runs on the calling thread's KJ event loop.
#pragma once

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/engine/chunk_plan.h"
#include "common/data/example_types.h"
#include "common/rpc/message_limits.h"
#include "common/rpc/proto/pstrain.capnp.h"
#include "common/rpc/cluster_auth.h"
#include "common/rpc/same_host.h"

namespace pstrain::rpc {

struct HostPort {
  std::string host;
  uint32_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
};

// "host:port", "host" (default port) or ":port" (all interfaces). Throws pstrain::Error naming
// `what` (the flag) for anything else.
HostPort parse_host_port(const std::string& text, uint32_t default_port, const std::string& what);

// A connection to a peer and the bootstrap capability it serves. Keep it alive while the client
// capability is in use.
class Connection {
 public:
  Connection(kj::Own<kj::AsyncIoStream> stream);
  capnp::Capability::Client bootstrap() { return client_.bootstrap(); }
  kj::Promise<void> on_disconnect() { return client_.onDisconnect(); }

 private:
  kj::Own<kj::AsyncIoStream> stream_;
  capnp::TwoPartyClient client_;
};

// Connects once (through a same-host socket when the peer offers one, same_host.h; else by TCP)
// and, unless `credential` is open, proves the cluster secret and checks the
// peer's proof (cluster_auth.h) before any Cap'n Proto message. The promise fails if the peer
// cannot be reached, or with is_auth_failure() if the handshake fails.
kj::Promise<kj::Own<Connection>> connect(kj::AsyncIoProvider& io, const HostPort& address,
                                         const ClusterCredential& credential);

// What a listener asks of its peers: the credential (open: nothing), the timer of the handshake
// timeouts, where refusals are counted, and what it serves (for the logs). The references must
// outlive the promise of serve().
struct ListenerAuth {
  const ClusterCredential& credential;
  kj::Timer& timer;
  AuthRefusals& refusals;
  std::string what;  // e.g. "coordinator", "parameter server"
};

// Accepts connections forever and hands them to `server` once they have proved the cluster
// secret (each handshake runs beside the accept loop; destroying the promise cancels those in
// flight), each stream tuned for `transport` (tune_stream: TCP_NODELAY on TCP).
kj::Promise<void> serve(capnp::TwoPartyServer& server, kj::ConnectionReceiver& listener, const ListenerAuth& auth,
                        Transport transport = Transport::kTcp);

// Start-up of a long-running node (coordinator, server, worker): SIGINT/SIGTERM captured for its
// event loop, `compute_threads` math threads (1 for processes whose math runs on the event loop:
// idle OpenMP threads would spin on cores the workers need — measured 4x slower steps with five
// processes on two cores), and freed message buffers kept in the heap. Returns the thread count.
// Call first thing after the flags, before any thread starts.
int prepare_node_process(int compute_threads);

// "<host>-<pid>": a node's name when none is given.
std::string default_node_name();

// Resolves on the first SIGINT or SIGTERM. Call capture_shutdown_signals() first, in main,
// before any thread starts.
void capture_shutdown_signals();
kj::Promise<int> shutdown_signal(kj::UnixEventPort& port);

// How a node (server, worker) is asked to stop: kNow leaves at once (SIGINT; a test stopping the
// node's thread, as a kill would), kPreempted first hands its work back (SIGTERM: the coordinator
// has the node's jobs back up at the next step).
enum class NodeStop { kNow, kPreempted };
// shutdown_signal() as a NodeStop (SIGTERM: kPreempted), logged as "signal N: stopping".
kj::Promise<NodeStop> stop_on_signal(kj::UnixEventPort& port);

// Prints "PSTRAIN_READY role=<role> port=<port>" on stdout and flushes: what scripts and tests
// wait for.
void print_ready(const std::string& role, uint32_t port);

// A validated float32 view of a Tensor, without copying. KJ_REQUIREs (fails the RPC call, not the
// process) a float32 dtype, a shape matching the data size, and `expected` elements.
std::span<const float> tensor_view(proto::Tensor::Reader tensor, size_t expected, const char* what);
// Writes values into a tensor (one copy, into the message being built).
void set_tensor(proto::Tensor::Builder tensor, std::span<const float> values);
// Makes `tensor` refer to `values` without copying them into the message: the bytes go straight
// from `values` to the socket. `values` must be word-aligned, must neither change nor go away
// until the message has been sent and destroyed (the caller's protocol must guarantee it), and
// its memory must extend to the next 8-byte word: Cap'n Proto sends whole words, so it reads up
// to 4 bytes past an odd number of floats (AlignedFloats pads its allocations for this).
void reference_tensor(proto::Tensor::Builder tensor, std::span<const float> values);
// Allocates a tensor of n floats in the message and returns its buffer to compute into.
std::span<float> init_tensor(proto::Tensor::Builder tensor, size_t n);


// Row-sparse pushes and replies (see ParameterServer.push): a chunk's values as a few ranges,
// each its own Data part. Every part is a separate message segment when sent without copying, and
// Cap'n Proto refuses messages of 512 segments or more: hence the cap.
inline constexpr size_t kMaxRangesPerPart = 256;
// The ranges, checked: at most kMaxRangesPerPart, sorted, disjoint, non-empty and inside a chunk
// of `chunk_size` elements. KJ_REQUIREs (fails the call) naming `what` otherwise.
std::vector<ChunkRange> read_ranges(capnp::List<proto::Range>::Reader list, size_t chunk_size, const char* what);
void set_ranges(capnp::List<proto::Range>::Builder list, const std::vector<ChunkRange>& ranges);
// A validated float32 view of one part holding `expected` values.
std::span<const float> part_view(capnp::Data::Reader data, size_t expected, const char* what);
// list[i] refers to `values` without copying (same rules as reference_tensor), or holds a copy.
void reference_part(capnp::List<capnp::Data>::Builder list, unsigned i, std::span<const float> values);
void set_part(capnp::List<capnp::Data>::Builder list, unsigned i, std::span<const float> values);

// A Data field's value that refers to `values` without copying them, to adopt into the message
// of `orphanage`. Same rules as reference_tensor, and the buffer must extend to the next 8-byte
// word (Cap'n Proto sends whole words): size it padded_to_words().
capnp::Orphan<capnp::Data> reference_floats(capnp::Orphanage orphanage, std::span<const float> values);
inline size_t padded_to_words(size_t floats) { return (floats + 1) / 2 * 2; }

void set_chunks(capnp::List<proto::Chunk>::Builder list, const std::vector<ChunkInfo>& chunks);
std::vector<ChunkInfo> get_chunks(capnp::List<proto::Chunk>::Reader list);

std::string to_string(capnp::Text::Reader text);

// A batch's example dtype on the wire (Batch.dtype) and back. to_dtype fails the call
// (KJ_REQUIRE, naming `what`) for a value this build does not know.
proto::DType to_wire(Dtype dtype);
Dtype to_dtype(proto::DType dtype, const char* what);

}  // namespace pstrain::rpc
