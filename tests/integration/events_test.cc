// The event streams (GET /v1/jobs/{id}/events, GET /v1/events) end to end: a real cluster
// (coordinator, servers and workers as processes on loopback), read over real sockets by a small
// Server-Sent Events client, as curl -N or a browser's EventSource would.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/data/job_spec.h"
#include "tests/integration/cluster.h"
#include "tests/integration/http_test_client.h"
#include "tests/test_support.h"

using namespace pstrain;
using namespace std::chrono_literals;
namespace json = boost::json;

namespace {

using namespace pstrain::testing::http_test;

struct SseEvent {
  uint64_t id = 0;
  std::string type, data, raw;  // raw: the frame as sent
  json::object object() const {
    boost::system::error_code ec;
    json::value v = json::parse(data, ec);
    if (ec || !v.is_object()) {
      FAIL_CHECK("event " << id << " has no JSON object: " << raw);
      return {};
    }
    return std::move(v.as_object());
  }
};

// A Server-Sent Events client on a raw socket: sends the request, parses the response's headers,
// then frames ("id:", "event:", "data:", comments) as they arrive. It reads only when asked, so
// a test can also make a client that never reads.
class SseClient {
 public:
  // `last_event_id`: sent as Last-Event-ID when not empty. `receive_buffer` > 0: SO_RCVBUF, set
  // before connecting so the window stays that small.
  SseClient(int port, const std::string& target, const std::string& last_event_id = "", int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
    }
    std::string request = "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n";
    if (!last_event_id.empty()) request += "Last-Event-ID: " + last_event_id + "\r\n";
    request += "\r\n";
    REQUIRE(::send(fd_, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size()));
  }
  ~SseClient() { close(); }
  SseClient(const SseClient&) = delete;
  SseClient& operator=(const SseClient&) = delete;

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads until `done()` holds (true), or the stream closes or `timeout` passes (done() then).
  bool read_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done()) {
      if (closed || fd_ < 0) return done();
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return done();
      pollfd p{fd_, POLLIN, 0};
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready <= 0) continue;
      char buffer[65536];
      const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
      if (n > 0) {
        bytes_.append(buffer, static_cast<size_t>(n));
        parse();
      } else if (n == 0 || errno != EINTR) {
        closed = true;
      }
    }
    return true;
  }
  // Reads until the server closes the stream; false on timeout.
  bool read_to_close(std::chrono::milliseconds timeout) {
    return read_until([this] { return closed; }, timeout);
  }
  bool has_event(const std::string& type, const std::string& text_in_data = "") const {
    for (const SseEvent& e : events) {
      if (e.type == type && e.data.find(text_in_data) != std::string::npos) return true;
    }
    return false;
  }

  unsigned status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                           // the body of a response that is not a stream
  std::vector<SseEvent> events;
  int comments = 0;
  bool closed = false;

 private:
  void parse() {
    if (status == 0) {
      const size_t end = bytes_.find("\r\n\r\n");
      if (end == std::string::npos) return;
      RawConnection::Received received;
      received.bytes = bytes_.substr(0, end + 4);
      const Reply reply = parse_reply(received);
      status = reply.status;
      headers = reply.headers;
      bytes_.erase(0, end + 4);
    }
    if (status != 200) {
      body += bytes_;
      bytes_.clear();
      return;
    }
    for (size_t end; (end = bytes_.find("\n\n")) != std::string::npos;) {
      const std::string frame = bytes_.substr(0, end + 2);
      bytes_.erase(0, end + 2);
      SseEvent e;
      e.raw = frame;
      bool comment_only = true;
      size_t start = 0;
      while (start < end) {
        const size_t nl = frame.find('\n', start);
        const std::string line = frame.substr(start, nl - start);
        start = nl + 1;
        if (line.rfind(":", 0) == 0) continue;
        comment_only = false;
        if (line.rfind("id: ", 0) == 0) e.id = std::stoull(line.substr(4));
        if (line.rfind("event: ", 0) == 0) e.type = line.substr(7);
        if (line.rfind("data: ", 0) == 0) e.data = line.substr(6);
      }
      if (comment_only) {
        ++comments;
      } else {
        events.push_back(std::move(e));
      }
    }
  }

  int fd_ = -1;
  std::string bytes_;
};

// The MLP 784-h1-h2-10 on mnist10k, 2 servers and 2 workers, progress every `every` steps.
std::string job_json(int hidden1, int hidden2, int epochs, int every) {
  JobSpec spec = testing::mlp_job(hidden1, hidden2, epochs);
  spec.training.servers = 2;
  spec.training.workers = 2;
  spec.training.metrics_every_steps = every;
  return job_spec_to_json(spec);
}

