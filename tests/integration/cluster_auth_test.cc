// The cluster credential end to end (common/rpc/cluster_auth.h): real coordinator, server and
// worker processes with and without --cluster-secret-file, intruders with a wrong secret or none,
// a raw Cap'n Proto client, and pushes from a node the coordinator never assigned.
#include <capnp/rpc-twoparty.h>
#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <regex>

#include "common/engine/chunk_plan.h"
#include "common/data/job_spec.h"
#include "common/engine/param_layout.h"
#include "common/rpc/cluster_auth.h"
#include "common/rpc/rpc_util.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/rpc_support.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;
using testing::failure_of;

namespace {

constexpr char kSecret[] = "a2f9c1e07b3d45e8a2f9c1e07b3d45e8";

std::string write_secret(const testing::TempDir& dir, const std::string& name, const std::string& secret) {
  const std::string path = dir.file(name);
  std::ofstream(path) << secret << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

std::string sync_spec(int64_t batch, int64_t epochs, int64_t servers, int64_t workers) {
  JobSpec spec = testing::mlp_job(700, 500, static_cast<int>(epochs));
  spec.training.mode = TrainingMode::kSync;
  spec.training.global_batch_size = batch;
  spec.training.servers = servers;
  spec.training.workers = workers;
  return job_spec_to_json(spec);
}

// Trains `json` on 2 servers and 2 workers (with the secret file unless empty); the parameters.
std::vector<float> train(const std::string& json, const std::string& secret_file) {
  testing::TempDir dir;
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .save_params = dir.file("params.bin"),
                            .cluster_secret_file = secret_file});
  REQUIRE(cluster.wait_job(120s) == 0);
  const std::string expected = secret_file.empty() ? "the cluster is open" : "cluster credential set";
  CHECK(cluster.coordinator().log_text().find(expected) != std::string::npos);
  for (testing::Process* p : cluster.servers()) CHECK(p->log_text().find(expected) != std::string::npos);
  for (testing::Process* p : cluster.workers()) CHECK(p->log_text().find(expected) != std::string::npos);
  CHECK(cluster.coordinator().log_text().find("refused") == std::string::npos);
  return testing::read_floats(dir.file("params.bin"));
}

capnp::Request<proto::ParameterServer::PushParams, proto::ParameterServer::PushResults> zero_push(
    proto::ParameterServer::Client& server, const std::string& job, const ChunkInfo& chunk, const rpc::WorkerPass& pass) {
  auto request = server.pushRequest();
  request.setJobId(job);
  request.setKey(chunk.key);
  request.setStep(0);
  request.setSlice(0);
  request.setSliceCount(1);
  request.setExamples(1);
  std::vector<float> zeros(chunk.size, 0.0f);
  rpc::set_tensor(request.getGradient().initDense(), zeros);
  pass.set_on(request);
  return request;
}

}  // namespace

TEST_CASE("a sync job trains to bit-identical parameters with the cluster secret as without") {
  testing::TempDir dir;
  const std::string json = sync_spec(256, 1, 2, 2);
  const std::vector<float> open = train(json, "");
  const std::vector<float> secured = train(json, write_secret(dir, "secret", kSecret));
  REQUIRE(open.size() == secured.size());
  REQUIRE(!open.empty());
  CHECK(std::memcmp(open.data(), secured.data(), open.size() * sizeof(float)) == 0);
}

