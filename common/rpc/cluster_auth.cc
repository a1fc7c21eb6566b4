#include "common/rpc/cluster_auth.h"

#include <arpa/inet.h>
#include <capnp/message.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "common/base/error.h"
#include "common/base/log.h"

namespace pstrain::rpc {
namespace {

constexpr char kHello[] = "PSAUTH01";
constexpr char kAccepted[] = "PSAUTHOK";
constexpr char kRefused[] = "PSAUTHNO";
constexpr size_t kTag = 8, kNonce = 32, kProof = 32;
constexpr char kFailure[] = "cluster authentication failed: ";

Mac hmac(std::string_view key, std::string_view label, std::string_view a, std::string_view b) {
  std::string data;
  data.reserve(label.size() + 1 + a.size() + b.size());
  data.append(label).push_back('\0');
  data.append(a).append(b);
  Mac out{};
  unsigned int size = 0;
  const unsigned char* ok = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                 reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &size);
  if (ok == nullptr || size != out.size()) throw Error("HMAC-SHA256 failed (OpenSSL)");
  return out;
}

void fill_random(uint8_t* out, size_t n) {
  if (RAND_bytes(out, static_cast<int>(n)) != 1) throw Error("no random bytes from the system (OpenSSL RAND_bytes)");
}

std::string_view bytes(const uint8_t* p, size_t n) { return {reinterpret_cast<const char*>(p), n}; }

kj::Exception failure(const std::string& why) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString(kFailure + why));
}

std::string peer_of(kj::AsyncIoStream& stream) {
  sockaddr_storage address{};
  uint length = sizeof address;
  try {
    stream.getpeername(reinterpret_cast<sockaddr*>(&address), &length);
  } catch (const kj::Exception&) {
    return "an unknown peer";
  }
  char host[INET6_ADDRSTRLEN] = {};
  uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
    port = ntohs(in->sin6_port);
  } else {
    return "a local peer";
  }
  return std::string(host) + ":" + std::to_string(port);
}

// One handshake's buffers (the stream's reads and writes point into them until it ends).
struct ClientState {
  uint8_t hello[kTag + kNonce];
  uint8_t reply[kTag + kNonce + kProof];
  Mac proof;
  uint8_t verdict[kTag];
};

struct ServerState {
  kj::AsyncIoStream& stream;
  const ClusterCredential& credential;
  kj::Timer& timer;
  AuthRefusals& refusals;
  std::string listener, peer;
  uint8_t hello[kTag + kNonce];
  uint8_t reply[kTag + kNonce + kProof];
  uint8_t proof[kProof];
  uint8_t drain[4096];
  kj::Array<capnp::word> abort;

  bool refuse(const std::string& why) {
    const uint64_t n = refusals.add();
    PSLOG(kWarning) << "refused an RPC connection to the " << listener << " from " << peer << ": " << why << " (" << n
                    << " refused so far)";
    return false;
  }
  // Reads and discards what the peer still sends until it closes (at most 1 s): closing a socket
  // with unread bytes sends a reset, which can make the peer drop our last message unread.
  kj::Promise<void> drain_input() {
    return stream.tryRead(drain, 1, sizeof drain).then([this](size_t n) -> kj::Promise<void> {
      if (n == 0) return kj::READY_NOW;
      return drain_input();
    });
  }
};

}  // namespace

ClusterCredential ClusterCredential::from_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(what + ": cannot read the cluster secret file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  std::string secret = text.str();
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.size() < 16) {
    throw Error(what + ": the cluster secret in '" + path + "' is " + std::to_string(secret.size()) +
                " bytes; it must be at least 16 (e.g. openssl rand -hex 32 > FILE)");
  }
  struct stat st {};
  // (Group-readable is how Kubernetes and compose hand a secret to the image's user: fine.)
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 007) != 0) {
    PSLOG(kWarning) << "the cluster secret file '" << path << "' is readable by every user (chmod 600 it)";
  }
  return from_secret(std::move(secret));
}

ClusterCredential ClusterCredential::from_secret(std::string secret) {
  ClusterCredential c;
  c.secret_ = std::move(secret);
  return c;
}

Mac ClusterCredential::mac(std::string_view label, std::string_view a, std::string_view b) const {
  return hmac(secret_, label, a, b);
}

kj::Promise<void> authenticate_to_server(kj::AsyncIoStream& stream, const ClusterCredential& credential,
                                         kj::Timer& timer, std::string peer) {
  if (credential.open()) return kj::READY_NOW;
  auto state = kj::heap<ClientState>();
  ClientState& s = *state;
  std::memcpy(s.hello, kHello, kTag);
  fill_random(s.hello + kTag, kNonce);
  auto work =
      stream.write(s.hello, sizeof s.hello)
          .then([&stream, &s] { return stream.tryRead(s.reply, sizeof s.reply, sizeof s.reply); })
          .then([&stream, &s, &credential, peer](size_t n) {
            if (n < sizeof s.reply || std::memcmp(s.reply, kHello, kTag) != 0) {
              throw failure("the peer at " + peer +
                            " does not take part in the cluster handshake: it runs without a cluster secret, "
                            "or is not a pstrain node");
            }
            s.proof = credential.mac("pstrain client proof", bytes(s.reply + kTag, kNonce), bytes(s.hello + kTag, kNonce));
            return stream.write(s.proof.data(), s.proof.size());
          })
          .then([&stream, &s] { return stream.tryRead(s.verdict, kTag, kTag); })
          .then([&s, &credential, peer](size_t n) {
            if (n < kTag || std::memcmp(s.verdict, kAccepted, kTag) != 0) {
              throw failure("the peer at " + peer + " refused our proof: its cluster secret differs from ours");
            }
            const Mac expected =
                credential.mac("pstrain server proof", bytes(s.hello + kTag, kNonce), bytes(s.reply + kTag, kNonce));
            if (CRYPTO_memcmp(expected.data(), s.reply + kTag + kNonce, kProof) != 0) {
              throw failure("the peer at " + peer + " does not prove the cluster secret");
            }
          });
  return timer.timeoutAfter(kHandshakeTimeout, kj::mv(work))
      .catch_([peer](kj::Exception&& e) -> kj::Promise<void> {
        if (is_auth_failure(e)) return kj::mv(e);
        return failure("handshake with " + peer + ": " + e.getDescription().cStr());
      })
      .attach(kj::mv(state));
}

