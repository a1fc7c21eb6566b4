#include "process_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <set>
#include <stdexcept>
#include <thread>

namespace pstrain::testing {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr auto kPollInterval = 5ms;

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

// Blocks every signal in this thread while alive. Held around fork(), so that a child never runs
// the test's handlers (doctest reports SIGTERM as a crash, from a copy of the test) before it has
// reset them; a signal sent meanwhile stays pending until then.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &saved_);
  }
  ~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }

 private:
  sigset_t saved_;
};

struct Fd {  // closes on every exit path of the constructor below
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { if (fd >= 0) ::close(fd); }
  int fd;
};

// Done in the parent: execvp() may allocate, which is not allowed between fork and exec.
std::string find_in_path(const std::string& file) {
  if (file.find('/') != std::string::npos) return file;
  const char* env = std::getenv("PATH");
  std::istringstream dirs(env ? env : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + file;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return file;  // execve then fails with ENOENT, reported to the caller
}

std::string tail_lines(const std::string& text, int n) {
  if (n <= 0) return "";
  std::size_t end = text.size();
  if (end > 0 && text[end - 1] == '\n') --end;  // a final newline does not start a line
  std::size_t begin = end;
  for (int lines = 0; begin > 0; --begin)
    if (text[begin - 1] == '\n' && ++lines == n) break;
  return text.substr(begin);
}

std::optional<std::vector<std::string>> match_line(const std::string& line, const std::regex& re) {
  std::smatch m;
  if (!std::regex_search(line, m, re)) return std::nullopt;
  return std::vector<std::string>(m.begin(), m.end());
}

// In the forked child: reports (step, errno) on the close-on-exec pipe; a pipe closed by a
// successful exec reports nothing.
[[noreturn]] void child_failed(int report_fd, int step) {
  const int report[2] = {step, errno};
  (void)!::write(report_fd, report, sizeof report);
  ::_exit(127);
}

// Runs in the forked child: async-signal-safe calls only (another thread of the test may have
// held the malloc lock at fork time).
[[noreturn]] void exec_child(pid_t parent, pid_t pgid, int stdin_fd, int log_fd, int report_fd,
                             const char* path, char* const* argv, char* const* envp) {
  auto die = [report_fd](int step) { child_failed(report_fd, step); };
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die(0);
  if (::getppid() != parent) ::_exit(127);  // the test died before prctl took effect
  if (::setpgid(0, pgid) != 0) die(1);
  // Handlers, ignored signals and the mask (all blocked by SignalsBlocked) survive until exec.
  for (int sig = 1; sig < NSIG; ++sig) ::signal(sig, SIG_DFL);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(stdin_fd, 0) < 0 || ::dup2(log_fd, 1) < 0 || ::dup2(log_fd, 2) < 0) die(2);
  // Don't leak the test's descriptors: an inherited listening socket would keep its port busy.
  ::close_range(3, report_fd - 1, 0);
  ::close_range(report_fd + 1, ~0U, 0);
  ::execve(path, argv, envp);
  child_failed(report_fd, 3);
}

}  // namespace

// Defined by tests/test_main.cc (doctest's failed assertions so far); absent from other mains.
unsigned failed_assertions() __attribute__((weak));

std::string ExitStatus::describe() const {
  if (code < 0) return "exit status unknown";
  if (signal != 0)
    return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit code " + std::to_string(code);
}

Process::Process(std::string name, std::vector<std::string> argv, Env extra_env,
                 std::string log_dir, pid_t process_group)
    : name_(std::move(name)), log_path_(log_dir + "/" + name_ + ".log") {
  if (argv.empty()) throw std::invalid_argument("Process '" + name_ + "': empty argv");
  Fd log{::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)};
  if (log.fd < 0) throw_errno("cannot open " + log_path_);
  std::string banner = "[process_harness] start " + name_ + ":";
  for (const auto& arg : argv) banner += " " + arg;
  banner += "\n";
  struct stat st {};
  if (::write(log.fd, banner.data(), banner.size()) < 0 || ::fstat(log.fd, &st) != 0)
    throw_errno("cannot write " + log_path_);
  start_offset_ = st.st_size;  // wait_for_line() skips earlier runs under the same name

  Fd devnull{::open("/dev/null", O_RDONLY | O_CLOEXEC)};
  int pipe_fds[2];
  if (devnull.fd < 0 || ::pipe2(pipe_fds, O_CLOEXEC) != 0) throw_errno("Process " + name_);
  Fd report_read{pipe_fds[0]}, report_write{pipe_fds[1]};

  // Everything the child needs is built before fork().
  const std::string path = find_in_path(argv[0]);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    auto key = kv.substr(0, kv.find('='));
    auto overridden = [&](const auto& extra) { return extra.first == key; };
    if (std::none_of(extra_env.begin(), extra_env.end(), overridden)) env_strings.emplace_back(kv);
  }
  for (const auto& [key, value] : extra_env) env_strings.push_back(key + "=" + value);
  std::vector<char*> c_argv, c_envp;
  for (auto& a : argv) c_argv.push_back(a.data());
  for (auto& e : env_strings) c_envp.push_back(e.data());
  c_argv.push_back(nullptr);
  c_envp.push_back(nullptr);

  const pid_t parent = ::getpid();
  {
    SignalsBlocked blocked;
    pid_ = ::fork();
    if (pid_ == 0)
      exec_child(parent, process_group, devnull.fd, log.fd, report_write.fd, path.c_str(),
                 c_argv.data(), c_envp.data());
  }
  if (pid_ < 0) throw_errno("fork for " + name_);
  leads_group_ = (process_group == 0);
  ::close(report_write.fd);
  report_write.fd = -1;
  // Blocks until exec succeeded (EOF) or failed: then setpgid has run, and no caller can
  // signal a child that still runs our code.
  int report[2];
  ssize_t n;
  while ((n = ::read(report_read.fd, report, sizeof report)) < 0 && errno == EINTR) {}
  if (n > 0) {
    kill_hard();  // reaps the child, which has exited with 127
    static const char* const kSteps[] = {"prctl", "setpgid", "dup2", "execve"};
    throw std::runtime_error("cannot start '" + name_ + "' (" + path + "): " +
                             kSteps[report[0] & 3] + ": " + std::strerror(report[1]));
  }
}

