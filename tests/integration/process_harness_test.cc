// Tests of the integration-test process harness itself, with /bin/sh and sleep as children.
#include "process_harness.h"

#include <doctest/doctest.h>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

using namespace std::chrono_literals;
using pstrain::testing::Process;
using pstrain::testing::ProcessGroup;
using pstrain::testing::ProcessGroupOptions;
using Clock = std::chrono::steady_clock;

namespace {

std::vector<std::string> sh(const std::string& script) { return {"/bin/sh", "-c", script}; }

// The message of the std::runtime_error `fn` throws, or "" if it throws none.
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

bool zombie(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] == 'Z';
}

// Grandchildren are reaped by init (or a subreaper), not by the harness: dead means gone, or
// a zombie waiting for that reaper.
bool dies_within(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!gone(pid) && !zombie(pid)) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

ProcessGroupOptions quick_group() {  // keep_logs from PSTRAIN_KEEP_LOGS
  ProcessGroupOptions options;
  options.term_grace = 300ms;
  return options;
}

}  // namespace

TEST_CASE("wait_ready returns the port from the ready line") {
  ProcessGroup group(quick_group());
  Process& p = group.start("x", sh("echo PSTRAIN_READY role=x port=1234; sleep 30"));
  CHECK(pstrain::testing::wait_ready(p, 10s) == 1234);
  CHECK(p.running());
  CHECK(::getpgid(p.pid()) == group.pgid());
  CHECK(contains(p.log_text(), "PSTRAIN_READY role=x port=1234\n"));
}

TEST_CASE("wait_for_line returns the regex groups and passes extra_env") {
  ProcessGroup group(quick_group());
  Process& p = group.start("env", sh("echo value=$PSTRAIN_TEST_VALUE end"),
                           {{"PSTRAIN_TEST_VALUE", "abc42"}});
  const auto groups = p.wait_for_line(std::regex(R"(value=([a-z]+)(\d+))"), 10s);
  REQUIRE(groups.size() == 3);
  CHECK(groups[0] == "value=abc42");
  CHECK(groups[1] == "abc");
  CHECK(groups[2] == "42");
}

TEST_CASE("wait_for_line times out with the log tail in its message") {
  ProcessGroup group(quick_group());
  Process& p =
      group.start("talker", sh("echo first-marker-line; echo second-marker-line; sleep 30"));
  p.wait_for_line("second-marker-line", 10s);  // the output exists before the wait that fails
  const auto t0 = Clock::now();
  const std::string message = error_of([&] { p.wait_for_line("never-printed", 300ms); });
  const auto elapsed = Clock::now() - t0;
  INFO(message);
  CHECK(contains(message, "timed out after 300 ms"));
  CHECK(contains(message, "/never-printed/"));
  CHECK(contains(message, "talker"));
  CHECK(contains(message, "first-marker-line\nsecond-marker-line\n"));
  CHECK(elapsed >= 300ms);
  CHECK(elapsed < 3s);
}

TEST_CASE("wait_for_line throws promptly when the process exits first") {
  ProcessGroup group(quick_group());
  Process& p = group.start("quitter", sh("echo about-to-exit; exit 3"));
  const auto t0 = Clock::now();
  const std::string message = error_of([&] { p.wait_for_line("never-printed", 30s); });
  const auto elapsed = Clock::now() - t0;
  INFO(message);
  CHECK(contains(message, "exited (exit code 3) before printing a line matching /never-printed/"));
  CHECK(contains(message, "about-to-exit"));
  CHECK(elapsed < 5s);
  CHECK(p.wait_exit(0ms) == 3);
}

TEST_CASE("a line printed just before exit still matches") {
  ProcessGroup group(quick_group());
  Process& p = group.start("last-words", sh("printf 'PSTRAIN_READY role=w port=4321'"));
  REQUIRE(p.wait_exit(10s) == 0);
  CHECK(pstrain::testing::wait_ready(p, 1s) == 4321);
}