TEST_CASE("nodes with a wrong secret or none cannot register, an unassigned node cannot push, the job goes on") {
  testing::TempDir dir;
  const std::string secret = write_secret(dir, "secret", kSecret);
  const std::string wrong = write_secret(dir, "wrong", "not-the-cluster-secret-at-all-0000");
  const std::string json = sync_spec(128, 3, 1, 1);
  testing::Cluster cluster({.job_file = testing::write_spec(dir.path(), "job.json", json),
                            .servers = 1,
                            .workers = 1,
                            .cluster_secret_file = secret});
  cluster.coordinator().wait_for_line("servers configured", 30s);

  // Intruders: workers with a wrong secret and with none.
  const std::string coordinator = "127.0.0.1:" + std::to_string(cluster.coordinator_port());
  testing::Process& wrong_worker =
      cluster.group().start("intruder-wrong", {testing::binary("worker/pstrain-worker"), "--coordinator", coordinator,
                                               "--name", "intruder-wrong", "--cluster-secret-file", wrong});
  testing::Process& open_worker = cluster.group().start(
      "intruder-open", {testing::binary("worker/pstrain-worker"), "--coordinator", coordinator, "--name", "intruder-open"});

  // A node that holds the secret but was never assigned: its pushes and pulls of the job fail.
  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto connection = rpc::connect(*io.provider, {"127.0.0.1", static_cast<uint32_t>(cluster.server_ports()[0])},
                                 rpc::ClusterCredential::from_secret(kSecret))
                        .wait(ws);
  auto server = connection->bootstrap().castAs<proto::ParameterServer>();
  const auto chunks = plan_chunks(make_param_layout(parse_job_spec(json).model), 1);
  const rpc::WorkerPass forged{1, std::string(32, 'x')};
  for (const rpc::WorkerPass& pass : {forged, rpc::WorkerPass{}}) {
    const std::string push = failure_of(zero_push(server, "cli-job", chunks[0], pass).send(), ws);
    CHECK_MESSAGE(push.find("not a worker the coordinator assigned to the job") != std::string::npos, push);
    auto pull = server.pullRequest();
    pull.setJobId("cli-job");
    pull.setKey(chunks[0].key);
    pass.set_on(pull);
    const std::string pulled = failure_of(pull.send(), ws);
    CHECK_MESSAGE(pulled.find("not a worker the coordinator assigned to the job") != std::string::npos, pulled);
  }

  wrong_worker.wait_for_line(std::regex("did not let this node in: cluster authentication failed: .*cluster secret differs"),
                             20s, "the wrong secret's refusal");
  open_worker.wait_for_line(std::regex("did not let this node in: .*requires the cluster secret"), 20s,
                            "the missing secret's refusal");
  cluster.coordinator().wait_for_line(
      std::regex("refused an RPC connection to the coordinator from 127\\.0\\.0\\.1:[0-9]+: wrong proof of the cluster "
                 "secret \\([0-9]+ refused so far\\)"),
      20s, "the coordinator's refusal of the wrong secret");
  cluster.coordinator().wait_for_line(
      std::regex("refused an RPC connection to the coordinator from .*: it sent no cluster credential"), 20s,
      "the coordinator's refusal of the open node");
  cluster.servers()[0]->wait_for_line(std::regex("job cli-job: refused a call of node 1: no valid worker token"), 5s,
                                      "the server's log of the forged push");
  {  // Both refusals (the wrong secret's, the open node's) are counted in /metrics.
    const auto metrics = testing::http_test::get(cluster.http_port(), "/metrics");
    const size_t at = metrics.body.find("\npstrain_rpc_auth_refusals_total ");
    REQUIRE_MESSAGE(at != std::string::npos, metrics.body);
    CHECK(std::stod(metrics.body.substr(at + 33)) >= 2);
  }

  REQUIRE(cluster.wait_job(120s) == 0);
  CHECK(wrong_worker.log_text().find("registered with the coordinator") == std::string::npos);
  CHECK(open_worker.log_text().find("registered with the coordinator") == std::string::npos);
  CHECK(cluster.final_accuracy() > 0.8);
}