Process::~Process() {
  if (status_) return;
  if (leads_group_) ::kill(-pid_, SIGKILL);  // valid: the unreaped leader keeps the group id
  kill_hard();
}

void Process::reap(int wait_status) {
  if (WIFSIGNALED(wait_status))
    status_ = ExitStatus{128 + WTERMSIG(wait_status), WTERMSIG(wait_status)};
  else
    status_ = ExitStatus{WEXITSTATUS(wait_status), 0};
}

bool Process::running() {
  if (status_) return false;
  int st = 0;
  const pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == 0 || (r < 0 && errno == EINTR)) return true;
  if (r == pid_) reap(st);
  else status_ = ExitStatus{-1, 0};  // reaped by someone else: never signal that pid again
  return false;
}

bool Process::signal(int sig) {
  // Until we reap it, the pid cannot be reused, so this never hits an unrelated process.
  return running() && ::kill(pid_, sig) == 0;
}

ExitStatus Process::kill_hard() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    int st = 0;
    pid_t r;
    while ((r = ::waitpid(pid_, &st, 0)) < 0 && errno == EINTR) {}
    if (r == pid_) reap(st);
    else status_ = ExitStatus{-1, 0};
  }
  return *status_;
}

ExitStatus Process::terminate(std::chrono::milliseconds grace) {
  if (signal(SIGTERM) && wait_exit(grace)) return *status_;
  return kill_hard();
}

std::optional<int> Process::wait_exit(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (running()) {
    const auto now = Clock::now();
    if (now >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::min<Clock::duration>(kPollInterval, deadline - now));
  }
  return status_->code;
}

