// Same-host sockets: RPC between processes that share a network namespace (processes on one
// machine, `deploy/local-cluster.sh`, containers with host networking) without loopback TCP.
//
// A parameter server listens on its TCP address and, beside it, on a Unix stream socket in the
// abstract namespace named after that address ("pstrain-rpc/0.0.0.0:7100"). A peer that connects
// to an address this network namespace owns tries those names first, the bound address before the
// wildcards (the order TCP itself resolves a local connection in), and falls back to TCP when
// none answers. Abstract names belong to a network namespace exactly as ports do, and vanish
// when their socket closes, so the name reached is the TCP listener's process or nobody: a
// container, a network namespace of the test bed, or another machine never sees it. A proxy in
// front of a server listens on its own port, so its clients reach the proxy, by TCP.
//
// Why: on one host a byte through loopback TCP costs about 0.7 ns of CPU (copies into and out of
// the kernel and the TCP stack on both sides), through a Unix socket with 4 MiB buffers about
// 0.3-0.6 ns, and a small sync cluster on two cores spends its spare CPU on those bytes
// (docs/BENCHMARKS.md, "Same-host sockets"). What crosses is the same Cap'n Proto stream,
// after the same cluster-secret handshake.
//
// Thread rules: functions take no locks; call them on the event loop that owns the streams.
#pragma once

#include <kj/async-io.h>

#include <string>
#include <vector>

namespace pstrain::rpc {

enum class Transport { kTcp, kSameHost };

// The abstract socket name for a TCP address as kj prints it ("127.0.0.1:7100", "[::]:7100").
std::string same_host_name(const std::string& ip_port);

// The names to try, in order, before connecting to `resolved` (kj's text of a resolved TCP
// address) by TCP: its own, then the wildcard addresses' on its port. Empty unless the address is
// one of this network namespace's (a datagram socket can be bound to it) and the kernel does not
// allow binding foreign addresses (net.ipv4.ip_nonlocal_bind), nor for a "unix" address.
std::vector<std::string> same_host_candidates(const std::string& resolved);

// Listens on the same-host name of the TCP listener at `bound_ip_port` (the listen address with
// the port it got). Null, with a warning in the log, if the name is taken or the socket fails:
// the TCP listener serves alone then. Waits on `wait_scope` only for parsing the name (no I/O).
kj::Own<kj::ConnectionReceiver> listen_same_host(kj::Network& network, kj::WaitScope& wait_scope,
                                                 const std::string& bound_ip_port);

// Options for a new stream of either transport: TCP_NODELAY on TCP (replies are small and
// latency-bound; Nagle's algorithm with delayed ACKs would stall each by ~40 ms); 4 MiB send and
// receive buffers on a same-host socket (with the default ~200 KB a megabyte message wakes the
// reader several times and the per-byte cost doubles).
void tune_stream(kj::AsyncIoStream& stream, Transport transport);

// Connects to `address` (resolved), through a same-host socket when one answers, else by TCP.
struct TunedStream {
  kj::Own<kj::AsyncIoStream> stream;
  Transport transport = Transport::kTcp;
};
kj::Promise<TunedStream> connect_stream(kj::Network& network, kj::Own<kj::NetworkAddress> address);

}  // namespace pstrain::rpc
