// `pstrain`, the command-line client, end to end: the binary run as a user would, against a real
// cluster (coordinator, server and worker processes on loopback) and against a stand-in event
// stream (fake_event_server.py, the SSE contract), checking what it prints and its exit codes.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/data/job_spec.h"
#include "common/base/sha256.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

struct Run {
  int code = -1;
  std::string output;  // stdout and stderr, as written
};

// Runs `pstrain ARGS` (or, with `tty`, under `script` so that its stdout is a terminal) with
// PSTRAIN_URL=url; fails the test if it does not end within `timeout`.
Run run_pstrain(testing::ProcessGroup& group, const std::string& url, std::vector<std::string> args,
            std::chrono::seconds timeout = 60s, bool tty = false, testing::Env env = {}) {
  static int runs = 0;
  std::vector<std::string> argv = {testing::binary("cli/pstrain")};
  argv.insert(argv.end(), args.begin(), args.end());
  if (tty) {
    std::string command;
    for (const auto& a : argv) command += (command.empty() ? "" : " ") + ("'" + a + "'");
    // -e: script exits with the child's code; -f: flushes each write; the child's stdout is the pty.
    argv = {"script", "-qefc", command, "/dev/null"};
  }
  env.emplace_back("PSTRAIN_URL", url);
  testing::Process& p = group.start("pstrain-" + std::to_string(++runs), argv, env);
  const auto code = p.wait_exit(timeout);
  INFO("pstrain " << argv.back() << " output:\n" << p.log_text());
  REQUIRE_MESSAGE(code.has_value(), "pstrain did not exit within " << timeout.count() << " s");
  Run r;
  r.code = *code;
  r.output = p.log_text();
  r.output.erase(0, r.output.find('\n') + 1);  // the harness's "start" line
  return r;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string url_of(testing::Cluster& cluster) { return "http://127.0.0.1:" + std::to_string(cluster.http_port()); }

std::string small_job(int epochs, int hidden = 32) {
  JobSpec spec = testing::mlp_job(hidden, 16, epochs);
  spec.training.servers = 1;
  spec.training.workers = 1;
  return job_spec_to_json(spec);
}

int count(const std::string& text, const std::regex& re) {
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// An .npy file of `n` examples of shape 28x28x1: `descr` "|u1" or "<f4", `data` its raw bytes.
void write_npy(const std::string& path, const std::string& descr, size_t n, const void* data, size_t bytes) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(n) + ", 28, 28, 1), }";
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
  const auto size = static_cast<uint16_t>(header.size());
  std::ofstream out(path, std::ios::binary);
  out << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(size & 0xff) << static_cast<char>(size >> 8) << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

const std::regex kEpochLine(
    R"(\nEpoch ([0-9]+)/([0-9]+) - [0-9.]+s - loss: [0-9.]+ - accuracy: [0-9.]+ - test_loss: [0-9.]+ - test_accuracy: [0-9.]+ - [0-9,]+ samples/s(?=\n))");

}  // namespace

TEST_CASE("pstrain: submit --follow, status, list, cluster, download and --json against a cluster") {
  testing::TempDir dir;
  testing::Cluster cluster({.servers = 1, .workers = 1});
  testing::ProcessGroup& group = cluster.group();
  const std::string url = url_of(cluster);
  const std::string spec = testing::write_spec(dir.path(), "job.json", small_job(3));

  // submit --follow, not on a terminal: the id, one line per epoch, the end; no '\r', no bar.
  const Run follow = run_pstrain(group, url, {"submit", spec, "--follow"});
  CHECK(follow.code == 0);
  const std::string out = "\n" + follow.output;
  CHECK(count(out, kEpochLine) == 3);
  for (int e = 1; e <= 3; ++e) {
    CHECK(out.find("\nEpoch " + std::to_string(e) + "/3 - ") != std::string::npos);
  }
  CHECK(out.find('\r') == std::string::npos);
  CHECK(out.find('[') == std::string::npos);  // no progress bar
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("\n(job-[0-9]+)\n")));
  const std::string id = m[1];
  CHECK(std::regex_search(out, std::regex("job " + id + " SUCCEEDED: final test accuracy 0\\.[0-9]{4}\n")));

  // The same, by polling (what follow does on a coordinator without the event stream): the
  // same lines, whichever way the first run went.
  const Run polled = run_pstrain(group, url, {"follow", id}, 60s, false, {{"PSTRAIN_FOLLOW", "poll"}});
  CHECK(polled.code == 0);
  CHECK(count("\n" + polled.output, kEpochLine) == 3);
  for (int e = 1; e <= 3; ++e) {
    const std::string prefix = "\nEpoch " + std::to_string(e) + "/3 - ";
    const size_t at = out.find(prefix);
    REQUIRE(at != std::string::npos);
    // The losses and accuracies are the same (the duration may differ, stream vs metrics times,
    // and the samples/s by a rounding).
    const size_t from = out.find(" - loss: ", at);
    const std::string figures = out.substr(from, out.find(" samples/s", from) - from);
    const std::string kept = figures.substr(0, figures.rfind(" - "));
    CHECK_MESSAGE(polled.output.find(kept) != std::string::npos, kept << " not in:\n" << polled.output);
  }
  CHECK(polled.output.find("job " + id + " SUCCEEDED: final test accuracy") != std::string::npos);

  // status: the human summary.
  const Run status = run_pstrain(group, url, {"status", id});
  CHECK(status.code == 0);
  CHECK(status.output.find("SUCCEEDED") != std::string::npos);
  CHECK(status.output.find("epoch 3/3") != std::string::npos);
  CHECK(status.output.find("/v1/jobs/" + id + "/model") != std::string::npos);

  // list: a header and the job's row.
  const Run list = run_pstrain(group, url, {"list"});
  CHECK(list.code == 0);
  CHECK(std::regex_search(list.output, std::regex("ID +NAME +STATE +PROGRESS +ACCURACY +MODE +CREATED")));
  CHECK(std::regex_search(list.output, std::regex(id + " +mnist-mlp +SUCCEEDED +100\\.0% +0\\.[0-9]{4} +sync +20")));

  // cluster: the server and the worker.
  const Run nodes = run_pstrain(group, url, {"cluster"});
  CHECK(nodes.code == 0);
  CHECK(std::regex_search(nodes.output, std::regex("server +[^ ]+ +127\\.0\\.0\\.1:[0-9]+ +yes")));
  CHECK(std::regex_search(nodes.output, std::regex("worker .* yes")));

  // download: the same bytes as the REST download.
  const std::string model = dir.path() + "/model.safetensors";
  const Run download = run_pstrain(group, url, {"download", id, "-o", model});
  CHECK(download.code == 0);
  const auto rest = testing::http_test::get(cluster.http_port(), "/v1/jobs/" + id + "/model");
  REQUIRE(rest.status == 200);
  const std::string bytes = file_text(model);
  CHECK(bytes.size() == rest.body.size());
  CHECK(sha256_hex(bytes) == sha256_hex(rest.body));
  CHECK(download.output.find(model) != std::string::npos);
  // export: the REST API's ONNX bytes, of the model and of its latest checkpoint.
  const std::string onnx = dir.path() + "/model.onnx";
  const Run exported = run_pstrain(group, url, {"export", id, "-o", onnx});
  CHECK(exported.code == 0);
  CHECK(exported.output.find("ONNX") != std::string::npos);
  const auto rest_onnx = testing::http_test::get(cluster.http_port(), "/v1/models/" + id + "/file?format=onnx");
  REQUIRE(rest_onnx.status == 200);
  CHECK(file_text(onnx) == rest_onnx.body);
  const Run step = run_pstrain(group, url, {"export", id, "--step", "latest", "-o", dir.path() + "/step.onnx"});
  CHECK(step.code == 0);
  // The same graph and tensors; its metadata says the step too.
  const size_t step_bytes = file_text(dir.path() + "/step.onnx").size();
  CHECK(step_bytes > rest_onnx.body.size());
  CHECK(step_bytes < rest_onnx.body.size() + 64);

  // predict: the REST API's answer for the same raw pixels, sent as bytes (a uint8 .npy) or as
  // numbers (a float32 .npy of the values 0-255); scaled values only with --scaled.
  {
    constexpr size_t kN = 3;
    std::vector<uint8_t> pixels(kN * 784);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + i / 784) % 256);
    std::vector<float> raw(pixels.begin(), pixels.end()), scaled(pixels.size());
    for (size_t i = 0; i < pixels.size(); ++i) scaled[i] = static_cast<float>(pixels[i]) / 255.0f;
    write_npy(dir.path() + "/u8.npy", "|u1", kN, pixels.data(), pixels.size());
    write_npy(dir.path() + "/raw.npy", "<f4", kN, raw.data(), raw.size() * 4);
    write_npy(dir.path() + "/scaled.npy", "<f4", kN, scaled.data(), scaled.size() * 4);
    json::array numbers;
    for (size_t n = 0; n < kN; ++n) numbers.push_back(json::array(pixels.begin() + static_cast<ptrdiff_t>(n * 784),
                                                                  pixels.begin() + static_cast<ptrdiff_t>((n + 1) * 784)));
    const auto rest = testing::http_test::post_json(cluster.http_port(), "/v1/models/" + id + ":predict",
                                                    json::serialize(json::object{{"instances", numbers}}));
    REQUIRE(rest.status == 200);
    const std::string want = json::serialize(json::parse(rest.body).at("predictions"));
    for (const std::string file : {"u8.npy", "raw.npy"}) {
      const Run p = run_pstrain(group, url, {"predict", id, dir.path() + "/" + file, "--json"});
      CHECK(p.code == 0);
      boost::system::error_code ec;
      const json::value v = json::parse(p.output, ec);
      REQUIRE_MESSAGE(!ec, p.output);
      CHECK(json::serialize(v.at("predictions")) == want);
    }
    const Run refused = run_pstrain(group, url, {"predict", id, dir.path() + "/scaled.npy"});
    CHECK(refused.code == 1);
    CHECK(refused.output.find("/instances/0: value 1: the value 0.145098") != std::string::npos);
    CHECK(refused.output.find("\"input_form\": \"scaled\"") != std::string::npos);
    const Run table = run_pstrain(group, url, {"predict", id, dir.path() + "/scaled.npy", "--scaled"});
    CHECK(table.code == 0);
    CHECK(std::regex_search(table.output, std::regex("INSTANCE +CLASS +PROBABILITY\n0 +[0-9] +0\\.[0-9]{4}\n1 +[0-9] ")));
  }

  // --json: each command prints one parsable document, the API's own.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--json", "list"}, {"--json", "status", id}, {"cluster", "--json"}}) {
    const Run r = run_pstrain(group, url, args);
    CHECK(r.code == 0);
    boost::system::error_code ec;
    const json::value v = json::parse(r.output, ec);
    CHECK_MESSAGE(!ec, "not JSON: " << r.output);
    CHECK(v.is_object());
  }
  // follow --json: one JSON object per line, the last the final state.
  const Run events = run_pstrain(group, url, {"--json", "follow", id});
  CHECK(events.code == 0);
  std::istringstream lines(events.output);
  std::string line, last_type, last_state;
  int epochs = 0, parsed = 0;
  while (std::getline(lines, line)) {
    boost::system::error_code ec;
    const json::value v = json::parse(line, ec);
    REQUIRE_MESSAGE(!ec, "not a JSON line: " << line);
    ++parsed;
    last_type = std::string(v.at("event").as_string());
    if (last_type == "epoch") ++epochs;
    if (last_type == "state") last_state = std::string(v.at("data").at("state").as_string());
  }
  CHECK(parsed >= 4);
  CHECK(epochs == 3);
  CHECK(last_type == "state");
  CHECK(last_state == "SUCCEEDED");
  // submit --json: the API's 201 body.
  const Run submitted = run_pstrain(group, url, {"submit", "--json", spec});
  CHECK(submitted.code == 0);
  boost::system::error_code ec;
  const json::value job = json::parse(submitted.output, ec);
  REQUIRE(!ec);
  CHECK(job.at("id").as_string() != json::string(id));
}

