// The cluster credential: a shared secret every node of a cluster holds, and the handshake by
// which both ends of each RPC connection prove they hold it before any Cap'n Proto message is
// exchanged (DESIGN-NOTES "Cluster credential"). Also the worker tokens: what a parameter server
// checks on a worker's pulls and pushes (only workers the coordinator assigned to the job hold
// one).
//
// The handshake (HMAC-SHA256, K = the secret, nonces 32 random bytes each):
//   client -> server  "PSAUTH01" Nc
//   server -> client  "PSAUTH01" Ns Ps    Ps = HMAC(K, "pstrain server proof" Nc Ns)
//   client -> server  Pc                  Pc = HMAC(K, "pstrain client proof" Ns Nc)
//   server -> client  "PSAUTHOK" (then Cap'n Proto) or "PSAUTHNO" (then the server closes)
// and the client checks Ps itself (mutual). A peer that does not start with "PSAUTH01" (a plain
// Cap'n Proto client) gets one Cap'n Proto Abort message naming the reason, then the close. The
// two labels keep one side's proof from being replayed as the other's.
//
// Ownership and threads: ClusterCredential is an immutable value (copy it freely, use it from any
// thread). AuthRefusals is thread-safe. The handshakes run on the calling thread's event loop and
// keep a reference to the stream: it must outlive the promise.
#pragma once

#include <capnp/blob.h>
#include <kj/async-io.h>
#include <kj/timer.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace pstrain::rpc {

using Mac = std::array<uint8_t, 32>;

class ClusterCredential {
 public:
  ClusterCredential() = default;  // open: no secret, no handshake (the cluster as it was)
  // The secret is the file's bytes without a trailing newline; at least 16 bytes. Throws
  // pstrain::Error naming the file (and `what`, the flag) if it is missing, unreadable or short.
  static ClusterCredential from_file(const std::string& path, const std::string& what);
  static ClusterCredential from_secret(std::string secret);
  // The --cluster-secret-file flag's value: "" is open, anything else from_file.
  static ClusterCredential from_flag(const std::string& path) {
    return path.empty() ? ClusterCredential() : from_file(path, "--cluster-secret-file");
  }

  bool open() const { return secret_.empty(); }
  // HMAC-SHA256 of label || a || b under the secret.
  Mac mac(std::string_view label, std::string_view a, std::string_view b) const;

 private:
  std::string secret_;
};

// Refused connections of one listener (wrong proof, no proof, timeout), for logs and metrics.
class AuthRefusals {
 public:
  uint64_t add() { return count_.fetch_add(1, std::memory_order_relaxed) + 1; }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> count_{0};
};

// The flag every node takes (with PSTRAIN_CLUSTER_SECRET_FILE).
inline constexpr char kSecretFlag[] = "cluster-secret-file";
inline constexpr char kSecretEnv[] = "PSTRAIN_CLUSTER_SECRET_FILE";
inline constexpr char kSecretHelp[] =
    "File holding the cluster secret (at least 16 bytes; e.g. openssl rand -hex 32). Every RPC\n"
    "connection between the cluster's nodes proves it; empty: an open cluster (anyone who reaches\n"
    "the RPC ports may join, pull and push).";

// How long either side waits for the other's part of the handshake.
inline constexpr kj::Duration kHandshakeTimeout = 5 * kj::SECONDS;

// The client's side. Resolves once both proofs are checked; fails with a kj::Exception whose
// description starts with "cluster authentication failed" (is_auth_failure) saying why. Open:
// resolves at once.
kj::Promise<void> authenticate_to_server(kj::AsyncIoStream& stream, const ClusterCredential& credential,
                                         kj::Timer& timer, std::string peer);

// The listener's side. Resolves to true when the peer proved the secret (the stream then carries
// Cap'n Proto); false when it did not, after telling it why, logging "refused ... (N so far)"
// with `listener` (what this listener serves) and counting it in `refusals`. Open: true at once.
kj::Promise<bool> authenticate_client(kj::AsyncIoStream& stream, const ClusterCredential& credential,
                                      kj::Timer& timer, AuthRefusals& refusals, std::string listener);

bool is_auth_failure(const kj::Exception& e);

// Logs, once per process start, that the cluster is open (no secret): anyone who reaches the node
// may join, pull and push. `role` names the node.
void warn_if_open(const ClusterCredential& credential, const std::string& role);

// Worker tokens. The coordinator derives each job's key from a key of its own that no other node
// knows (job_key) and gives it to the job's servers; a worker assigned to the job gets
// worker_token(job key, its node id) in its assignment and sends it with every pull and push.
// A server recomputes the token from the node id the call names: a node that was never assigned
// cannot make one, even if it holds the cluster secret.
// The node id the coordinator's own calls to servers name (never a registered node's).
inline constexpr uint32_t kCoordinatorNode = 0xFFFFFFFF;
std::string job_key(const std::string& coordinator_key, const std::string& job_id);
std::string worker_token(const std::string& job_key, uint32_t node);
// What a worker sends with each pull and push of a job: its node id and worker token (empty for
// an open cluster).
struct WorkerPass {
  uint32_t node = 0;
  std::string token;
  template <typename Builder>
  void set_on(Builder&& request) const {
    request.setNode(node);
    request.setToken(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(token.data()), token.size()));
  }
};
// Constant-time comparison of a presented token with the expected one.
bool token_matches(const std::string& expected, const void* presented, size_t size);
// 32 random bytes from the system's generator, e.g. a coordinator key; or the key kept in `path`
// (created 0600 with a new random key if missing). Throws pstrain::Error if it cannot.
std::string random_key();
std::string load_or_create_key_file(const std::string& path);

}  // namespace pstrain::rpc
