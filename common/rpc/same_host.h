// Same-host sockets: RPC between processes that share a network namespace (processes on one
// machine, `deploy/local-cluster.sh`, the tests) without loopback TCP.
//
// A parameter server listening on a loopback or wildcard address listens, beside its TCP socket,
// on a Unix stream socket in the abstract namespace named after that address and port
// ("pstrain-rpc/0.0.0.0:7100"). A peer that connects to a loopback address (127.0.0.0/8, ::1)
// that its own network namespace holds tries that address's name, then the wildcard's of the same
// family on that port (the order in which TCP finds the listener of a local connection), and
// falls back to TCP when none answers. Abstract names belong to a network namespace exactly as
// ports do and vanish when their socket closes, and a server that cannot take its name does not
// start (its TCP port is its own, so whoever holds the name is not a server of that port): the
// name that answers belongs to the process that TCP would reach, or nobody. A container, a
// namespace of the test bed, a proxy on another port, another machine, and any non-loopback
// address (which NAT or an IPVS service could send elsewhere) go by TCP. A same-host stream is
// used only if its peer runs as the same user (SO_PEERCRED): abstract names have no file
// permissions. What crosses is the same Cap'n Proto stream after the same cluster-secret
// handshake.
//
// Why: on one host a byte through loopback TCP costs about 0.7 ns of CPU (the copies into and
// out of the kernel and the TCP stack on both sides), through a Unix socket with a large send
// buffer 0.3-0.6 ns, and replies arrive with fewer wake-ups (docs/BENCHMARKS.md, "Issue 53,
// eighteenth session").
//
// Thread rules: the functions take no locks (the connection counter is atomic); call them on the
// event loop that owns the streams and listeners.
#pragma once

#include <kj/async-io.h>

#include <cstdint>
#include <string>
#include <vector>

namespace pstrain::rpc {

enum class Transport { kTcp, kSameHost };

// The KJ address of the same-host name of a TCP address ("127.0.0.1:7100", "[::]:7100"):
// "unix-abstract:pstrain-rpc/127.0.0.1:7100".
std::string same_host_address(const std::string& ip_port);

// The same-host addresses to try, in order, before connecting to `resolved` (kj's text of a
// resolved TCP address; of several, the first, which TCP tries first) by TCP: its own, then its
// family's wildcard on its port. Empty unless it is a loopback address this network namespace
// holds (a datagram socket can bind to it) and the kernel does not let sockets bind foreign
// addresses (ip_nonlocal_bind).
std::vector<std::string> same_host_candidates(const std::string& resolved);

// Listens on the same-host name of the TCP listener `tcp` (its address and port as bound). Null
// if `tcp` is not on a loopback or wildcard address (no peer would try the name). Throws
// pstrain::Error naming the name if it is taken or cannot be bound. Does no I/O besides the
// socket calls. The caller drops it before `tcp`.
kj::Own<kj::ConnectionReceiver> listen_same_host(kj::Network& network, kj::ConnectionReceiver& tcp);

// Options for a new stream: TCP_NODELAY on TCP (replies are small and latency-bound; Nagle's
// algorithm with delayed ACKs would stall each by ~40 ms); a 4 MiB send buffer on a same-host
// socket (SO_SNDBUFFORCE where the process may, else SO_SNDBUF, which net.core.wmem_max caps:
// with the kernel's default ~200 KB a megabyte reply wakes its reader several times).
void tune_stream(kj::AsyncIoStream& stream, Transport transport);

// Connects to `address` (resolved): through a same-host socket when one answers and its peer
// runs as this process's user, else by TCP. The stream comes tuned.
struct TunedStream {
  kj::Own<kj::AsyncIoStream> stream;
  Transport transport = Transport::kTcp;
};
kj::Promise<TunedStream> connect_stream(kj::Network& network, kj::Own<kj::NetworkAddress> address);

// How many connections this process has made through same-host sockets (for tests).
uint64_t same_host_connections();

}  // namespace pstrain::rpc
