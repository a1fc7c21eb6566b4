#include "common/rpc/same_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <kj/debug.h>
#include <kj/exception.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>

#include "common/base/error.h"
#include "common/base/log.h"

namespace pstrain::rpc {

namespace {

constexpr char kNamePrefix[] = "pstrain-rpc/";
constexpr int kSendBuffer = 4 << 20;
std::atomic<uint64_t> same_host_count{0};

// An IP address and port, with its canonical text ("127.0.0.1:7100", "[::1]:7100").
struct IpPort {
  int family = AF_UNSPEC;
  in_addr v4{};
  in6_addr v6{};
  unsigned port = 0;

  bool loopback() const { return family == AF_INET ? (ntohl(v4.s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&v6); }
  bool wildcard() const { return family == AF_INET ? v4.s_addr == htonl(INADDR_ANY) : IN6_IS_ADDR_UNSPECIFIED(&v6); }
  std::string ip_text() const {
    char text[INET6_ADDRSTRLEN] = {};
    inet_ntop(family, family == AF_INET ? static_cast<const void*>(&v4) : &v6, text, sizeof text);
    if (family == AF_INET) return text;
    std::string bracketed(1, '[');
    bracketed.append(text).push_back(']');
    return bracketed;
  }
  std::string text() const { return ip_text() + ":" + std::to_string(port); }
  std::string wildcard_text() const { return (family == AF_INET ? "0.0.0.0:" : "[::]:") + std::to_string(port); }
};

// An IPv4-mapped IPv6 address ("::ffff:127.0.0.1") is the IPv4 address, as TCP treats it.
IpPort unmapped(IpPort a) {
  if (a.family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&a.v6)) {
    a.family = AF_INET;
    std::memcpy(&a.v4, &a.v6.s6_addr[12], 4);
  }
  return a;
}

// kj's text of a resolved TCP address: "ip:port" or "[ip6]:port", several joined by commas (the
// first is what TCP tries first). Nothing for anything else ("unix:...").
std::optional<IpPort> parse_resolved(const std::string& resolved) {
  const std::string first = resolved.substr(0, resolved.find(','));
  const auto colon = first.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  std::string ip = first.substr(0, colon);
  const std::string port = first.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  IpPort a;
  a.port = static_cast<unsigned>(std::stoul(port));
  if (ip.size() > 2 && ip.front() == '[' && ip.back() == ']') {
    ip = ip.substr(1, ip.size() - 2);
    if (inet_pton(AF_INET6, ip.c_str(), &a.v6) != 1) return std::nullopt;
    a.family = AF_INET6;
  } else {
    if (inet_pton(AF_INET, ip.c_str(), &a.v4) != 1) return std::nullopt;
    a.family = AF_INET;
  }
  return unmapped(a);
}

std::optional<IpPort> from_sockaddr(const sockaddr_storage& s) {
  IpPort a;
  if (s.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(s);
    a.family = AF_INET;
    a.v4 = v4.sin_addr;
    a.port = ntohs(v4.sin_port);
  } else if (s.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(s);
    a.family = AF_INET6;
    a.v6 = v6.sin6_addr;
    a.port = ntohs(v6.sin6_port);
  } else {
    return std::nullopt;
  }
  return unmapped(a);
}

bool flag_file_set(const char* path) {
  std::ifstream in(path);
  int value = 0;
  return (in >> value) && value != 0;
}

// Whether this network namespace holds the address: a socket can be bound to it. Proves nothing
// where the kernel lets sockets bind foreign addresses, so those never count. Read once: /proc
// does not block.
bool held_here(const IpPort& a) {
  static const bool foreign_v4 = flag_file_set("/proc/sys/net/ipv4/ip_nonlocal_bind");
  static const bool foreign_v6 = flag_file_set("/proc/sys/net/ipv6/ip_nonlocal_bind");
  if (a.family == AF_INET ? foreign_v4 : foreign_v6) return false;
  sockaddr_storage s{};
  socklen_t length = 0;
  if (a.family == AF_INET) {
    auto& v4 = reinterpret_cast<sockaddr_in&>(s);
    v4.sin_family = AF_INET;
    v4.sin_addr = a.v4;
    length = sizeof v4;
  } else {
    auto& v6 = reinterpret_cast<sockaddr_in6&>(s);
    v6.sin6_family = AF_INET6;
    v6.sin6_addr = a.v6;
    length = sizeof v6;
  }
  const int fd = ::socket(a.family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&s), length) == 0;
  ::close(fd);
  return bound;
}

// A same-host stream whose peer runs as another user is not used: it is not one of ours.
void check_peer(kj::AsyncIoStream& stream, const std::string& address) {
  ucred peer{};
  uint length = sizeof peer;
  stream.getsockopt(SOL_SOCKET, SO_PEERCRED, &peer, &length);
  if (peer.uid != ::geteuid()) {
    PSLOG(kWarning) << address << " is held by a process of user " << peer.uid << ", not ours: not used";
    KJ_FAIL_REQUIRE("same-host socket of another user", address) { return; }
  }
}

kj::Promise<TunedStream> by_tcp(kj::Own<kj::NetworkAddress> address) {
  kj::NetworkAddress& raw = *address;
  return raw.connect().attach(kj::mv(address)).then([](kj::Own<kj::AsyncIoStream> stream) {
    tune_stream(*stream, Transport::kTcp);
    return TunedStream{kj::mv(stream), Transport::kTcp};
  });
}

kj::Promise<TunedStream> try_names(kj::Network& network, std::vector<std::string> names, size_t next,
                                   kj::Own<kj::NetworkAddress> tcp) {
  if (next == names.size()) return by_tcp(kj::mv(tcp));
  const std::string name = names[next];
  auto attempt = network.parseAddress(name).then([name](kj::Own<kj::NetworkAddress> address) {
    kj::NetworkAddress& raw = *address;
    return raw.connect().attach(kj::mv(address)).then([name](kj::Own<kj::AsyncIoStream> stream) {
      check_peer(*stream, name);
      tune_stream(*stream, Transport::kSameHost);
      same_host_count.fetch_add(1, std::memory_order_relaxed);
      return TunedStream{kj::mv(stream), Transport::kSameHost};
    });
  });
  // Nobody on this name (refused at once), its backlog full, or another user's: the next name,
  // then TCP.
  return attempt
      .then([](TunedStream stream) -> kj::Maybe<TunedStream> { return kj::mv(stream); },
            [](kj::Exception&&) -> kj::Maybe<TunedStream> { return nullptr; })
      .then([&network, names = kj::mv(names), next, tcp = kj::mv(tcp)](kj::Maybe<TunedStream> stream) mutable
            -> kj::Promise<TunedStream> {
        KJ_IF_MAYBE(s, stream) { return kj::mv(*s); }
        return try_names(network, kj::mv(names), next + 1, kj::mv(tcp));
      });
}

}  // namespace

