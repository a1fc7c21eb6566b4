// A job's state as the outside world sees it (docs/REST.md "Follow a job", the `state` field;
// docs/DESIGN-NOTES.md "One phase" on how it derives from the runner's phase). Stored and passed
// around as the enum; text only at the JSON edge (job_json.cc, the REST API's metrics).
//
// Thread rules: plain values and pure functions; any thread.
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace pstrain {

enum class JobState { kPending, kRunning, kRecovering, kSucceeded, kFailed, kCancelled };

inline constexpr std::array<JobState, 6> kAllJobStates = {JobState::kPending,   JobState::kRunning,
                                                          JobState::kRecovering, JobState::kSucceeded,
                                                          JobState::kFailed,    JobState::kCancelled};

// "PENDING", "RUNNING", ...: the names the REST API and the stored records use.
constexpr const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kPending: return "PENDING";
    case JobState::kRunning: return "RUNNING";
    case JobState::kRecovering: return "RECOVERING";
    case JobState::kSucceeded: return "SUCCEEDED";
    case JobState::kFailed: return "FAILED";
    case JobState::kCancelled: return "CANCELLED";
  }
  return "?";
}

// The state a name stands for; nullopt for any other text.
constexpr std::optional<JobState> parse_job_state(std::string_view name) {
  for (JobState state : kAllJobStates) {
    if (name == job_state_name(state)) return state;
  }
  return std::nullopt;
}

constexpr bool is_finished(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed || state == JobState::kCancelled;
}

}  // namespace pstrain