// Ids 1, 2, 3, ... with nothing missing or repeated.
void check_numbered_from_one(const std::vector<SseEvent>& events, const std::string& what) {
  for (size_t i = 0; i < events.size(); ++i) {
    INFO(what << ": event #" << i << " " << events[i].raw);
    REQUIRE(events[i].id == i + 1);
  }
}

// Ends with the job's final state event.
void check_ends_with(const std::vector<SseEvent>& events, const std::string& state) {
  REQUIRE(!events.empty());
  INFO("last event: " << events.back().raw);
  CHECK(events.back().type == "state");
  CHECK(str(events.back().object(), "state") == state);
}

std::string raw_of(const std::vector<SseEvent>& events) {
  std::string out;
  for (const SseEvent& e : events) out += e.raw;
  return out;
}

// A series' value in /metrics text (NaN if absent).
double metric(int port, const std::string& series) {
  const Reply r = get(port, "/metrics");
  const size_t at = r.body.find("\n" + series + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(r.body.substr(at + series.size() + 2));
}

// Waits (up to 5 s) for pstrain_event_streams to read `open` (sessions notice a close soon after).
bool gauge_settles(int port, double open) {
  for (int i = 0; i < 50; ++i) {
    if (metric(port, "pstrain_event_streams") == open) return true;
    std::this_thread::sleep_for(100ms);
  }
  INFO("pstrain_event_streams " << metric(port, "pstrain_event_streams"));
  return false;
}

int64_t time_of_state(const std::vector<SseEvent>& events, const std::string& state) {
  for (const SseEvent& e : events) {
    if (e.type == "state" && str(e.object(), "state") == state) return static_cast<int64_t>(num(e.object(), "time_ms"));
  }
  FAIL_CHECK("no state event " << state);
  return 0;
}

}  // namespace