kj::Promise<bool> authenticate_client(kj::AsyncIoStream& stream, const ClusterCredential& credential, kj::Timer& timer,
                                      AuthRefusals& refusals, std::string listener) {
  if (credential.open()) return true;
  auto state = kj::heap<ServerState>(ServerState{stream, credential, timer, refusals, std::move(listener), peer_of(stream)});
  ServerState& s = *state;
  auto work =
      stream.tryRead(s.hello, kTag, kTag).then([&s](size_t n) -> kj::Promise<bool> {
        if (n < kTag || std::memcmp(s.hello, kHello, kTag) != 0) {
          // A Cap'n Proto client without the credential: one Abort naming the reason, then the close.
          const std::string why = n == 0 ? "it closed at once" : "it sent no cluster credential";
          capnp::MallocMessageBuilder message;
          auto abort = message.initRoot<capnp::rpc::Message>().initAbort();
          abort.setType(capnp::rpc::Exception::Type::FAILED);
          abort.setReason(std::string(kFailure) +
                          "this pstrain node requires the cluster secret (--cluster-secret-file); "
                          "the connection is closed");
          s.abort = capnp::messageToFlatArray(message);
          const auto out = s.abort.asBytes();
          return s.stream.write(out.begin(), out.size())
              .then([&s] {
                s.stream.shutdownWrite();
                return s.timer.timeoutAfter(1 * kj::SECONDS, s.drain_input());
              })
              .catch_([](kj::Exception&&) {})
              .then([&s, why] { return s.refuse(why); });
        }
        return s.stream.read(s.hello + kTag, kNonce)
            .then([&s] {
              std::memcpy(s.reply, kHello, kTag);
              fill_random(s.reply + kTag, kNonce);
              const Mac proof =
                  s.credential.mac("pstrain server proof", bytes(s.hello + kTag, kNonce), bytes(s.reply + kTag, kNonce));
              std::memcpy(s.reply + kTag + kNonce, proof.data(), kProof);
              return s.stream.write(s.reply, sizeof s.reply);
            })
            .then([&s] { return s.stream.tryRead(s.proof, kProof, kProof); })
            .then([&s](size_t n) -> kj::Promise<bool> {
              if (n < kProof) return s.refuse("it closed during the handshake (it does not hold our cluster secret)");
              const Mac expected =
                  s.credential.mac("pstrain client proof", bytes(s.reply + kTag, kNonce), bytes(s.hello + kTag, kNonce));
              if (CRYPTO_memcmp(expected.data(), s.proof, kProof) != 0) {
                return s.stream.write(kRefused, kTag).catch_([](kj::Exception&&) {}).then([&s] {
                  return s.refuse("wrong proof of the cluster secret");
                });
              }
              return s.stream.write(kAccepted, kTag).then([] { return true; });
            });
      });
  return timer.timeoutAfter(kHandshakeTimeout, kj::mv(work))
      .catch_([&s](kj::Exception&& e) { return s.refuse(std::string("handshake failed: ") + e.getDescription().cStr()); })
      .attach(kj::mv(state));
}

bool is_auth_failure(const kj::Exception& e) {
  return std::strstr(e.getDescription().cStr(), "cluster authentication failed") != nullptr;
}

void warn_if_open(const ClusterCredential& credential, const std::string& role) {
  if (!credential.open()) {
    PSLOG(kInfo) << role << ": cluster credential set; every RPC connection proves the cluster secret";
    return;
  }
  PSLOG(kWarning) << role
                  << ": the cluster is open (no --cluster-secret-file): any process that reaches this node's RPC "
                     "port can join, pull and push";
}

std::string job_key(const std::string& coordinator_key, const std::string& job_id) {
  const Mac m = hmac(coordinator_key, "pstrain job key", job_id, "");
  return std::string(bytes(m.data(), m.size()));
}

std::string worker_token(const std::string& job_key, uint32_t node) {
  const Mac m = hmac(job_key, "pstrain worker token", std::to_string(node), "");
  return std::string(bytes(m.data(), m.size()));
}

bool token_matches(const std::string& expected, const void* presented, size_t size) {
  return size == expected.size() && CRYPTO_memcmp(expected.data(), presented, size) == 0;
}

std::string random_key() {
  std::string key(32, '\0');
  fill_random(reinterpret_cast<uint8_t*>(key.data()), key.size());
  return key;
}

std::string load_or_create_key_file(const std::string& path) {
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::ostringstream text;
      text << in.rdbuf();
      if (text.str().size() >= 16) return text.str();
    }
  }
  const std::string key = random_key();
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw Error("cannot create the key file '" + tmp + "': " + std::strerror(errno));
  const bool ok = ::write(fd, key.data(), key.size()) == static_cast<ssize_t>(key.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot write the key file '" + path + "'");
  return key;
}

}  // namespace pstrain::rpc