TEST_CASE("pstrain: a cancelled job exits 3, a failed one 1, and API errors 1 with their detail") {
  testing::TempDir dir;
  testing::Cluster cluster({.servers = 1, .workers = 1});
  testing::ProcessGroup& group = cluster.group();
  const std::string url = url_of(cluster);

  // A long job, cancelled while followed.
  const std::string long_spec = testing::write_spec(dir.path(), "long.json", small_job(200, 256));
  const Run submitted = run_pstrain(group, url, {"submit", long_spec});
  REQUIRE(submitted.code == 0);
  const std::string id = submitted.output.substr(0, submitted.output.find('\n'));
  REQUIRE(id.starts_with("job-"));
  testing::Process& follower =
      group.start("follower", {testing::binary("cli/pstrain"), "--url", url, "follow", id});
  testing::http_test::wait_for_state(cluster, id, "RUNNING");
  const Run cancel = run_pstrain(group, url, {"cancel", id});
  CHECK(cancel.code == 0);
  CHECK(cancel.output.find("CANCELLED") != std::string::npos);
  const auto follow_code = follower.wait_exit(30s);
  INFO("follow: " << follower.log_text());
  CHECK(follow_code == std::optional<int>(3));
  CHECK(follower.log_text().find("job " + id + " CANCELLED") != std::string::npos);
  // Following a job already cancelled exits 3 as well; cancelling it again is an API error (409).
  CHECK(run_pstrain(group, url, {"follow", id}).code == 3);
  const Run again = run_pstrain(group, url, {"cancel", id});
  CHECK(again.code == 1);
  CHECK(again.output.find("HTTP 409") != std::string::npos);
  CHECK(again.output.find("cannot be cancelled") != std::string::npos);

  // A job whose loss diverges ends FAILED: submit --follow exits 1 and prints the reason.
  JobSpec diverging = testing::mlp_job(32, 16, 2);
  diverging.training.servers = 1;
  diverging.training.workers = 1;
  diverging.optimizer = OptimizerSpec{};
  diverging.optimizer.type = OptimizerType::kSgd;
  diverging.optimizer.learning_rate = 1000.0f;
  const std::string failing = testing::write_spec(dir.path(), "failing.json", job_spec_to_json(diverging));
  const Run failed = run_pstrain(group, url, {"submit", failing, "--follow"});
  CHECK(failed.code == 1);
  CHECK(std::regex_search(failed.output, std::regex("job job-[0-9]+ FAILED: .*loss became")));

  // An invalid spec: 422, the message names the field; exit 1.
  const std::string invalid = testing::write_spec(dir.path(), "invalid.json", R"({"name": "x"})");
  const Run refused = run_pstrain(group, url, {"submit", invalid});
  CHECK(refused.code == 1);
  CHECK(refused.output.find("HTTP 422") != std::string::npos);
  CHECK(refused.output.find("(field /dataset)") != std::string::npos);
  // An unknown job: 404 for status, follow, cancel and download; no file is left behind.
  for (const std::string& command : {"status", "follow", "cancel", "download"}) {
    const Run r = run_pstrain(group, url, {command, "job-999"});
    CHECK_MESSAGE(r.code == 1, command);
    CHECK_MESSAGE(r.output.find("there is no job 'job-999'") != std::string::npos, command);
  }
  CHECK(!std::ifstream("job-999.safetensors").good());
  // A model not ready: the cancelled job has none (409).
  const Run no_model = run_pstrain(group, url, {"download", id, "-o", dir.path() + "/none.safetensors"});
  CHECK(no_model.code == 1);
  CHECK(no_model.output.find("HTTP 409") != std::string::npos);
  CHECK(!std::ifstream(dir.path() + "/none.safetensors").good());
  CHECK(!std::ifstream(dir.path() + "/none.safetensors.part").good());
}