TEST_CASE("Event stream: a mid-run client and a client that reconnects with Last-Event-ID each see every event once "
          "and in order to the final state and /v1/events sees submission and success") {
  testing::Cluster cluster({.coordinator_flags = {"--events-heartbeat-ms", "200"}});
  const int port = cluster.http_port();
  check_problem(get(port, "/v1/jobs/job-999/events"), 404, "the events of an unknown job");

  SseClient global(port, "/v1/events");
  // Idle: only heartbeats (every 200 ms here).
  REQUIRE(global.read_until([&] { return global.comments >= 2; }, 5s));
  CHECK(global.status == 200);
  CHECK(global.headers["content-type"] == "text/event-stream");
  CHECK(global.events.empty());

  const std::string id = submit(cluster, job_json(256, 128, 3, 2));
  SseClient early(port, "/v1/jobs/" + id + "/events");
  REQUIRE(early.read_until([&] { return early.has_event("progress"); }, 60s));
  CHECK(early.status == 200);
  CHECK(early.headers["content-type"] == "text/event-stream");
  CHECK(early.headers["cache-control"] == "no-store");
  CHECK(!early.closed);
  const uint64_t seen = early.events.back().id;
  early.close();  // goes away mid-run

  const json::object status = object_of(get(port, "/v1/jobs/" + id));
  CHECK(str(status, "state") == "RUNNING");  // so the next client joins mid-run
  SseClient mid(port, "/v1/jobs/" + id + "/events");
  SseClient resumed(port, "/v1/jobs/" + id + "/events", std::to_string(seen));
  // Bad resume points.
  SseClient bad_header(port, "/v1/jobs/" + id + "/events", "seven");
  CHECK(bad_header.read_until([&] { return bad_header.body.find("Last-Event-ID") != std::string::npos; }, 10s));
  CHECK(bad_header.status == 400);
  check_problem(get(port, "/v1/jobs/" + id + "/events?after=x"), 400, "a bad ?after", "after");
  check_problem(get(port, "/v1/jobs/" + id + "/events?since=3"), 400, "an unknown parameter", "since");

  REQUIRE(mid.read_to_close(120s));
  REQUIRE(resumed.read_to_close(120s));
  // The mid-run client: the stored history from 1, then live, to SUCCEEDED, then closed.
  check_numbered_from_one(mid.events, "mid-run client");
  check_ends_with(mid.events, "SUCCEEDED");
  // The reconnecting client: what it saw, then from seen + 1 on; together every event once.
  std::vector<SseEvent> joined = early.events;
  joined.insert(joined.end(), resumed.events.begin(), resumed.events.end());
  REQUIRE(!resumed.events.empty());
  CHECK(resumed.events.front().id == seen + 1);
  check_numbered_from_one(joined, "reconnected client");
  CHECK(raw_of(joined) == raw_of(mid.events));

  // What the history holds: the submission, the nodes, progress, epochs, backups, the end.
  const std::vector<SseEvent>& all = mid.events;
  CHECK(str(all.front().object(), "state") == "PENDING");
  CHECK(str(all.front().object(), "job") == id);
  int progress = 0, epochs = 0, joins = 0;
  double total_steps = 0;
  for (const SseEvent& e : all) {
    const json::object o = e.object();
    CHECK(str(o, "job") == id);
    CHECK(num(o, "time_ms") > 1.6e12);
    if (e.type == "progress") {
      ++progress;
      total_steps = num(o, "total_steps");
      CHECK(total_steps > 0);
      CHECK(num(o, "steps_done") <= num(o, "total_steps"));
      CHECK(std::isfinite(num(o, "loss")));
    }
    if (e.type == "epoch") CHECK(num(o, "epoch") == ++epochs);
    if (e.type == "node" && str(o, "change") == "joined") ++joins;
  }
  CHECK(epochs == 3);
  CHECK(joins == 4);
  // Each of the 2 workers reports every 2 of the job's steps (sync: every worker does every step).
  CHECK(progress >= static_cast<int>(total_steps) - 6);
  CHECK(mid.has_event("backup"));
  CHECK(mid.has_event("state", "\"RUNNING\""));

  // A finished job's stream: what is after ?after=N, then closed.
  SseClient tail(port, "/v1/jobs/" + id + "/events?after=" + std::to_string(all.size() - 1));
  REQUIRE(tail.read_to_close(10s));
  REQUIRE(tail.events.size() == 1);
  CHECK(tail.events[0].raw == all.back().raw);
  SseClient none(port, "/v1/jobs/" + id + "/events", std::to_string(all.size()));
  REQUIRE(none.read_to_close(10s));
  CHECK(none.status == 200);
  CHECK(none.events.empty());

  // Every job's state changes, numbered globally; the stream stays open.
  REQUIRE(global.read_until([&] { return global.has_event("state", "\"SUCCEEDED\""); }, 30s));
  check_numbered_from_one(global.events, "/v1/events");
  CHECK(global.events.front().type == "state");
  CHECK(str(global.events.front().object(), "state") == "PENDING");
  CHECK(str(global.events.front().object(), "job") == id);
  CHECK(str(global.events.back().object(), "state") == "SUCCEEDED");
  CHECK(!global.closed);
  SseClient global_resumed(port, "/v1/events", "1");
  REQUIRE(global_resumed.read_until([&] { return global_resumed.events.size() == global.events.size() - 1; }, 10s));
  CHECK(global_resumed.events.front().id == 2);
  CHECK(global_resumed.events.back().raw == global.events.back().raw);

  CHECK(metric(port, "pstrain_events_total") == static_cast<double>(all.size()));
  CHECK(gauge_settles(port, 2));  // global and global_resumed; the rest closed
  CHECK(metric(port, "pstrain_event_streams_dropped_total") == 0);
}

TEST_CASE("Event stream: a client that never reads is dropped while the job keeps its speed and other clients get "
          "every event") {
  // Small bounds, so the stalled client overflows quickly: 8 queued events, a 4 KiB send buffer.
  testing::Cluster cluster({.coordinator_flags = {"--events-queue", "8", "--events-send-buffer", "4096"}});
  const int port = cluster.http_port();
  const std::string spec = job_json(256, 128, 2, 1);

  // Without a stalled client.
  const std::string first = submit(cluster, spec);
  SseClient first_reader(port, "/v1/jobs/" + first + "/events");
  REQUIRE(first_reader.read_to_close(120s));
  check_ends_with(first_reader.events, "SUCCEEDED");
  const int64_t baseline = time_of_state(first_reader.events, "SUCCEEDED") - time_of_state(first_reader.events, "RUNNING");

  // With one: it connects at once and never reads (a 2 KiB receive window).
  const std::string second = submit(cluster, spec);
  SseClient stalled(port, "/v1/jobs/" + second + "/events", "", 2048);
  SseClient reader(port, "/v1/jobs/" + second + "/events");
  REQUIRE(reader.read_to_close(120s));
  check_numbered_from_one(reader.events, "the reading client");
  check_ends_with(reader.events, "SUCCEEDED");
  const int64_t with_stalled = time_of_state(reader.events, "SUCCEEDED") - time_of_state(reader.events, "RUNNING");
  INFO("job duration without a stalled client " << baseline << " ms, with one " << with_stalled << " ms");
  CHECK(with_stalled < 3 * baseline + 2000);
  CHECK(reader.events.size() > 100);
  CHECK(reader.events.size() + 3 >= first_reader.events.size());  // (the same job, give or take a note)

  CHECK(metric(port, "pstrain_event_streams_dropped_total") == 1);
  // The stalled client was cut off: what it reads now ends before the end of the job.
  REQUIRE(stalled.read_to_close(10s));
  CHECK(stalled.status == 200);
  CHECK(stalled.events.size() < reader.events.size());
  CHECK(!stalled.has_event("state", "\"SUCCEEDED\""));
  for (size_t i = 0; i < stalled.events.size(); ++i) CHECK(stalled.events[i].raw == reader.events[i].raw);
  // Every stream is closed now: gone from the gauge.
  CHECK(gauge_settles(port, 0));
}

