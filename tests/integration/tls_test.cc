// The REST API over TLS (--tls-cert/--tls-key), end to end: a cluster of processes whose
// coordinator serves HTTPS with a self-signed certificate made by `openssl` in the test's
// directory, driven by curl and by the `pstrain` CLI as a user would; and the edges: no CA, plain
// HTTP on the TLS port, a stalled handshake, bad key files at start-up.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/data/job_spec.h"
#include "common/base/sha256.h"
#include "tests/integration/cluster.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;

namespace {

struct Run {
  int code = -1;
  std::string output;  // stdout and stderr
  std::chrono::milliseconds took{0};
};

// Runs argv in `group` to its end (fails the test after `timeout`).
Run run(testing::ProcessGroup& group, const std::vector<std::string>& argv, std::chrono::seconds timeout = 60s,
        testing::Env env = {}) {
  static int runs = 0;
  const auto start = std::chrono::steady_clock::now();
  testing::Process& p = group.start("run-" + std::to_string(++runs), argv, std::move(env));
  const auto code = p.wait_exit(timeout);
  INFO("output of " << argv[0] << ":\n" << p.log_text());
  REQUIRE_MESSAGE(code.has_value(), argv[0] << " did not exit within " << timeout.count() << " s");
  Run r;
  r.code = *code;
  r.output = p.log_text();
  r.output.erase(0, r.output.find('\n') + 1);  // the harness's "start" line
  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  return r;
}

// A self-signed certificate for 127.0.0.1 and localhost (cert.pem, key.pem in `dir`), and another
// for elsewhere.example only (other-cert.pem, other-key.pem).
void make_certificates(const std::string& dir) {
  testing::ProcessGroup tools;
  for (const auto& [name, san] : {std::pair{"", "IP:127.0.0.1,DNS:localhost"}, std::pair{"other-", "DNS:elsewhere.example"}}) {
    const Run r = run(tools, {"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                              "-nodes", "-days", "2", "-subj", "/CN=pstrain test", "-addext",
                              std::string("subjectAltName=") + san, "-keyout", dir + "/" + name + "key.pem",
                              "-out", dir + "/" + name + "cert.pem"});
    REQUIRE_MESSAGE(r.code == 0, r.output);
  }
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string small_job(int epochs) {
  JobSpec spec = testing::mlp_job(32, 16, epochs);
  spec.training.servers = 1;
  spec.training.workers = 1;
  return job_spec_to_json(spec);
}

// A TCP connection to 127.0.0.1:port that sends `bytes` and then nothing: how long until the
// server closes it (recv gives 0 or an error), up to `limit`.
std::chrono::milliseconds time_to_close(int port, const std::string& bytes, std::chrono::seconds limit) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  if (!bytes.empty()) REQUIRE(::send(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(limit.count());
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto start = std::chrono::steady_clock::now();
  char buf[256];
  ssize_t n;
  do {
    n = ::recv(fd, buf, sizeof buf, 0);
  } while (n > 0);
  const int error = n < 0 ? errno : 0;
  ::close(fd);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  if (error == EAGAIN || error == EWOULDBLOCK) return std::chrono::duration_cast<std::chrono::milliseconds>(limit) + 1ms;
  return took;
}

// A coordinator alone (no nodes) with `flags`; returns its process (not waited for).
testing::Process& start_coordinator(testing::ProcessGroup& group, const std::string& name, const std::string& dir,
                                    std::vector<std::string> flags) {
  std::vector<std::string> argv = {testing::binary("coordinator/pstrain-coordinator"), "--listen", "127.0.0.1:0",
                                   "--http", "127.0.0.1:0", "--state-dir", dir + "/" + name + "-state",
                                   "--data-dir", testing::data_dir(), "--datasets-dir", dir + "/" + name + "-datasets"};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return group.start(name, argv);
}

}  // namespace

TEST_CASE("TLS: curl and the CLI over https with the CA (job and events and model) and no CA fails and plain HTTP is refused at once") {
  testing::TempDir dir;
  make_certificates(dir.path());
  const std::string ca = dir.path() + "/cert.pem";
  // A long read timeout: a plain-HTTP request that hung would show as one.
  testing::Cluster cluster({.servers = 1, .workers = 1,
                            .coordinator_flags = {"--tls-cert", ca, "--tls-key", dir.path() + "/key.pem",
                                                  "--http-read-timeout-s", "30"}});
  testing::ProcessGroup& group = cluster.group();
  const std::string port = std::to_string(cluster.http_port());
  const std::string url = "https://127.0.0.1:" + port;
  cluster.coordinator().wait_for_line("serving HTTPS on 127.0.0.1:" + port, 10s);

  // curl with the CA: healthz, by address and by name; HTTP/1.1 even when curl offers h2.
  Run health = run(group, {"curl", "-sS", "--http2", "--cacert", ca, "-w", "|%{http_version}", url + "/healthz"});
  CHECK(health.code == 0);
  CHECK(health.output == "{\"status\":\"ok\"}|1.1");
  health = run(group, {"curl", "-sS", "--cacert", ca, "https://localhost:" + port + "/healthz"});
  CHECK(health.code == 0);
  CHECK(health.output.find("\"ok\"") != std::string::npos);

  // Without the CA: the certificate does not verify (curl's 60), nothing is served.
  const Run untrusted = run(group, {"curl", "-sS", url + "/healthz"}, 60s, {{"CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"}});
  CHECK(untrusted.code == 60);
  CHECK(untrusted.output.find("\"ok\"") == std::string::npos);

  // Plain HTTP on the TLS port: a 400 in plain HTTP that says so, at once (not after the 30 s
  // read timeout), a log line; and the server keeps serving.
  const Run plain = run(group, {"curl", "-sS", "-m", "20", "-w", "|%{http_code}", "http://127.0.0.1:" + port + "/healthz"});
  CHECK(plain.code == 0);
  CHECK(plain.output.find("https-required") != std::string::npos);
  CHECK(plain.output.ends_with("|400"));
  CHECK(plain.took < 5s);
  cluster.coordinator().wait_for_line("plain HTTP from 127.0.0.1:[0-9]+ on the HTTPS port: refused", 5s);
  health = run(group, {"curl", "-sS", "--cacert", ca, url + "/healthz"});
  CHECK(health.code == 0);
  CHECK(health.output == "{\"status\":\"ok\"}");

  // A job over https; its event stream read by curl from the start until the stream ends.
  const std::string spec = testing::write_spec(dir.path(), "job.json", small_job(2));
  const Run submitted = run(group, {"curl", "-sS", "--cacert", ca, "-H", "Content-Type: application/json", "--data-binary",
                                    "@" + spec, "-w", "|%{http_code}", url + "/v1/jobs"});
  REQUIRE(submitted.code == 0);
  REQUIRE(submitted.output.ends_with("|201"));
  std::smatch m;
  REQUIRE(std::regex_search(submitted.output, m, std::regex("\"id\": *\"(job-[0-9]+)\"")));
  const std::string id = m[1];
  testing::Process& events = group.start("events", {"curl", "-sS", "-N", "--cacert", ca, url + "/v1/jobs/" + id + "/events"});

  // The CLI over https follows it to the end (exit 0: SUCCEEDED), with --cacert.
  const std::string cli = testing::binary("cli/pstrain");
  const Run follow = run(group, {cli, "--url", url, "--cacert", ca, "follow", id}, 120s);
  CHECK_MESSAGE(follow.code == 0, follow.output);
  CHECK(std::regex_search(follow.output, std::regex("Epoch 2/2 - ")));
  CHECK(follow.output.find("job " + id + " SUCCEEDED") != std::string::npos);

  // The event stream ended cleanly (curl exits 0 only on a TLS close_notify), with every epoch
  // and the final state.
  const auto events_code = events.wait_exit(30s);
  const std::string stream = events.log_text();
  INFO("event stream:\n" << stream);
  REQUIRE(events_code.has_value());
  CHECK(*events_code == 0);
  CHECK(std::regex_search(stream, std::regex("event: epoch\ndata: \\{[^\n]*\"epoch\":1")));
  CHECK(std::regex_search(stream, std::regex("event: epoch\ndata: \\{[^\n]*\"epoch\":2")));
  CHECK(std::regex_search(stream, std::regex("event: state\ndata: \\{[^\n]*\"state\":\"SUCCEEDED\"")));

  // status and list over https (PSTRAIN_CACERT from the environment for list).
  const Run status = run(group, {cli, "--url", url, "--cacert", ca, "status", id});
  CHECK(status.code == 0);
  CHECK(status.output.find("SUCCEEDED") != std::string::npos);
  const Run list = run(group, {cli, "list"}, 60s, {{"PSTRAIN_URL", url}, {"PSTRAIN_CACERT", ca}});
  CHECK(list.code == 0);
  CHECK(std::regex_search(list.output, std::regex(id + " +mnist-mlp +SUCCEEDED")));

  // The model, by curl and by the CLI: the same safetensors bytes.
  const std::string by_curl = dir.path() + "/curl.safetensors", by_cli = dir.path() + "/cli.safetensors";
  const Run download = run(group, {"curl", "-sS", "-f", "--cacert", ca, "-o", by_curl, url + "/v1/jobs/" + id + "/model"});
  CHECK(download.code == 0);
  const Run cli_download = run(group, {cli, "--url", url, "--cacert", ca, "download", id, "-o", by_cli});
  CHECK(cli_download.code == 0);
  const std::string model = file_text(by_curl);
  REQUIRE(model.size() > 1000);
  uint64_t header = 0;
  std::memcpy(&header, model.data(), 8);
  CHECK(header < model.size());
  CHECK(model[8] == '{');
  CHECK(file_text(by_cli) == model);

  // The CLI without the CA: unreachable (4), saying what to give; --insecure: served.
  const Run no_ca = run(group, {cli, "--url", url, "list"}, 60s, {{"SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"}});
  CHECK(no_ca.code == 4);
  CHECK(no_ca.output.find("certificate verify failed") != std::string::npos);
  CHECK(no_ca.output.find("--cacert") != std::string::npos);
  const Run insecure = run(group, {cli, "--url", url, "--insecure", "list"});
  CHECK(insecure.code == 0);
  // --cacert that is not a certificate: a usage error (2) naming the flag.
  const Run bad_ca = run(group, {cli, "--url", url, "--cacert", spec, "list"});
  CHECK(bad_ca.code == 2);
  CHECK(bad_ca.output.find("--cacert") != std::string::npos);
}

TEST_CASE("TLS start-up and handshakes: bad key files fail naming the flag and a stalled handshake is cut by the read "
          "timeout") {
  testing::TempDir dir;
  make_certificates(dir.path());
  testing::ProcessGroup group;
  const std::string cert = dir.path() + "/cert.pem", key = dir.path() + "/key.pem";

  struct Bad {
    std::vector<std::string> flags;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {{"--tls-cert", cert, "--tls-key", dir.path() + "/missing.pem"}, "--tls-key: cannot read '" + dir.path() + "/missing.pem'"},
      {{"--tls-cert", dir.path() + "/missing.pem", "--tls-key", key}, "--tls-cert: cannot read"},
      {{"--tls-cert", cert, "--tls-key", dir.path() + "/other-key.pem"}, "--tls-key: '" + dir.path() + "/other-key.pem'"},
      {{"--tls-cert", key, "--tls-key", key}, "--tls-cert: '" + key + "' is not a PEM certificate"},
      {{"--tls-cert", cert}, "--tls-cert is given without --tls-key"},
  };
  int n = 0;
  for (const Bad& b : bad) {
    testing::Process& p = start_coordinator(group, "bad-" + std::to_string(++n), dir.path(), b.flags);
    const auto code = p.wait_exit(20s);
    INFO(p.log_text());
    REQUIRE(code.has_value());
    CHECK(*code != 0);
    CHECK(p.log_text().find(b.message) != std::string::npos);
    CHECK(p.log_text().find("PSTRAIN_READY") == std::string::npos);
  }

  // A coordinator with a 2 s read timeout: a client that starts a handshake and stalls, or sends
  // nothing, is cut after about 2 s; others are served meanwhile and after.
  testing::Process& coordinator =
      start_coordinator(group, "coordinator", dir.path(), {"--tls-cert", cert, "--tls-key", key, "--http-read-timeout-s", "2"});
  testing::wait_ready(coordinator, 20s);
  const int port = std::stoi(coordinator.wait_for_line(std::regex("http_port=([0-9]+)"), 20s, "the HTTP port")[1]);
  // The first 3 bytes of a TLS record header (handshake, TLS 1.0 record version), then silence.
  std::chrono::milliseconds stalled{0};
  std::thread staller([&] { stalled = time_to_close(port, std::string("\x16\x03\x01", 3), 15s); });
  const Run served = run(group, {"curl", "-sS", "--cacert", cert, "https://127.0.0.1:" + std::to_string(port) + "/healthz"});
  CHECK(served.code == 0);
  staller.join();
  CHECK(stalled >= 1500ms);
  CHECK(stalled < 8s);
  const auto silent = time_to_close(port, "", 15s);
  CHECK(silent >= 1500ms);
  CHECK(silent < 8s);
  coordinator.wait_for_line("sent nothing for 2 s", 5s);
  coordinator.wait_for_line("TLS handshake with 127.0.0.1:[0-9]+ failed: not done within 2 s", 5s);
  CHECK(coordinator.running());
  const Run after = run(group, {"curl", "-sS", "--cacert", cert, "https://127.0.0.1:" + std::to_string(port) + "/healthz"});
  CHECK(after.code == 0);
  CHECK(after.output == "{\"status\":\"ok\"}");

  // A dataset upload over TLS streams to its file (several 1 MiB pieces) with the right hash.
  const std::string csv = dir.path() + "/train.csv";
  {
    std::ofstream out(csv);
    out << "label,a,b,c,d\n";
    for (int i = 0; i < 200000; ++i) out << i % 3 << "," << i % 7 << "," << i % 11 << ".5," << i % 13 << "," << i % 17 << "\n";
  }
  const std::string csv_text = file_text(csv);
  REQUIRE(csv_text.size() > 2u << 20);
  Sha256 hash;
  hash.update(csv_text.data(), csv_text.size());
  const Run upload = run(group, {"curl", "-sS", "--cacert", cert, "-H", "Content-Type: text/csv", "-T", csv, "-w", "|%{http_code}",
                                 "https://127.0.0.1:" + std::to_string(port) + "/v1/datasets/tls-upload/train"});
  CHECK(upload.code == 0);
  CHECK_MESSAGE(upload.output.ends_with("|201"), upload.output);
  CHECK_MESSAGE(upload.output.find(hash.hex()) != std::string::npos, upload.output);

  // The CLI checks that the certificate names the URL's host: one for elsewhere.example only is
  // refused at 127.0.0.1 even with its own CA (exit 4), and served with --insecure.
  testing::Process& other = start_coordinator(group, "other", dir.path(),
                                              {"--tls-cert", dir.path() + "/other-cert.pem", "--tls-key", dir.path() + "/other-key.pem"});
  testing::wait_ready(other, 20s);
  const std::string other_url =
      "https://127.0.0.1:" + other.wait_for_line(std::regex("http_port=([0-9]+)"), 20s, "the HTTP port")[1];
  const std::string cli = testing::binary("cli/pstrain");
  const Run wrong_host = run(group, {cli, "--url", other_url, "--cacert", dir.path() + "/other-cert.pem", "list"});
  CHECK(wrong_host.code == 4);
  CHECK(wrong_host.output.find("certificate verify failed") != std::string::npos);
  const Run insecure = run(group, {cli, "--url", other_url, "--insecure", "list"});
  CHECK(insecure.code == 0);
}