TEST_CASE("ProcessGroup destructor leaves no process behind") {
  pid_t plain = 0, stubborn = 0, grandchild = 0;
  std::string dir;
  const auto t0 = Clock::now();
  {
    ProcessGroupOptions options = quick_group();
    options.keep_logs = false;
    ProcessGroup group(options);
    dir = group.log_dir();
    plain = group.start("plain", {"sleep", "30"}).pid();
    Process& s = group.start("stubborn", sh("trap '' TERM; sleep 30 & echo bg=$!; wait"));
    stubborn = s.pid();
    grandchild = std::stoi(s.wait_for_line(R"(bg=(\d+))", 10s)[1]);
    CHECK(std::filesystem::exists(dir + "/stubborn.log"));
  }
  const auto elapsed = Clock::now() - t0;
  CHECK(gone(plain));
  CHECK(gone(stubborn));
  CHECK(dies_within(grandchild, 2s));  // ignored SIGTERM: only the group SIGKILL reaches it
  CHECK(elapsed < 300ms + 3s);
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("ProcessGroup destructor cleans up during exception unwinding") {
  pid_t pid = 0;
  const std::string message = error_of([&] {
    ProcessGroup group(quick_group());
    pid = group.start("victim", {"sleep", "30"}).pid();
    throw std::runtime_error("assertion failed in the middle of a test");
  });
  CHECK(message == "assertion failed in the middle of a test");
  REQUIRE(pid > 0);
  CHECK(gone(pid));
}

TEST_CASE("terminate escalates to SIGKILL when the child ignores SIGTERM") {
  ProcessGroup group(quick_group());
  Process& p = group.start("deaf", sh("trap '' TERM; echo trapped; sleep 30"));
  p.wait_for_line("trapped", 10s);  // else SIGTERM may arrive before the trap is set
  const auto t0 = Clock::now();
  const auto status = p.terminate(500ms);
  const auto elapsed = Clock::now() - t0;
  CHECK(status.signal == SIGKILL);
  CHECK(status.code == 128 + SIGKILL);
  CHECK(elapsed >= 500ms);
  CHECK(elapsed < 500ms + 1s);
  CHECK_FALSE(p.running());
  CHECK(gone(p.pid()));
}

TEST_CASE("terminate returns at once for a child that exits on SIGTERM") {
  ProcessGroup group(quick_group());
  Process& p = group.start("polite", {"sleep", "30"});
  const auto t0 = Clock::now();
  const auto status = p.terminate(10s);
  CHECK(Clock::now() - t0 < 2s);
  CHECK(status.signal == SIGTERM);
  CHECK(p.wait_exit(0ms) == 128 + SIGTERM);
  CHECK_FALSE(p.signal(SIGTERM));  // reaped: never signalled again
}

TEST_CASE("a restart under the same name keeps the group and waits for the new output") {
  ProcessGroup group(quick_group());
  Process& first = group.start("srv", sh("echo PSTRAIN_READY role=srv port=1111; sleep 30"));
  REQUIRE(pstrain::testing::wait_ready(first, 10s) == 1111);
  CHECK(first.kill_hard().signal == SIGKILL);
  const int port = pstrain::testing::free_port();
  Process& second = group.start(
      "srv", sh("sleep 0.2; echo PSTRAIN_READY role=srv port=$PSTRAIN_PORT; sleep 30"),
      {{"PSTRAIN_PORT", std::to_string(port)}});
  CHECK(pstrain::testing::wait_ready(second, 10s) == port);  // not 1111 from the first run
  CHECK(::getpgid(second.pid()) == group.pgid());  // the anchor kept the emptied group alive
  CHECK(contains(second.log_text(), "port=1111"));
  const std::string dump = group.dump_logs(5);
  INFO(dump);
  CHECK(contains(dump, "=== srv (pid " + std::to_string(second.pid()) + ", running)"));
  CHECK_FALSE(contains(dump, "(pid " + std::to_string(first.pid())));
}

TEST_CASE("a standalone Process kills its own group when destroyed") {
  ProcessGroup logs(quick_group());  // only for its log directory
  pid_t grandchild = 0;
  {
    Process p("alone", sh("sleep 30 & echo bg=$!; wait"), {}, logs.log_dir());
    CHECK(::getpgid(p.pid()) == p.pid());
    grandchild = std::stoi(p.wait_for_line(R"(bg=(\d+))", 10s)[1]);
  }
  CHECK(dies_within(grandchild, 2s));
}

TEST_CASE("free_port returns a port that can be bound") {
  const int port = pstrain::testing::free_port();
  REQUIRE(port > 0);
  REQUIRE(port <= 65535);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  ::close(fd);
}

TEST_CASE("start reports an executable that cannot be run") {
  ProcessGroup group(quick_group());
  const std::string message = error_of([&] { group.start("nope", {"/nonexistent/pstrain-bin"}); });
  INFO(message);
  CHECK(contains(message, "cannot start 'nope'"));
  CHECK(contains(message, "execve"));
  CHECK(contains(message, "No such file or directory"));
}

TEST_CASE("free_ports never names a port twice in a process, within a call or across calls") {
  // The kernel may give a just-closed port out again: a cluster test once got one port for its
  // coordinator's RPC and HTTP, and the coordinator failed to start. 600 picks out of the ~28,000
  // ephemeral ports repeat one with near certainty when nothing prevents it.
  std::set<int> seen;
  size_t picks = 0;
  for (int i = 0; i < 200; ++i) {
    for (const int port : pstrain::testing::free_ports(2)) {
      CHECK(seen.insert(port).second);
      ++picks;
    }
    CHECK(seen.insert(pstrain::testing::free_port()).second);
    ++picks;
  }
  CHECK(seen.size() == picks);
  CHECK(pstrain::testing::free_ports(0).empty());
}