TEST_CASE("Event stream: events survive a hard coordinator restart and their numbering goes on") {
  testing::Cluster cluster({});
  const int port = cluster.http_port();
  const std::string id = submit(cluster, job_json(256, 128, 3, 2));
  SseClient before(port, "/v1/jobs/" + id + "/events");
  REQUIRE(before.read_until([&] { return before.has_event("epoch"); }, 60s));
  before.close();
  SseClient global_before(port, "/v1/events");
  REQUIRE(global_before.read_until([&] { return global_before.events.size() >= 2; }, 10s));  // PENDING, RUNNING
  global_before.close();

  cluster.restart_coordinator(/*hard=*/true);

  SseClient after(port, "/v1/jobs/" + id + "/events", std::to_string(before.events.back().id));
  REQUIRE(after.read_to_close(120s));
  std::vector<SseEvent> joined = before.events;
  joined.insert(joined.end(), after.events.begin(), after.events.end());
  check_numbered_from_one(joined, "across the restart");
  check_ends_with(joined, "SUCCEEDED");
  CHECK(after.has_event("note", "re-queued after a coordinator restart"));
  // The nodes of the coordinator before, then this one's, which the job takes up again.
  CHECK(after.has_event("node", R"("change":"lost")"));
  CHECK(after.has_event("node", R"("role":"server","name":"server-0","change":"joined")"));
  // The events from before the restart were stored as they were sent.
  SseClient whole(port, "/v1/jobs/" + id + "/events");
  REQUIRE(whole.read_to_close(10s));
  CHECK(raw_of(whole.events) == raw_of(joined));

  // The global sequence goes on from where it was.
  SseClient global(port, "/v1/events", std::to_string(global_before.events.back().id));
  REQUIRE(global.read_until([&] { return global.has_event("state", "\"SUCCEEDED\""); }, 10s));
  CHECK(global.events.front().id == global_before.events.back().id + 1);
  for (size_t i = 1; i < global.events.size(); ++i) CHECK(global.events[i].id == global.events[i - 1].id + 1);
}

TEST_CASE("Event stream: a lost worker is a node event at once, then a recovery with the steps replayed") {
  testing::Cluster cluster({.workers = 3, .coordinator_flags = {"--dead-after-ms", "1500"}});
  const int port = cluster.http_port();
  JobSpec spec = testing::mlp_job(256, 128, 3);
  spec.training.servers = 2;
  spec.training.workers = 3;
  spec.training.metrics_every_steps = 2;
  const std::string id = submit(cluster, job_spec_to_json(spec));
  SseClient client(port, "/v1/jobs/" + id + "/events");
  REQUIRE(client.read_until([&] { return client.has_event("epoch"); }, 60s));
  cluster.workers()[2]->kill_hard();  // mid-run: the others wait for its slices until it is declared dead
  REQUIRE(client.read_to_close(120s));
  check_numbered_from_one(client.events, "with a lost worker");
  check_ends_with(client.events, "SUCCEEDED");
  size_t lost = 0, recovery = 0;
  for (size_t i = 0; i < client.events.size(); ++i) {
    const SseEvent& e = client.events[i];
    if (e.type == "node" && e.data.find(R"("role":"worker")") != std::string::npos &&
        e.data.find(R"("change":"lost")") != std::string::npos) {
      lost = lost == 0 ? i : lost;
    }
    if (e.type == "recovery" && recovery == 0) recovery = i;
  }
  INFO(raw_of(client.events).substr(0, 20000));
  REQUIRE(lost > 0);
  REQUIRE(recovery > lost);  // the loss first, then what was done about it
  const json::object o = client.events[recovery].object();
  CHECK(num(o, "recoveries") == 1);
  CHECK(num(o, "replayed_steps") >= 0);
  CHECK(!str(o, "detail").empty());
}
