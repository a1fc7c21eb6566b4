// Process harness for integration tests: start real binaries, wait for lines in their logs with
// deadlines, and kill everything on every exit path (see STYLE.md, "Testing distributed code
// without flakes"). Standard library and POSIX (Linux) only.
//
// Ownership: a Process owns its child: the destructor SIGKILLs and reaps it if still running.
// A ProcessGroup owns its Processes (references from start() stay valid until the group dies),
// its log directory and one POSIX process group holding all of its children and their
// descendants; its destructor kills that whole process group, including during unwinding.
//
// Threads: not thread-safe. Use from the single test thread, and let that thread outlive the
// children: PR_SET_PDEATHSIG fires when the *thread* that forked exits, not the process.
// Children are reaped only by these classes; do not waitpid() on their pids yourself.
// If the test process itself is killed, PR_SET_PDEATHSIG kills the direct children; their own
// descendants (e.g. what a shell started) are reached only by the group kill of a destructor.
//
// Child output: stdout and stderr are appended to <log_dir>/<name>.log, so C stdio in the child
// is fully buffered. A binary must flush the lines tests wait for (std::endl, fflush).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pstrain::testing {

using Env = std::vector<std::pair<std::string, std::string>>;

// How a child ended. `code` follows the shell: the exit code, or 128 + signal if killed.
struct ExitStatus {
  int code = 0;
  int signal = 0;  // 0 if the child exited normally
  std::string describe() const;  // "exit code 3" or "killed by signal 9 (Killed)"
};

class Process {
 public:
  // Starts `argv` (argv[0] looked up in PATH if it has no '/') with the inherited environment
  // plus `extra_env` (overriding), stdin from /dev/null, output appended to <log_dir>/<name>.log.
  // `process_group` 0 makes the child the leader of a new process group; otherwise it joins that
  // (existing) group. Throws std::runtime_error if the log cannot be opened or exec fails.
  Process(std::string name, std::vector<std::string> argv, Env extra_env, std::string log_dir,
          pid_t process_group = 0);
  ~Process();  // kill_hard() if still running (and its whole group if it leads one)
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }
  pid_t pid() const { return pid_; }  // stays readable after exit; never signalled once reaped

  bool running();                                   // non-blocking; reaps the child if it exited
  bool signal(int sig);                             // false if the child was already reaped
  ExitStatus kill_hard();                           // SIGKILL, then reap (blocking)
  ExitStatus terminate(std::chrono::milliseconds grace);  // SIGTERM, wait `grace`, then SIGKILL
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);  // ExitStatus::code, or none
  std::optional<ExitStatus> exit_status() const { return status_; }  // set once reaped

  // The whole log file: a "[process_harness] start NAME: ARGV" line before each run's output,
  // and after a restart under the same name, the earlier runs too.
  std::string log_text() const;
  std::string log_tail(int n_lines) const;

  // Polls the output written since *this* process started (earlier runs under the same name are
  // skipped) until a complete line matches `re` (std::regex_search). Returns the match groups,
  // [0] the whole match. Output is re-read from the start on every call, so the same pattern
  // matches the same line again. Throws std::runtime_error naming `what` with the last 30 log
  // lines on timeout, or as soon as the process has exited without printing such a line.
  std::vector<std::string> wait_for_line(const std::regex& re, std::chrono::milliseconds timeout,
                                         std::string_view what = "a matching line");
  // Same, with the pattern text itself in the error message.
  std::vector<std::string> wait_for_line(const std::string& pattern,
                                         std::chrono::milliseconds timeout);

 private:
  [[noreturn]] void fail(const std::string& what_happened) const;
  void reap(int wait_status);

  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool leads_group_ = false;
  off_t start_offset_ = 0;  // log size when this run started
  std::optional<ExitStatus> status_;
};

// Waits for `PSTRAIN_READY ... port=N` (what our binaries print once listening); returns N.
int wait_ready(Process& process, std::chrono::milliseconds timeout);

// Ports that were free a moment ago (bound to 127.0.0.1:0, read back, closed): `count` distinct
// ones, none handed out before by this process (the kernel may give a just-closed port out again:
// two picks in a row could name one port twice). Racy: another process may take a port before
// the child binds it. Use them only when a port must be known in advance (e.g. a restart on the
// same port); otherwise let the child bind port 0 and read the port with wait_ready().
// Thread-safe.
std::vector<int> free_ports(int count);
int free_port();  // free_ports(1)

struct ProcessGroupOptions {
  std::chrono::milliseconds term_grace{2000};  // SIGTERM -> SIGKILL delay in the destructor
  bool keep_logs = keep_logs_from_env();       // keep the log directory after destruction
  static bool keep_logs_from_env();            // PSTRAIN_KEEP_LOGS=1
};

class ProcessGroup {
 public:
  // Creates the log directory (/tmp/pstrain-it-XXXXXX) and the process group. The group is held
  // by a tiny idle "anchor" child, so its id stays valid (and cannot be reused by an unrelated
  // group) while this object lives, even when every started process has exited.
  explicit ProcessGroup(ProcessGroupOptions options = {});
  // SIGTERM to the whole group, up to term_grace for the started processes to exit, then SIGKILL
  // to the whole group and reap. Removes the log directory unless keep_logs (then prints it).
  // If an assertion of the test failed while the group lived, prints every process's log tail
  // to stderr first (what ctest --output-on-failure shows of a run that failed once in CI).
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts a process in this group. Reusing a name (a restart) appends to the same log file.
  Process& start(std::string name, std::vector<std::string> argv, Env extra_env = {});

  // For failure messages: per log name, the latest run's status and the last lines of its log.
  std::string dump_logs(int n_lines = 30);
  const std::string& log_dir() const { return log_dir_; }
  pid_t pgid() const { return pgid_; }

 private:
  ProcessGroupOptions options_;
  std::string log_dir_;
  pid_t pgid_ = -1;  // == the anchor's pid
  unsigned failures_at_start_ = 0;  // failed assertions of the test run when the group began
  std::vector<std::unique_ptr<Process>> processes_;
};

}  // namespace pstrain::testing
