#include "common/rpc/same_host.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <kj/exception.h>

#include <fstream>

#include "common/base/log.h"

namespace pstrain::rpc {

namespace {

constexpr char kPrefix[] = "unix-abstract:pstrain-rpc/";
constexpr int kSameHostBuffer = 4 << 20;

// "host:port" as kj prints it, split; false for anything else (a "unix:" address).
bool split_ip_port(const std::string& text, std::string& ip, std::string& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || text.rfind("unix", 0) == 0) return false;
  ip = text.substr(0, colon);
  port = text.substr(colon + 1);
  if (ip.size() > 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
  return !port.empty();
}

bool flag_file_set(const char* path) {
  std::ifstream in(path);
  int value = 0;
  return (in >> value) && value != 0;
}

// Whether `ip` is an address of this network namespace: the kernel lets a socket bind to it.
bool is_own_address(const std::string& ip) {
  sockaddr_storage address{};
  socklen_t length = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    // Binding proves nothing where foreign addresses may be bound. Read once: /proc is not I/O
    // that blocks.
    static const bool foreign_v4 = flag_file_set("/proc/sys/net/ipv4/ip_nonlocal_bind");
    if (foreign_v4 || v4->sin_addr.s_addr == htonl(INADDR_ANY)) return false;
    v4->sin_family = AF_INET;
    length = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    static const bool foreign_v6 = flag_file_set("/proc/sys/net/ipv6/ip_nonlocal_bind");
    if (foreign_v6 || IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr)) return false;
    v6->sin6_family = AF_INET6;
    length = sizeof(sockaddr_in6);
  } else {
    return false;
  }
  const int fd = ::socket(address.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), length) == 0;
  ::close(fd);
  return bound;
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
  auto attempt = network.parseAddress(name).then([](kj::Own<kj::NetworkAddress> address) {
    kj::NetworkAddress& raw = *address;
    return raw.connect().attach(kj::mv(address)).then([](kj::Own<kj::AsyncIoStream> stream) {
      tune_stream(*stream, Transport::kSameHost);
      return TunedStream{kj::mv(stream), Transport::kSameHost};
    });
  });
  // Nobody on this name (refused at once), or its backlog full: the next name, then TCP. The
  // TCP address is held aside until an attempt has settled.
  auto held = kj::heap<kj::Own<kj::NetworkAddress>>(kj::mv(tcp));
  auto& fallback = *held;
  return attempt
      .then([](TunedStream stream) -> kj::Maybe<TunedStream> { return kj::mv(stream); },
            [](kj::Exception&&) -> kj::Maybe<TunedStream> { return nullptr; })
      .then([&network, names = kj::mv(names), next, &fallback](kj::Maybe<TunedStream> stream) mutable
            -> kj::Promise<TunedStream> {
        KJ_IF_MAYBE(s, stream) { return kj::mv(*s); }
        return try_names(network, kj::mv(names), next + 1, kj::mv(fallback));
      })
      .attach(kj::mv(held));
}

}  // namespace

std::string same_host_name(const std::string& ip_port) { return kPrefix + ip_port; }

std::vector<std::string> same_host_candidates(const std::string& resolved) {
  std::string ip, port;
  if (!split_ip_port(resolved, ip, port) || !is_own_address(ip)) return {};
  return {same_host_name(resolved), same_host_name("0.0.0.0:" + port), same_host_name("[::]:" + port)};
}

kj::Own<kj::ConnectionReceiver> listen_same_host(kj::Network& network, kj::WaitScope& wait_scope,
                                                 const std::string& bound_ip_port) {
  const std::string name = same_host_name(bound_ip_port);
  kj::Own<kj::ConnectionReceiver> listener;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { listener = network.parseAddress(name).wait(wait_scope)->listen(); })) {
    PSLOG(kWarning) << "no same-host socket " << name << ": " << e->getDescription().cStr() << "; TCP only";
    return kj::Own<kj::ConnectionReceiver>();
  }
  return listener;
}

void tune_stream(kj::AsyncIoStream& stream, Transport transport) {
  if (transport == Transport::kTcp) {
    const int one = 1;
    stream.setsockopt(IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return;
  }
  // The kernel caps these at net.core.[wr]mem_max; a smaller buffer is slower, not wrong.
  stream.setsockopt(SOL_SOCKET, SO_SNDBUF, &kSameHostBuffer, sizeof kSameHostBuffer);
  stream.setsockopt(SOL_SOCKET, SO_RCVBUF, &kSameHostBuffer, sizeof kSameHostBuffer);
}

kj::Promise<TunedStream> connect_stream(kj::Network& network, kj::Own<kj::NetworkAddress> address) {
  auto names = same_host_candidates(kj::str(address->toString()).cStr());
  return try_names(network, kj::mv(names), 0, kj::mv(address));
}

}  // namespace pstrain::rpc
