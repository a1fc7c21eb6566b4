// Same-host sockets (common/rpc/same_host.h) over real sockets: which names a connection tries,
// that a server's same-host socket carries the stream both ways, that a missing name falls back
// to TCP and a taken one stops the server, and that the cluster secret is proved on it as on TCP.
#include "common/rpc/same_host.h"

#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <sys/socket.h>

#include <fstream>
#include <string>

#include "common/base/error.h"
#include "common/rpc/rpc_util.h"
#include "tests/test_support.h"

using namespace pstrain;

namespace {

// A TCP listener on `host` at a free port.
struct TcpListener {
  kj::Own<kj::ConnectionReceiver> receiver;
  uint32_t port = 0;
};
TcpListener listen_tcp(kj::AsyncIoContext& io, const char* host) {
  TcpListener l;
  l.receiver = io.provider->getNetwork().parseAddress(host, 0).wait(io.waitScope)->listen();
  l.port = l.receiver->getPort();
  return l;
}

rpc::TunedStream connect_to(kj::AsyncIoContext& io, const std::string& host, uint32_t port) {
  auto& network = io.provider->getNetwork();
  return rpc::connect_stream(network, network.parseAddress(host, port).wait(io.waitScope)).wait(io.waitScope);
}

// Writes `text` on one end and reads it whole on the other.
std::string cross(kj::AsyncIoContext& io, kj::AsyncIoStream& from, kj::AsyncIoStream& to, const std::string& text) {
  auto written = from.write(text.data(), text.size());
  std::string got(text.size(), '\0');
  to.read(got.data(), got.size()).wait(io.waitScope);
  written.wait(io.waitScope);
  return got;
}

// Where the kernel lets sockets bind foreign addresses, no address counts as this namespace's and
// the path is off by design: the tests that need it check that much and say so.
bool path_off_by_host() {
  std::ifstream in("/proc/sys/net/ipv4/ip_nonlocal_bind");
  int value = 0;
  if (!(in >> value) || value == 0) return false;
  CHECK(rpc::same_host_candidates("127.0.0.1:7100").empty());
  MESSAGE("net.ipv4.ip_nonlocal_bind is set: same-host sockets are off here by design; only that was checked");
  return true;
}

int send_buffer(kj::AsyncIoStream& stream) {
  int value = 0;
  uint length = sizeof value;
  stream.getsockopt(SOL_SOCKET, SO_SNDBUF, &value, &length);
  return value;
}

}  // namespace

TEST_CASE("same-host names: a loopback address tries its own name then its family's wildcard, others none") {
  if (path_off_by_host()) return;
  const auto v4 = rpc::same_host_candidates("127.0.0.1:7100");
  REQUIRE(v4.size() == 2);
  CHECK(v4[0] == "unix-abstract:pstrain-rpc/127.0.0.1:7100");
  CHECK(v4[1] == "unix-abstract:pstrain-rpc/0.0.0.0:7100");
  // Of several resolved addresses the first, which TCP tries first; an IPv4-mapped one is IPv4.
  CHECK(rpc::same_host_candidates("127.0.0.1:7100,[::1]:7100") == v4);
  CHECK(rpc::same_host_candidates("[::ffff:127.0.0.1]:7100") == v4);
  // 192.0.2.0/24 is TEST-NET-1 and not loopback: never tried, whoever holds it.
  CHECK(rpc::same_host_candidates("192.0.2.7:7100").empty());
  CHECK(rpc::same_host_candidates("0.0.0.0:7100").empty());
  CHECK(rpc::same_host_candidates("unix:/tmp/pstrain.sock").empty());
  CHECK(rpc::same_host_candidates("127.0.0.1:").empty());
  CHECK(rpc::same_host_candidates("not an address").empty());
  // IPv6 loopback, where the machine has it: the IPv6 wildcard only, never the IPv4 one.
  const auto v6 = rpc::same_host_candidates("[::1]:7100");
  if (!v6.empty()) {
    REQUIRE(v6.size() == 2);
    CHECK(v6[0] == "unix-abstract:pstrain-rpc/[::1]:7100");
    CHECK(v6[1] == "unix-abstract:pstrain-rpc/[::]:7100");
  }
}