std::string same_host_address(const std::string& ip_port) { return std::string("unix-abstract:") + kNamePrefix + ip_port; }

std::vector<std::string> same_host_candidates(const std::string& resolved) {
  const std::optional<IpPort> a = parse_resolved(resolved);
  if (!a || !a->loopback() || !held_here(*a)) return {};
  return {same_host_address(a->text()), same_host_address(a->wildcard_text())};
}

kj::Own<kj::ConnectionReceiver> listen_same_host(kj::Network& network, kj::ConnectionReceiver& tcp) {
  sockaddr_storage bound{};
  uint length = sizeof bound;
  tcp.getsockname(reinterpret_cast<sockaddr*>(&bound), &length);
  const std::optional<IpPort> a = from_sockaddr(bound);
  if (!a || !(a->loopback() || a->wildcard())) return kj::Own<kj::ConnectionReceiver>();
  const std::string name = kNamePrefix + a->text();
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (name.size() + 1 >= sizeof address.sun_path) throw Error("same-host name too long: " + name);
  std::memcpy(address.sun_path + 1, name.data(), name.size());  // sun_path[0] == 0: abstract
  const auto size = static_cast<uint>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  kj::Own<kj::ConnectionReceiver> listener;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { listener = network.getSockaddr(&address, size)->listen(); })) {
    const std::string why = e->getDescription().cStr();
    const bool taken = why.find("Address already in use") != std::string::npos;
    throw Error("cannot listen on the same-host socket @" + name + " (" + why + ")" +
                (taken ? ": another process of this network namespace holds it" : "") +
                "; stop it, or start this server with --same-host-socket=false");
  }
  return listener;
}

void tune_stream(kj::AsyncIoStream& stream, Transport transport) {
  if (transport == Transport::kTcp) {
    const int one = 1;
    stream.setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return;
  }
  // SO_SNDBUFFORCE needs CAP_NET_ADMIN; SO_SNDBUF is capped at net.core.wmem_max. A smaller
  // buffer is slower, not wrong. (A Unix stream socket has no receive buffer of its own: the
  // sender's bounds what is in flight.)
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] {
                stream.setsockopt(SOL_SOCKET, SO_SNDBUFFORCE, &kSendBuffer, sizeof kSendBuffer);
              })) {
    (void)e;
    stream.setsockopt(SOL_SOCKET, SO_SNDBUF, &kSendBuffer, sizeof kSendBuffer);
  }
}

kj::Promise<TunedStream> connect_stream(kj::Network& network, kj::Own<kj::NetworkAddress> address) {
  auto names = same_host_candidates(kj::str(address->toString()).cStr());
  return try_names(network, kj::mv(names), 0, kj::mv(address));
}

uint64_t same_host_connections() { return same_host_count.load(std::memory_order_relaxed); }

}  // namespace pstrain::rpc
