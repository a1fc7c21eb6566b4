#include "common/rpc/rpc_util.h"

#include <kj/async-unix.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <capnp/orphan.h>

#include "common/engine/compute_threads.h"
#include "common/base/error.h"
#include "common/base/log.h"

namespace pstrain::rpc {

HostPort parse_host_port(const std::string& text, uint32_t default_port, const std::string& what) {
  HostPort hp;
  const auto colon = text.rfind(':');
  hp.host = colon == std::string::npos ? text : text.substr(0, colon);
  if (hp.host.empty()) hp.host = "0.0.0.0";
  hp.port = default_port;
  if (colon != std::string::npos) {
    const std::string port = text.substr(colon + 1);
    char* end = nullptr;
    const long value = std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
      throw Error(what + " must look like host:port with a port from 0 to 65535, not '" + text + "'");
    }
    hp.port = static_cast<uint32_t>(value);
  }
  return hp;
}

Connection::Connection(kj::Own<kj::AsyncIoStream> stream) : stream_(kj::mv(stream)), client_(*stream_) {}

kj::Promise<kj::Own<Connection>> connect(kj::AsyncIoProvider& io, const HostPort& address,
                                         const ClusterCredential& credential) {
  return io.getNetwork()
      .parseAddress(address.host, address.port)
      .then([&io](kj::Own<kj::NetworkAddress> addr) { return connect_stream(io.getNetwork(), kj::mv(addr)); })
      .then([&io, address, credential](TunedStream tuned) {
        if (tuned.transport == Transport::kSameHost) {
          PSLOG(kDebug) << "reached " << address.str() << " through its same-host socket";
        }
        auto stream = kj::mv(tuned.stream);
        auto held = kj::heap<ClusterCredential>(credential);
        kj::AsyncIoStream& raw = *stream;
        auto proved = authenticate_to_server(raw, *held, io.getTimer(), address.str()).attach(kj::mv(held));
        return proved.then([stream = kj::mv(stream)]() mutable { return kj::heap<Connection>(kj::mv(stream)); });
      });
}

namespace {
// The handshakes in flight beside an accept loop.
struct Handshakes final : kj::TaskSet::ErrorHandler {
  kj::TaskSet tasks{*this};
  void taskFailed(kj::Exception&& e) override {
    PSLOG(kWarning) << "an RPC connection failed before it was served: " << e.getDescription().cStr();
  }
};

kj::Promise<void> accept_loop(capnp::TwoPartyServer& server, kj::ConnectionReceiver& listener, const ListenerAuth& auth,
                              Transport transport, Handshakes& handshakes) {
  return listener.accept().then([&server, &listener, &auth, transport, &handshakes](kj::Own<kj::AsyncIoStream> stream) {
    tune_stream(*stream, transport);
    if (auth.credential.open()) {
      server.accept(kj::mv(stream));
    } else {
      kj::AsyncIoStream& raw = *stream;
      handshakes.tasks.add(authenticate_client(raw, auth.credential, auth.timer, auth.refusals, auth.what)
                               .then([&server, stream = kj::mv(stream)](bool proved) mutable {
                                 if (proved) server.accept(kj::mv(stream));
                               }));
    }
    return accept_loop(server, listener, auth, transport, handshakes);
  });
}
}  // namespace

kj::Promise<void> serve(capnp::TwoPartyServer& server, kj::ConnectionReceiver& listener, const ListenerAuth& auth,
                        Transport transport) {
  auto handshakes = kj::heap<Handshakes>();
  Handshakes& raw = *handshakes;
  return accept_loop(server, listener, auth, transport, raw).attach(kj::mv(handshakes));
}

int prepare_node_process(int compute_threads) {
  capture_shutdown_signals();
  const int threads = set_compute_threads(compute_threads);
  keep_freed_memory();
  return threads;
}

std::string default_node_name() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return std::string(host) + "-" + std::to_string(getpid());
}

void capture_shutdown_signals() {
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  // A peer that vanishes must not kill us with SIGPIPE: writes fail with EPIPE instead.
  ::signal(SIGPIPE, SIG_IGN);
}

kj::Promise<int> shutdown_signal(kj::UnixEventPort& port) {
  return port.onSignal(SIGINT)
      .then([](siginfo_t) { return SIGINT; })
      .exclusiveJoin(port.onSignal(SIGTERM).then([](siginfo_t) { return SIGTERM; }));
}

kj::Promise<NodeStop> stop_on_signal(kj::UnixEventPort& port) {
  return shutdown_signal(port).then([](int signal) {
    PSLOG(kInfo) << "signal " << signal << ": stopping";
    return signal == SIGTERM ? NodeStop::kPreempted : NodeStop::kNow;
  });
}

void print_ready(const std::string& role, uint32_t port) {
  std::printf("PSTRAIN_READY role=%s port=%u\n", role.c_str(), port);
  std::fflush(stdout);
}

std::span<const float> tensor_view(proto::Tensor::Reader tensor, size_t expected, const char* what) {
  KJ_REQUIRE(tensor.getDtype() == proto::DType::FLOAT32, "only float32 tensors are supported", what);
  const auto data = tensor.getData();
  KJ_REQUIRE(data.size() % sizeof(float) == 0, "tensor data is not a whole number of float32 values", what,
             data.size());
  const size_t n = data.size() / sizeof(float);
  uint64_t product = 1;
  for (uint64_t d : tensor.getShape()) product *= d;
  KJ_REQUIRE(product == n, "tensor shape does not match its data", what, product, n);
  KJ_REQUIRE(n == expected, "wrong tensor size", what, n, expected);
  KJ_REQUIRE(reinterpret_cast<uintptr_t>(data.begin()) % alignof(float) == 0, "misaligned tensor data", what);
  return {reinterpret_cast<const float*>(data.begin()), n};
}