std::string Process::log_text() const {
  std::ifstream in(log_path_, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Process::log_tail(int n_lines) const { return tail_lines(log_text(), n_lines); }

void Process::fail(const std::string& what_happened) const {
  std::string tail = log_tail(30);
  if (!tail.empty() && tail.back() != '\n') tail += '\n';
  throw std::runtime_error("process '" + name_ + "' (pid " + std::to_string(pid_) + "): " +
                           what_happened + "\n--- last 30 lines of " + log_path_ + " ---\n" +
                           tail + "--- end of " + name_ + " log ---");
}

std::vector<std::string> Process::wait_for_line(const std::regex& re,
                                                std::chrono::milliseconds timeout,
                                                std::string_view what) {
  const auto deadline = Clock::now() + timeout;
  Fd in{::open(log_path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) throw_errno("cannot read " + log_path_);
  off_t offset = start_offset_;
  std::string pending;  // read but not yet matched: at most one incomplete line
  char buf[8192];
  for (;;) {
    // Checked before reading, so everything the child wrote before exiting is read below.
    const bool exited = !running();
    for (ssize_t n; (n = ::pread(in.fd, buf, sizeof buf, offset)) > 0; offset += n)
      pending.append(buf, static_cast<std::size_t>(n));
    // Complete lines only: a half-written "port=43567" could match as "port=43".
    std::size_t begin = 0;
    for (std::size_t nl; (nl = pending.find('\n', begin)) != std::string::npos; begin = nl + 1)
      if (auto groups = match_line(pending.substr(begin, nl - begin), re)) return *groups;
    pending.erase(0, begin);
    if (exited) {
      if (auto groups = match_line(pending, re)) return *groups;  // last line, no newline
      fail("exited (" + status_->describe() + ") before printing " + std::string(what));
    }
    const auto now = Clock::now();
    if (now >= deadline)
      fail("timed out after " + std::to_string(timeout.count()) + " ms waiting for " +
           std::string(what));
    std::this_thread::sleep_for(std::min<Clock::duration>(kPollInterval, deadline - now));
  }
}

std::vector<std::string> Process::wait_for_line(const std::string& pattern,
                                                std::chrono::milliseconds timeout) {
  return wait_for_line(std::regex(pattern), timeout, "a line matching /" + pattern + "/");
}

int wait_ready(Process& process, std::chrono::milliseconds timeout) {
  static const std::regex kReady(R"(PSTRAIN_READY\b.*\bport=(\d{1,5})\b)");
  const auto groups =
      process.wait_for_line(kReady, timeout, "the line 'PSTRAIN_READY ... port=N'");
  const int port = std::stoi(groups[1]);
  if (port <= 0 || port > 65535)
    throw std::runtime_error("process '" + process.name() + "' reported bad port: " + groups[0]);
  return port;
}

std::vector<int> free_ports(int count) {
  // Ports this process handed out before: the kernel may give a just-closed port out again, and
  // a coordinator told to serve RPC and HTTP on one port fails to start.
  static std::mutex mutex;
  static std::set<int> handed_out;
  const std::lock_guard<std::mutex> lock(mutex);
  std::deque<Fd> held;  // open until every port is picked, so the kernel gives each one once (a deque: Fd never moves)
  std::vector<int> ports;
  while (static_cast<int>(ports.size()) < count) {
    if (held.size() > static_cast<size_t>(count) + 64) throw std::runtime_error("free_ports: no fresh port found");
    Fd& sock = held.emplace_back(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (sock.fd < 0) throw_errno("free_ports: socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;  // the kernel picks a free port
    socklen_t len = sizeof addr;
    if (::bind(sock.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(sock.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      throw_errno("free_ports: bind 127.0.0.1:0");
    const int port = ntohs(addr.sin_port);
    if (handed_out.insert(port).second) ports.push_back(port);
  }
  return ports;
}

int free_port() { return free_ports(1)[0]; }

bool ProcessGroupOptions::keep_logs_from_env() {
  const char* v = std::getenv("PSTRAIN_KEEP_LOGS");
  return v != nullptr && std::string_view(v) == "1";
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(options) {
  char dir[] = "/tmp/pstrain-it-XXXXXX";
  if (::mkdtemp(dir) == nullptr) throw_errno("mkdtemp /tmp/pstrain-it-XXXXXX");
  log_dir_ = dir;
  const pid_t parent = ::getpid();
  {
    SignalsBlocked blocked;  // and the anchor keeps them blocked: only SIGKILL ends it
    pgid_ = ::fork();
    if (pgid_ == 0) {  // the anchor: holds the group id, idle until SIGKILL
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);
      ::setpgid(0, 0);
      ::close_range(3, ~0U, 0);  // hold no socket or pipe of the test
      for (;;) ::pause();
    }
  }
  if (pgid_ < 0) {
    const int err = errno;
    std::filesystem::remove_all(log_dir_);
    errno = err;
    throw_errno("fork for the process group anchor");
  }
  ::setpgid(pgid_, pgid_);  // also here, so the group exists before start() whatever the timing
  if (failed_assertions != nullptr) failures_at_start_ = failed_assertions();
}

ProcessGroup::~ProcessGroup() {
  // One kill() reaches every child and its descendants; the anchor blocks SIGTERM.
  ::kill(-pgid_, SIGTERM);
  const auto deadline = Clock::now() + options_.term_grace;
  for (auto& p : processes_)
    while (p->running() && Clock::now() < deadline) std::this_thread::sleep_for(kPollInterval);
  ::kill(-pgid_, SIGKILL);  // also descendants that ignored SIGTERM or outlived their parent
  for (auto& p : processes_) p->kill_hard();
  if (failed_assertions != nullptr && failed_assertions() > failures_at_start_) {
    std::fprintf(stderr, "process_harness: an assertion failed; the processes' logs:\n%s\n", dump_logs(60).c_str());
  }
  int st;
  while (::waitpid(pgid_, &st, 0) < 0 && errno == EINTR) {}
  processes_.clear();
  if (options_.keep_logs) {
    std::fprintf(stderr, "process_harness: logs kept in %s\n", log_dir_.c_str());
  } else {
    std::error_code ignored;
    std::filesystem::remove_all(log_dir_, ignored);
  }
}

Process& ProcessGroup::start(std::string name, std::vector<std::string> argv, Env extra_env) {
  processes_.push_back(std::make_unique<Process>(std::move(name), std::move(argv),
                                                 std::move(extra_env), log_dir_, pgid_));
  return *processes_.back();
}

std::string ProcessGroup::dump_logs(int n_lines) {
  std::string out;
  for (std::size_t i = 0; i < processes_.size(); ++i) {
    Process& p = *processes_[i];
    // A restart appends to the same file: show each file once, under its latest run.
    if (std::any_of(processes_.begin() + i + 1, processes_.end(),
                    [&](auto& later) { return later->name() == p.name(); }))
      continue;
    out += "=== " + p.name() + " (pid " + std::to_string(p.pid()) + ", " +
           (p.running() ? std::string("running") : p.exit_status()->describe()) + "): last " +
           std::to_string(n_lines) + " lines of " + p.log_path() + " ===\n" + p.log_tail(n_lines);
    if (!out.empty() && out.back() != '\n') out += '\n';
  }
  return out;
}

}  // namespace pstrain::testing
