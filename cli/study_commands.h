// `pstrain study submit|list|status|follow|cancel`: studies over the REST API (/v1/studies,
// docs/STUDIES.md). Blocking; one thread.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "cli/http_client.h"

namespace pstrain::cli {

struct StudyInvocation {
  std::vector<std::string> args;  // the sub-command and its arguments
  bool json = false, follow = false;
  int poll_ms = 1000;  // follow: how often the study is read
};

// Runs one study sub-command; returns the exit code (follow.h's ExitCode: follow exits 0 when
// the study SUCCEEDED, 1 FAILED, 3 CANCELLED). Throws UsageError (cli_support.h).
int run_study(const StudyInvocation& inv, HttpClient& client, std::ostream& out, std::ostream& err);

extern const char* const kStudyHelp;

}  // namespace pstrain::cli