proto::DType to_wire(Dtype dtype) {
  return dtype == Dtype::kUint8 ? proto::DType::UINT8 : proto::DType::FLOAT32;
}

Dtype to_dtype(proto::DType dtype, const char* what) {
  KJ_REQUIRE(dtype == proto::DType::UINT8 || dtype == proto::DType::FLOAT32, "unknown dtype", what,
             static_cast<uint16_t>(dtype));
  return dtype == proto::DType::UINT8 ? Dtype::kUint8 : Dtype::kFloat32;
}

std::span<float> init_tensor(proto::Tensor::Builder tensor, size_t n) {
  tensor.setDtype(proto::DType::FLOAT32);
  tensor.initShape(1).set(0, n);
  auto data = tensor.initData(n * sizeof(float));
  return {reinterpret_cast<float*>(data.begin()), n};
}

void reference_tensor(proto::Tensor::Builder tensor, std::span<const float> values) {
  KJ_REQUIRE(reinterpret_cast<uintptr_t>(values.data()) % sizeof(capnp::word) == 0, "external tensor data must be word-aligned");
  tensor.setDtype(proto::DType::FLOAT32);
  tensor.initShape(1).set(0, values.size());
  const capnp::Data::Reader bytes(reinterpret_cast<const kj::byte*>(values.data()), values.size_bytes());
  tensor.adoptData(capnp::Orphanage::getForMessageContaining(tensor).referenceExternalData(bytes));
}

void set_tensor(proto::Tensor::Builder tensor, std::span<const float> values) {
  const std::span<float> out = init_tensor(tensor, values.size());
  std::memcpy(out.data(), values.data(), values.size_bytes());
}

std::vector<ChunkRange> read_ranges(capnp::List<proto::Range>::Reader list, size_t chunk_size, const char* what) {
  KJ_REQUIRE(list.size() <= kMaxRangesPerPart, "too many ranges", what, list.size(), kMaxRangesPerPart);
  std::vector<ChunkRange> ranges;
  ranges.reserve(list.size());
  size_t end = 0;
  for (auto r : list) {
    KJ_REQUIRE(r.getSize() > 0, "empty range", what, r.getOffset());
    KJ_REQUIRE(r.getOffset() >= end, "ranges must be sorted and disjoint", what, r.getOffset(), end);
    KJ_REQUIRE(r.getOffset() < chunk_size && r.getSize() <= chunk_size - r.getOffset(), "range outside the chunk",
               what, r.getOffset(), r.getSize(), chunk_size);
    ranges.push_back({static_cast<size_t>(r.getOffset()), static_cast<size_t>(r.getSize())});
    end = r.getOffset() + r.getSize();
  }
  return ranges;
}

void set_ranges(capnp::List<proto::Range>::Builder list, const std::vector<ChunkRange>& ranges) {
  for (unsigned i = 0; i < ranges.size(); ++i) {
    list[i].setOffset(ranges[i].offset);
    list[i].setSize(ranges[i].size);
  }
}

std::span<const float> part_view(capnp::Data::Reader data, size_t expected, const char* what) {
  KJ_REQUIRE(data.size() == expected * sizeof(float), "data size does not match", what, data.size(),
             expected * sizeof(float));
  KJ_REQUIRE(reinterpret_cast<uintptr_t>(data.begin()) % alignof(float) == 0, "misaligned part data", what);
  return {reinterpret_cast<const float*>(data.begin()), expected};
}

void reference_part(capnp::List<capnp::Data>::Builder list, unsigned i, std::span<const float> values) {
  KJ_REQUIRE(reinterpret_cast<uintptr_t>(values.data()) % sizeof(capnp::word) == 0, "external part data must be word-aligned");
  const capnp::Data::Reader bytes(reinterpret_cast<const kj::byte*>(values.data()), values.size_bytes());
  list.adopt(i, capnp::Orphanage::getForMessageContaining(list).referenceExternalData(bytes));
}

capnp::Orphan<capnp::Data> reference_floats(capnp::Orphanage orphanage, std::span<const float> values) {
  KJ_REQUIRE(reinterpret_cast<uintptr_t>(values.data()) % sizeof(capnp::word) == 0, "external data must be word-aligned");
  const capnp::Data::Reader bytes(reinterpret_cast<const kj::byte*>(values.data()), values.size_bytes());
  return orphanage.referenceExternalData(bytes);
}

void set_part(capnp::List<capnp::Data>::Builder list, unsigned i, std::span<const float> values) {
  list.set(i, capnp::Data::Reader(reinterpret_cast<const kj::byte*>(values.data()), values.size_bytes()));
}

void set_chunks(capnp::List<proto::Chunk>::Builder list, const std::vector<ChunkInfo>& chunks) {
  for (size_t i = 0; i < chunks.size(); ++i) {
    auto c = list[static_cast<unsigned>(i)];
    c.setKey(chunks[i].key);
    c.setParam(chunks[i].param);
    c.setOffset(chunks[i].offset);
    c.setSize(chunks[i].size);
    c.setServer(chunks[i].server);
    c.setStride(chunks[i].stride);
  }
}

std::vector<ChunkInfo> get_chunks(capnp::List<proto::Chunk>::Reader list) {
  std::vector<ChunkInfo> chunks;
  for (auto c : list) chunks.push_back({c.getKey(), c.getParam(), c.getOffset(), c.getSize(), c.getServer(), c.getStride()});
  return chunks;
}

std::string to_string(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

}  // namespace pstrain::rpc
