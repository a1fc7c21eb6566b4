// `pstrain follow`: watches one job until it ends, from its event stream (GET
// /v1/jobs/{id}/events, Server-Sent Events, docs/sse-contract) or, when the coordinator has no
// such route, by polling GET /v1/jobs/{id} (and /metrics once per epoch). Prints through a
// FollowView, or with --json one JSON object per event line: {"id":N,"event":TYPE,"data":{...}}
// (polling makes the same objects, without "id"). Blocking; one thread.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

#include "cli/http_client.h"

namespace pstrain::cli {

// The CLI's exit codes (docs/CLI.md "Exit codes").
enum ExitCode : int {
  kExitOk = 0,          // the request worked; for follow: the job SUCCEEDED
  kExitFailed = 1,      // the job FAILED, or the API answered an error
  kExitUsage = 2,       // bad command line, or an unreadable spec file
  kExitCancelled = 3,   // the job was CANCELLED
  kExitUnreachable = 4  // the coordinator did not answer (refused, timed out)
};

struct FollowOptions {
  bool json = false;
  bool tty = false;              // draw the progress bar
  bool polling_only = false;     // skip the event stream (PSTRAIN_FOLLOW=poll)
  std::chrono::milliseconds poll_interval{500};
  std::chrono::milliseconds reconnect_for{30000};  // how long a lost stream or failing polls are retried
};

// Follows job `id` until it ends; returns its ExitCode. Throws Unreachable when the coordinator
// stays unreachable for `reconnect_for`.
int follow_job(HttpClient& client, const std::string& id, const FollowOptions& options, std::ostream& out,
               std::ostream& err);

}  // namespace pstrain::cli