TEST_CASE("a parameter server with a secret: raw clients get only the refusal, both ends prove, tokens are checked") {
  testing::TempDir dir;
  const std::string secret = write_secret(dir, "secret", kSecret);
  testing::ProcessGroup group;
  auto start_server = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {testing::binary("server/pstrain-server"), "--listen", "127.0.0.1:0",
                                     "--coordinator", "127.0.0.1:1", "--data-dir", dir.file(name + "-data")};
    argv.insert(argv.end(), extra.begin(), extra.end());
    testing::Process& p = group.start(name, argv);
    return std::make_pair(&p, static_cast<uint32_t>(testing::wait_ready(p, 20s)));
  };
  auto [secured, secured_port] = start_server("secured", {"--cluster-secret-file", secret});
  auto [open, open_port] = start_server("open", {});

  auto io = kj::setupAsyncIo();
  auto& ws = io.waitScope;
  auto stats = [&](proto::ParameterServer::Client server) {
    auto request = server.statsRequest();
    request.setJobId("none");
    return failure_of(request.send(), ws);
  };

  {  // A plain Cap'n Proto client: one Abort, then the close.
    auto stream = io.provider->getNetwork().parseAddress("127.0.0.1", secured_port).wait(ws)->connect().wait(ws);
    capnp::TwoPartyClient client(*stream);
    const std::string error = stats(client.bootstrap().castAs<proto::ParameterServer>());
    CHECK_MESSAGE(error.find("requires the cluster secret") != std::string::npos, error);
  }
  {  // A wrong secret: refused, and the client knows why.
    const std::string error = failure_of(
        rpc::connect(*io.provider, {"127.0.0.1", secured_port}, rpc::ClusterCredential::from_secret("0000000000000000")), ws);
    CHECK_MESSAGE(error.find("cluster authentication failed: the peer at 127.0.0.1") != std::string::npos, error);
    CHECK_MESSAGE(error.find("cluster secret differs") != std::string::npos, error);
  }
  {  // Mutual: a client with the secret does not talk to a listener that cannot prove it.
    const std::string error =
        failure_of(rpc::connect(*io.provider, {"127.0.0.1", open_port}, rpc::ClusterCredential::from_secret(kSecret)), ws);
    CHECK_MESSAGE(error.find("does not take part in the cluster handshake") != std::string::npos, error);
  }
  secured->wait_for_line(std::regex("refused an RPC connection to the parameter server from 127\\.0\\.0\\.1:[0-9]+: it "
                                    "sent no cluster credential \\(1 refused so far\\)"),
                         5s, "the refusal of the plain client");
  secured->wait_for_line(std::regex("wrong proof of the cluster secret \\(2 refused so far\\)"), 5s,
                         "the refusal of the wrong secret");

  // The right secret: served (an unknown job is the server's own answer).
  auto connection =
      rpc::connect(*io.provider, {"127.0.0.1", secured_port}, rpc::ClusterCredential::from_secret(kSecret)).wait(ws);
  auto server = connection->bootstrap().castAs<proto::ParameterServer>();
  CHECK(stats(server).find("unknown job") != std::string::npos);

  // Worker tokens: a job configured with a worker key takes pushes and pulls only with the token of
  // the node the call names.
  const std::string json = sync_spec(128, 1, 1, 1);
  const auto chunks = plan_chunks(make_param_layout(parse_job_spec(json).model), 1);
  const std::string key = rpc::random_key();
  testing::configure_job(server, ws, "probe", json, chunks, 1, key);
  const rpc::WorkerPass worker{7, rpc::worker_token(key, 7)};
  const rpc::WorkerPass borrowed{8, worker.token};  // node 8 presenting node 7's token
  const rpc::WorkerPass other_job{7, rpc::worker_token(rpc::random_key(), 7)};
  for (const rpc::WorkerPass& pass : {rpc::WorkerPass{}, borrowed, other_job}) {
    const std::string error = failure_of(zero_push(server, "probe", chunks[0], pass).send(), ws);
    CHECK_MESSAGE(error.find("not a worker the coordinator assigned to the job") != std::string::npos, error);
  }
  auto reply = zero_push(server, "probe", chunks[0], worker).send().wait(ws);
  CHECK(reply.getVersion() == 1);
  CHECK(reply.getApplied());
  auto pull = server.pullRequest();
  pull.setJobId("probe");
  pull.setKey(chunks[0].key);
  pull.setMinVersion(1);
  worker.set_on(pull);
  CHECK(pull.send().wait(ws).getVersion() == 1);
  auto finished = server.workerFinishedRequest();
  finished.setJobId("probe");
  CHECK(failure_of(finished.send(), ws).find("not a worker the coordinator assigned") != std::string::npos);
}
