// Same-host sockets (common/rpc/same_host.h) over real sockets: which names a connection tries,
// that a server's same-host socket carries the stream both ways, that a missing or taken name
// falls back to TCP, and that the cluster secret is proved on it as on TCP.
#include "common/rpc/same_host.h"

#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <sys/socket.h>

#include <string>

#include "common/rpc/rpc_util.h"
#include "tests/test_support.h"

using namespace pstrain;

namespace {

std::string text_of(kj::NetworkAddress& address) { return kj::str(address.toString()).cStr(); }

// A TCP listener on `host` at a free port, and that address as kj prints it ("127.0.0.1:41234").
struct TcpListener {
  kj::Own<kj::ConnectionReceiver> receiver;
  std::string bound;
  uint32_t port = 0;
};
TcpListener listen_tcp(kj::AsyncIoContext& io, const char* host) {
  TcpListener l;
  auto address = io.provider->getNetwork().parseAddress(host, 0).wait(io.waitScope);
  l.receiver = address->listen();
  l.port = l.receiver->getPort();
  const std::string text = text_of(*address);
  l.bound = text.substr(0, text.rfind(':') + 1) + std::to_string(l.port);
  return l;
}

rpc::TunedStream connect_to(kj::AsyncIoContext& io, const std::string& host, uint32_t port) {
  auto& network = io.provider->getNetwork();
  return rpc::connect_stream(network, network.parseAddress(host, port).wait(io.waitScope)).wait(io.waitScope);
}

// Writes `text` on one end and reads it whole on the other.
std::string cross(kj::AsyncIoContext& io, kj::AsyncIoStream& from, kj::AsyncIoStream& to, const std::string& text) {
  from.write(text.data(), text.size()).wait(io.waitScope);
  std::string got(text.size(), '\0');
  to.read(got.data(), got.size()).wait(io.waitScope);
  return got;
}

int buffer_of(kj::AsyncIoStream& stream, int option) {
  int value = 0;
  uint length = sizeof value;
  stream.getsockopt(SOL_SOCKET, option, &value, &length);
  return value;
}

}  // namespace

TEST_CASE("same-host names: a local address tries its own name then the wildcards', a foreign or unix one none") {
  const auto local = rpc::same_host_candidates("127.0.0.1:7100");
  REQUIRE(local.size() == 3);
  CHECK(local[0] == "unix-abstract:pstrain-rpc/127.0.0.1:7100");
  CHECK(local[1] == "unix-abstract:pstrain-rpc/0.0.0.0:7100");
  CHECK(local[2] == "unix-abstract:pstrain-rpc/[::]:7100");
  // 192.0.2.0/24 is TEST-NET-1: never an address of this machine.
  CHECK(rpc::same_host_candidates("192.0.2.7:7100").empty());
  CHECK(rpc::same_host_candidates("unix:/tmp/pstrain.sock").empty());
  CHECK(rpc::same_host_candidates("0.0.0.0:7100").empty());
  CHECK(rpc::same_host_candidates("not an address").empty());
}

TEST_CASE("a server listening on both is reached through its same-host socket, which carries bytes both ways") {
  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    CAPTURE(host);
    TcpListener tcp = listen_tcp(io, host);
    auto same_host = rpc::listen_same_host(network, io.waitScope, tcp.bound);
    REQUIRE(same_host.get() != nullptr);
    auto accepted = same_host->accept();
    rpc::TunedStream client = connect_to(io, "127.0.0.1", tcp.port);
    REQUIRE(client.transport == rpc::Transport::kSameHost);  // else the accept below never ends
    auto server = accepted.wait(io.waitScope);
    rpc::tune_stream(*server, rpc::Transport::kSameHost);
    // A megabyte each way: more than one default socket buffer.
    const std::string there(1 << 20, 'a'), back(1 << 20, 'b');
    auto sent = client.stream->write(there.data(), there.size());
    std::string got(there.size(), '\0');
    server->read(got.data(), got.size()).wait(io.waitScope);
    sent.wait(io.waitScope);
    CHECK(got == there);
    CHECK(cross(io, *server, *client.stream, "ok") == "ok");
    // The kernel doubles what it is given, up to net.core.wmem_max: more than its ~200 KB default.
    CHECK(buffer_of(*client.stream, SO_SNDBUF) > 256 * 1024);
  }
}

TEST_CASE("without a same-host socket, or with its name taken, the connection goes by TCP") {
  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  TcpListener tcp = listen_tcp(io, "127.0.0.1");
  auto accepted = tcp.receiver->accept();
  rpc::TunedStream client = connect_to(io, "127.0.0.1", tcp.port);
  CHECK(client.transport == rpc::Transport::kTcp);
  auto server = accepted.wait(io.waitScope);
  CHECK(cross(io, *client.stream, *server, "tcp") == "tcp");

  auto first = rpc::listen_same_host(network, io.waitScope, tcp.bound);
  CHECK(first.get() != nullptr);
  auto second = rpc::listen_same_host(network, io.waitScope, tcp.bound);  // logs a warning
  CHECK(second.get() == nullptr);
}

TEST_CASE("the cluster secret is proved on a same-host connection as on TCP") {
  auto io = kj::setupAsyncIo();
  auto& network = io.provider->getNetwork();
  const auto secret = rpc::ClusterCredential::from_secret("0123456789abcdef-same-host");
  const auto other = rpc::ClusterCredential::from_secret("0123456789abcdef-other-one");
  capnp::TwoPartyServer server(capnp::Capability::Client(KJ_EXCEPTION(FAILED, "no bootstrap in this test")));
  TcpListener tcp = listen_tcp(io, "127.0.0.1");
  auto same_host = rpc::listen_same_host(network, io.waitScope, tcp.bound);
  REQUIRE(same_host.get() != nullptr);
  rpc::AuthRefusals refusals;
  const rpc::ListenerAuth auth{secret, io.provider->getTimer(), refusals, "test server"};
  // Only the same-host socket is left: a connection that went by TCP is refused.
  tcp.receiver = nullptr;
  auto serving = rpc::serve(server, *same_host, auth, rpc::Transport::kSameHost).eagerlyEvaluate(nullptr);

  auto connection = rpc::connect(*io.provider, {"127.0.0.1", tcp.port}, secret).wait(io.waitScope);
  CHECK(connection.get() != nullptr);
  CHECK(refusals.count() == 0);

  const std::string error = testing::failure_of(rpc::connect(*io.provider, {"127.0.0.1", tcp.port}, other), io.waitScope);
  CHECK(error.find("cluster authentication failed") != std::string::npos);
  // The listener counts the refusal once its side of the handshake has run.
  for (int i = 0; i < 100 && refusals.count() == 0; ++i) io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  CHECK(refusals.count() == 1);
}
