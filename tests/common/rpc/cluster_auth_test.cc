// The cluster handshake and worker tokens (common/rpc/cluster_auth.h), over an in-process pipe.
#include "common/rpc/cluster_auth.h"

#include <doctest/doctest.h>
#include <kj/async-io.h>

#include <fstream>

#include "common/base/error.h"
#include "tests/test_support.h"

using namespace pstrain;

namespace {

struct Outcome {
  std::string client_error;  // "" if the client's side succeeded
  bool server_accepted = false;
  uint64_t refusals = 0;
};

Outcome handshake(const rpc::ClusterCredential& client, const rpc::ClusterCredential& server) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  rpc::AuthRefusals refusals;
  auto accepted = rpc::authenticate_client(*pipe.ends[1], server, io.provider->getTimer(), refusals, "test listener");
  Outcome out;
  out.client_error = testing::failure_of(rpc::authenticate_to_server(*pipe.ends[0], client, io.provider->getTimer(), "peer"),
                                         io.waitScope);
  if (!out.client_error.empty()) pipe.ends[0]->shutdownWrite();  // as the close would
  out.server_accepted = accepted.wait(io.waitScope);
  out.refusals = refusals.count();
  return out;
}

}  // namespace

TEST_CASE("cluster handshake: the same secret passes both ways, a different one fails both ways and is counted") {
  const auto a = rpc::ClusterCredential::from_secret("0123456789abcdef-one");
  const auto b = rpc::ClusterCredential::from_secret("0123456789abcdef-two");
  const Outcome same = handshake(a, a);
  CHECK(same.client_error.empty());
  CHECK(same.server_accepted);
  CHECK(same.refusals == 0);

  const Outcome different = handshake(a, b);
  CHECK(different.client_error.find("cluster authentication failed") != std::string::npos);
  CHECK(different.client_error.find("cluster secret differs") != std::string::npos);
  CHECK(!different.server_accepted);
  CHECK(different.refusals == 1);

  // Open on both ends: nothing is exchanged.
  const Outcome open = handshake({}, {});
  CHECK(open.client_error.empty());
  CHECK(open.server_accepted);
}

TEST_CASE("cluster handshake: a plain client gets one Abort naming the reason and an open listener is not trusted") {
  const auto secret = rpc::ClusterCredential::from_secret("0123456789abcdef-one");
  auto io = kj::setupAsyncIo();
  {
    auto pipe = io.provider->newTwoWayPipe();
    rpc::AuthRefusals refusals;
    auto accepted = rpc::authenticate_client(*pipe.ends[1], secret, io.provider->getTimer(), refusals, "test listener");
    // What a Cap'n Proto client sends first: a segment table, then words.
    const char bootstrap[16] = {0, 0, 0, 0, 1, 0, 0, 0};
    pipe.ends[0]->write(bootstrap, sizeof bootstrap).wait(io.waitScope);
    pipe.ends[0]->shutdownWrite();
    auto reply = pipe.ends[0]->readAllText().wait(io.waitScope);
    CHECK(!accepted.wait(io.waitScope));
    CHECK(refusals.count() == 1);
    CHECK(std::string(reply.cStr(), reply.size()).find("requires the cluster secret") != std::string::npos);
  }
  {
    auto pipe = io.provider->newTwoWayPipe();
    pipe.ends[1]->shutdownWrite();  // a listener that says nothing back (open: its RPC system aborts)
    const std::string error = testing::failure_of(
        rpc::authenticate_to_server(*pipe.ends[0], secret, io.provider->getTimer(), "peer"), io.waitScope);
    CHECK(error.find("does not take part in the cluster handshake") != std::string::npos);
  }
}

TEST_CASE("worker tokens are bound to the job's key and the node and comparison needs the exact token") {
  const std::string coordinator_key = rpc::random_key();
  const std::string job = rpc::job_key(coordinator_key, "job-1");
  CHECK(job != rpc::job_key(coordinator_key, "job-2"));
  CHECK(job != rpc::job_key(rpc::random_key(), "job-1"));
  const std::string token = rpc::worker_token(job, 3);
  CHECK(token.size() == 32);
  CHECK(rpc::token_matches(rpc::worker_token(job, 3), token.data(), token.size()));
  CHECK(!rpc::token_matches(rpc::worker_token(job, 4), token.data(), token.size()));
  CHECK(!rpc::token_matches(rpc::worker_token(rpc::job_key(coordinator_key, "job-2"), 3), token.data(), token.size()));
  CHECK(!rpc::token_matches(token, token.data(), 31));
  CHECK(!rpc::token_matches(token, "", 0));
}

TEST_CASE("the secret file: a trailing newline is not part of it and short or missing files are refused by name") {
  testing::TempDir dir;
  std::ofstream(dir.file("ok")) << "0123456789abcdef0123\n";
  std::ofstream(dir.file("short")) << "tooshort\n";
  const auto from_file = rpc::ClusterCredential::from_file(dir.file("ok"), "--cluster-secret-file");
  CHECK(from_file.mac("l", "a", "b") == rpc::ClusterCredential::from_secret("0123456789abcdef0123").mac("l", "a", "b"));
  CHECK_THROWS_WITH_AS(rpc::ClusterCredential::from_file(dir.file("short"), "--cluster-secret-file"),
                       doctest::Contains("at least 16"), Error);
  CHECK_THROWS_WITH_AS(rpc::ClusterCredential::from_file(dir.file("missing"), "--cluster-secret-file"),
                       doctest::Contains("missing"), Error);
  CHECK(rpc::ClusterCredential::from_flag("").open());
  // The coordinator's key file: made once, then the same key.
  const std::string key = rpc::load_or_create_key_file(dir.file("worker-token.key"));
  CHECK(key.size() == 32);
  CHECK(rpc::load_or_create_key_file(dir.file("worker-token.key")) == key);
}