TEST_CASE("pstrain: usage errors exit 2 and an unreachable coordinator exits 4 at once, naming the URL") {
  testing::ProcessGroup group;
  const std::string nowhere = "http://127.0.0.1:" + std::to_string(testing::free_port());
  const std::vector<std::vector<std::string>> usage = {
      {},                       {"bogus"},           {"status"},          {"status", "a", "b"},
      {"list", "--no-such"},    {"follow"},          {"cancel"},          {"download"},
      {"submit"},               {"submit", "/no/such/spec.json"},         {"list", "--follow"},
      {"--url", "ftp://x", "list"}, {"--url"},       {"status", "job-1", "-o", "x"}, {"--timeout", "0", "list"},
      {"export"},               {"status", "job-1", "--step", "3"}};
  for (const auto& args : usage) {
    const Run r = run_pstrain(group, nowhere, args);
    std::string line;
    for (const auto& a : args) line += a + " ";
    CHECK_MESSAGE(r.code == 2, "pstrain " << line << "-> " << r.output);
    CHECK_MESSAGE(r.output.find("pstrain: ") != std::string::npos, line);
  }
  // Help: exit 0, the commands and the exit codes; a command's own help.
  const Run help = run_pstrain(group, nowhere, {"--help"});
  CHECK(help.code == 0);
  for (const char* word : {"submit", "list", "status", "follow", "cancel", "download", "export", "cluster", "PSTRAIN_URL"}) {
    CHECK_MESSAGE(help.output.find(word) != std::string::npos, word);
  }
  const Run follow_help = run_pstrain(group, nowhere, {"follow", "--help"});
  CHECK(follow_help.code == 0);
  CHECK(follow_help.output.find("Usage: pstrain follow ID") != std::string::npos);

  // Nothing listens: exit 4 within a second, for every command, with the URL in the message.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"list"}, {"status", "job-1"}, {"follow", "job-1"}, {"cancel", "job-1"}, {"cluster"}, {"download", "job-1"}}) {
    const auto start = std::chrono::steady_clock::now();
    const Run r = run_pstrain(group, nowhere, args, 10s);
    CHECK_MESSAGE(r.code == 4, args[0] << ": " << r.output);
    CHECK(r.output.find("cannot reach the coordinator at " + nowhere) != std::string::npos);
    CHECK(std::chrono::steady_clock::now() - start < 2s);
  }

  // A coordinator that takes the connection but never answers: exit 4 after --timeout.
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(silent >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(bind(silent, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(silent, 8) == 0);  // connections complete in the backlog; none is ever accepted
  REQUIRE(getsockname(silent, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const std::string mute = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  const auto start = std::chrono::steady_clock::now();
  const Run r = run_pstrain(group, mute, {"--timeout", "1", "list"}, 10s);
  const auto took = std::chrono::steady_clock::now() - start;
  close(silent);
  CHECK(r.code == 4);
  CHECK(r.output.find("cannot reach the coordinator at " + mute + ": reading the answer: timed out") != std::string::npos);
  CHECK(took >= 900ms);
  CHECK(took < 5s);
}

TEST_CASE("pstrain follow on a terminal draws a progress bar redrawn with '\\r'") {
  testing::TempDir dir;
  testing::Cluster cluster({.servers = 1, .workers = 1});
  const std::string spec = testing::write_spec(dir.path(), "job.json", small_job(8, 256));
  const Run r = run_pstrain(cluster.group(), url_of(cluster), {"submit", spec, "--follow"}, 120s, /*tty=*/true);
  CHECK(r.code == 0);
  // A bar: "\r  N/M [===>....]" redrawn in place, then each epoch line on a line of its own.
  CHECK(std::regex_search(r.output, std::regex("\r *[0-9]+/[0-9]+ \\[[=>.]{30}\\]")));
  CHECK(count(r.output, std::regex("Epoch [1-8]/8 - ")) == 8);
  CHECK(r.output.find("SUCCEEDED: final test accuracy") != std::string::npos);
}

TEST_CASE("pstrain follow reads the event stream: every event once across a cut, exit code by final state") {
  testing::ProcessGroup group;
  testing::Process& server =
      group.start("fake-events", {"python3", std::string(PSTRAIN_SOURCE_DIR) + "/tests/cli/fake_event_server.py"});
  const int port = testing::wait_ready(server, 20s);
  const std::string url = "http://127.0.0.1:" + std::to_string(port);

  // job-ok: the first connection is cut after event 9; the client resumes with Last-Event-ID: 9.
  const Run ok = run_pstrain(group, url, {"--json", "follow", "job-ok"}, 30s);
  CHECK(ok.code == 0);
  std::vector<int64_t> ids;
  std::istringstream lines(ok.output);
  for (std::string line; std::getline(lines, line);) {
    boost::system::error_code ec;
    const json::value v = json::parse(line, ec);
    REQUIRE_MESSAGE(!ec, "not a JSON line: " << line);
    ids.push_back(v.at("id").to_number<int64_t>());
  }
  std::vector<int64_t> expected(12);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = static_cast<int64_t>(i) + 1;
  CHECK(ids == expected);  // each event exactly once, in order
  CHECK(server.log_text().find("events job-ok last-event-id=9 authorization=none\n") != std::string::npos);

  // A token goes with every request as a bearer token (PSTRAIN_TOKEN, or --token).
  CHECK(run_pstrain(group, url, {"follow", "job-cancelled"}, 30s, false, {{"PSTRAIN_TOKEN", "s3cret"}}).code == 3);
  CHECK(server.log_text().find("events job-cancelled last-event-id=none authorization=Bearer s3cret\n") !=
        std::string::npos);
  CHECK(run_pstrain(group, url, {"--token", "other", "follow", "job-cancelled"}, 30s).code == 3);
  CHECK(server.log_text().find("authorization=Bearer other\n") != std::string::npos);

  // The same job in human form: three epoch lines (times from the events), the final line.
  const Run human = run_pstrain(group, url, {"follow", "job-ok"}, 30s);
  CHECK(human.code == 0);
  CHECK(count("\n" + human.output, kEpochLine) == 3);
  CHECK(human.output.find("Epoch 2/3 - 1.5s - loss: 0.2500 - accuracy: 0.8200 - test_loss: 0.2000 - "
                          "test_accuracy: 0.8700 - 23,410 samples/s\n") != std::string::npos);
  CHECK(human.output.find("job job-ok SUCCEEDED: final test accuracy 0.8800\n") != std::string::npos);

  // A close-delimited stream that ends CANCELLED: 3; one that ends FAILED: 1; no job: 1.
  const Run cancelled = run_pstrain(group, url, {"follow", "job-cancelled"}, 30s);
  CHECK(cancelled.code == 3);
  CHECK(cancelled.output.find("job job-cancelled CANCELLED: cancelled by request") != std::string::npos);
  const Run failed = run_pstrain(group, url, {"follow", "job-failed"}, 30s);
  CHECK(failed.code == 1);
  CHECK(failed.output.find("recovery 1: worker-1 lost; replayed 3 steps") != std::string::npos);
  CHECK(failed.output.find("job job-failed FAILED: loss became nan") != std::string::npos);
  CHECK(run_pstrain(group, url, {"follow", "job-none"}, 30s).code == 1);

  // On a terminal: the bar from the progress events.
  const Run tty = run_pstrain(group, url, {"follow", "job-ok"}, 30s, /*tty=*/true);
  CHECK(tty.code == 0);
  CHECK(tty.output.find("\r 5/10 [==============>...............]") != std::string::npos);
}

TEST_CASE("pstrain study: submit --follow prints a line per trial change and the best, then status, list, cancel") {
  testing::TempDir dir;
  testing::Cluster cluster({.servers = 2, .workers = 2});
  const std::string url = url_of(cluster);
  const std::string file = dir.path() + "/study.json";
  {
    std::ofstream out(file);
    out << R"({"name": "cli-study", "spec": )" << small_job(2) << R"(, "algorithm": "asha",
      "asha": {"min_epochs": 1, "max_epochs": 2, "reduction_factor": 2}, "metric": "test_accuracy",
      "max_trials": 4, "max_concurrent_trials": 2, "seed": 9,
      "search_space": {"/optimizer/learning_rate": {"loguniform": [0.001, 0.3]}}})";
  }
  const Run follow = run_pstrain(cluster.group(), url, {"study", "submit", file, "--follow"}, 240s);
  INFO(follow.output);
  CHECK(follow.code == 0);
  // The id, then lines such as "trial 2  PAUSED  epoch 1/1  test_accuracy 0.8123  learning_rate=0.012  (job study-1-t2-r0)".
  CHECK(follow.output.starts_with("study-1\n"));
  CHECK(count(follow.output, std::regex(R"(\ntrial [0-3]  (PENDING|RUNNING|PAUSED|COMPLETED|STOPPED))")) >= 8);
  CHECK(count(follow.output, std::regex(R"(\ntrial [0-3]  COMPLETED  epoch 2/2  test_accuracy 0\.[0-9]{4}  learning_rate=)")) >= 1);
  CHECK(count(follow.output, std::regex(R"(\nstudy study-1 SUCCEEDED; best trial [0-3]: test_accuracy 0\.[0-9]{4} at 2 epochs)")) == 1);
  // No line twice in a row for a trial: a line is printed only when it changes.
  std::set<std::string> lines;
  std::istringstream in(follow.output);
  int repeated = 0;
  for (std::string line; std::getline(in, line);) repeated += !lines.insert(line).second;
  CHECK(repeated == 0);

  const Run status = run_pstrain(cluster.group(), url, {"study", "status", "study-1"});
  CHECK(status.code == 0);
  CHECK(status.output.find("state:      SUCCEEDED") != std::string::npos);
  CHECK(count(status.output, std::regex(R"(\n[0-3] +(COMPLETED|STOPPED) +[12] +0\.[0-9]{4} +learning_rate=)")) == 4);
  const Run list = run_pstrain(cluster.group(), url, {"study", "list"});
  CHECK(list.output.find("cli-study") != std::string::npos);
  // A finished study cannot be cancelled: the API's 409, exit 1.
  const Run cancel = run_pstrain(cluster.group(), url, {"study", "cancel", "study-1"});
  CHECK(cancel.code == 1);
  CHECK(cancel.output.find("cannot be cancelled") != std::string::npos);
  // A bad study: the field named, exit 1.
  std::ofstream(file) << R"({"spec": )" << small_job(1) << R"(, "search_space": {"/optimizer/learning_rate": {"uniform": [1, 0]}}})";
  const Run bad = run_pstrain(cluster.group(), url, {"study", "submit", file});
  CHECK(bad.code == 1);
  CHECK(bad.output.find("/search_space/~1optimizer~1learning_rate/uniform") != std::string::npos);
  const Run usage = run_pstrain(cluster.group(), url, {"study", "frobnicate"});
  CHECK(usage.code == 2);
}