TEST_CASE("a server listening on both is reached through its same-host socket, which carries bytes both ways") {
  if (path_off_by_host()) return;
  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    CAPTURE(host);
    TcpListener tcp = listen_tcp(io, host);
    auto same_host = rpc::listen_same_host(network, *tcp.receiver);
    REQUIRE(same_host.get() != nullptr);
    auto accepted = same_host->accept();
    const uint64_t before = rpc::same_host_connections();
    rpc::TunedStream client = connect_to(io, "127.0.0.1", tcp.port);
    REQUIRE(client.transport == rpc::Transport::kSameHost);  // else the accept below never ends
    CHECK(rpc::same_host_connections() == before + 1);
    auto server = accepted.wait(io.waitScope);
    rpc::tune_stream(*server, rpc::Transport::kSameHost);
    // A megabyte each way: more than one default socket buffer.
    const std::string there(1 << 20, 'a'), back(1 << 20, 'b');
    CHECK(cross(io, *client.stream, *server, there) == there);
    CHECK(cross(io, *server, *client.stream, back) == back);
    // The kernel doubles what it is given: more than its ~200 KB default either way.
    CHECK(send_buffer(*client.stream) > 256 * 1024);
  }
}

TEST_CASE("without a same-host socket the connection goes by TCP, and a name taken stops the second listener") {
  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  TcpListener tcp = listen_tcp(io, "127.0.0.1");
  auto accepted = tcp.receiver->accept();
  rpc::TunedStream client = connect_to(io, "127.0.0.1", tcp.port);
  CHECK(client.transport == rpc::Transport::kTcp);
  auto server = accepted.wait(io.waitScope);
  CHECK(cross(io, *client.stream, *server, "tcp") == "tcp");

  auto first = rpc::listen_same_host(network, *tcp.receiver);
  CHECK(first.get() != nullptr);
  CHECK_THROWS_WITH_AS(rpc::listen_same_host(network, *tcp.receiver),
                       doctest::Contains("another process of this network namespace holds it"), Error);
}

TEST_CASE("the cluster secret is proved on a same-host connection as on TCP") {
  if (path_off_by_host()) return;
  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  const auto secret = rpc::ClusterCredential::from_secret("0123456789abcdef-same-host");
  const auto other = rpc::ClusterCredential::from_secret("0123456789abcdef-other-one");
  capnp::TwoPartyServer server(capnp::Capability::Client(KJ_EXCEPTION(FAILED, "no bootstrap in this test")));
  // The TCP listener proves the other secret: a client of `secret` that went by TCP would fail,
  // one of `other` pass.
  TcpListener tcp = listen_tcp(io, "127.0.0.1");
  auto same_host = rpc::listen_same_host(network, *tcp.receiver);
  REQUIRE(same_host.get() != nullptr);
  rpc::AuthRefusals refusals, tcp_refusals;
  const rpc::ListenerAuth auth{secret, io.provider->getTimer(), refusals, "test server"};
  const rpc::ListenerAuth tcp_auth{other, io.provider->getTimer(), tcp_refusals, "test server by TCP"};
  auto serving = rpc::serve(server, *same_host, auth, rpc::Transport::kSameHost).eagerlyEvaluate(nullptr);
  auto serving_tcp = rpc::serve(server, *tcp.receiver, tcp_auth).eagerlyEvaluate(nullptr);

  auto connection = rpc::connect(*io.provider, {"127.0.0.1", tcp.port}, secret).wait(io.waitScope);
  CHECK(connection.get() != nullptr);
  CHECK(refusals.count() == 0);

  const std::string error = testing::failure_of(rpc::connect(*io.provider, {"127.0.0.1", tcp.port}, other), io.waitScope);
  CHECK(error.find("cluster authentication failed") != std::string::npos);
  // The listener counts the refusal once its side of the handshake has run.
  for (int i = 0; i < 1000 && refusals.count() == 0; ++i) {
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
  CHECK(refusals.count() == 1);
  CHECK(tcp_refusals.count() == 0);
}
