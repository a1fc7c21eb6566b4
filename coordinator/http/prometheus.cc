// GET /metrics: the coordinator's Prometheus exposition (text format 0.0.4): jobs by state, per-job
// progress and metrics (the unfinished jobs and the last finished ones), divergence warnings,
// nodes alive and stalled, HTTP requests by route and status, auth refusals, event streams.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "common/rpc/cluster_auth.h"
#include "coordinator/http/rest_api.h"
#include "coordinator/study/study_json.h"
#include "coordinator/job/divergence_guard.h"

namespace pstrain {
namespace {

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// A sample's value: integers exactly (steps pass 10^6), the rest with 10 significant digits.
std::string sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char text[40];
  if (v == std::trunc(v) && std::fabs(v) < 9007199254740992.0) {
    std::snprintf(text, sizeof text, "%.0f", v);
  } else {
    std::snprintf(text, sizeof text, "%.10g", v);
  }
  return text;
}

}  // namespace

HttpResponse RestApi::prometheus() const {
  std::ostringstream out;
  const auto jobs = store_.list();
  std::map<std::string, int> by_state;
  for (JobState state : kAllJobStates) by_state[job_state_name(state)] = 0;
  for (const auto& j : jobs) ++by_state[job_state_name(j.state)];
  out << "# HELP pstrain_jobs Jobs by state.\n# TYPE pstrain_jobs gauge\n";
  for (const auto& [state, n] : by_state) out << "pstrain_jobs{state=\"" << state << "\"} " << n << "\n";
  // Per-job series: the unfinished jobs and the last finished ones (newest first).
  std::vector<const JobRecord*> shown, done;
  for (const auto& j : jobs) (is_finished(j.state) ? done : shown).push_back(&j);
  std::sort(done.begin(), done.end(), [](const JobRecord* a, const JobRecord* b) {
    return a->finished_ms != b->finished_ms ? a->finished_ms > b->finished_ms : a->id > b->id;
  });
  if (done.size() > kMetricsFinishedJobs) done.resize(kMetricsFinishedJobs);
  shown.insert(shown.end(), done.begin(), done.end());
  auto per_job = [&](const char* name, const char* help, auto&& value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n";
    for (const JobRecord* j : shown) {
      const std::optional<double> v = value(*j);
      if (v) out << name << "{job=\"" << escape_label(j->id) << "\"} " << sample_value(*v) << "\n";
    }
  };
  using Value = std::optional<double>;
  out << "# HELP pstrain_job_info A job's name, state and mode (value 1), for the unfinished jobs and the "
      << kMetricsFinishedJobs << " that finished last, as every pstrain_job_* series.\n# TYPE pstrain_job_info gauge\n";
  for (const JobRecord* j : shown) {
    out << "pstrain_job_info{job=\"" << escape_label(j->id) << "\",name=\"" << escape_label(j->name) << "\",state=\""
        << job_state_name(j->state) << "\",mode=\"" << escape_label(j->mode) << "\"} 1\n";
  }
  per_job("pstrain_job_steps", "Steps done by a job.", [](const JobRecord& j) -> Value { return j.steps_done; });
  per_job("pstrain_job_progress_ratio", "Steps done over the job's total steps (0 to 1).",
          [](const JobRecord& j) -> Value {
            return j.total_steps > 0 ? std::min(1.0, static_cast<double>(j.steps_done) / j.total_steps) : 0.0;
          });
  per_job("pstrain_job_epoch", "The epoch a job is in (1-based; its last once finished).",
          [](const JobRecord& j) -> Value { return j.current_epoch; });
  per_job("pstrain_job_samples_per_second", "Training throughput of a job.",
          [](const JobRecord& j) -> Value { return j.samples_per_second; });
  per_job("pstrain_job_train_loss", "Latest training loss of a job.", [](const JobRecord& j) { return j.train_loss; });
  per_job("pstrain_job_train_accuracy", "Latest training accuracy of a job.",
          [](const JobRecord& j) { return j.train_accuracy; });
  per_job("pstrain_job_test_loss", "Test loss of a job's last epoch.", [](const JobRecord& j) { return j.test_loss; });
  per_job("pstrain_job_test_accuracy", "Test accuracy of a job's last epoch.",
          [](const JobRecord& j) { return j.test_accuracy; });
  per_job("pstrain_job_recoveries", "Recoveries a job went through.",
          [](const JobRecord& j) -> Value { return j.recoveries; });
  out << "# HELP pstrain_divergence_total Divergence warnings of jobs (a loss that became NaN or infinite, stayed "
         "above its start for an epoch, or a test accuracy at chance), by reason, since the coordinator started.\n"
         "# TYPE pstrain_divergence_total counter\n";
  {
    const WarningCounts counts = store_.warning_counts();
    for (DivergenceReason reason : kDivergenceReasons) {
      const auto it = counts.by_reason.find(divergence_reason_name(reason));
      out << "pstrain_divergence_total{reason=\"" << divergence_reason_name(reason) << "\"} "
          << (it == counts.by_reason.end() ? 0 : it->second) << "\n";
    }
  }
  if (studies_ != nullptr) {
    // Studies by state; the running studies' trials by state, and each one's best figure.
    const auto studies = studies_->list();
    std::map<std::string, int> study_states;
    for (auto s : {StudyState::kRunning, StudyState::kSucceeded, StudyState::kFailed, StudyState::kCancelled}) {
      study_states[study_state_name(s)] = 0;
    }
    for (const auto& s : studies) ++study_states[study_state_name(s.state)];
    out << "# HELP pstrain_studies Studies by state.\n# TYPE pstrain_studies gauge\n";
    for (const auto& [state, n] : study_states) out << "pstrain_studies{state=\"" << state << "\"} " << n << "\n";
    out << "# HELP pstrain_study_trials The running studies' trials by state.\n# TYPE pstrain_study_trials gauge\n";
    for (const auto& s : studies) {
      if (s.finished()) continue;
      std::map<std::string, int> trial_states;
      for (const auto& t : s.trials) ++trial_states[trial_state_name(t.state)];
      for (const auto& [state, n] : trial_states) {
        out << "pstrain_study_trials{study=\"" << s.id << "\",state=\"" << state << "\"} " << n << "\n";
      }
    }
    out << "# HELP pstrain_study_best_metric The running studies' best trial's figure (their metric).\n"
           "# TYPE pstrain_study_best_metric gauge\n";
    for (const auto& s : studies) {
      const auto best = best_trial(s);
      if (s.finished() || !best) continue;
      out << "pstrain_study_best_metric{study=\"" << s.id << "\",metric=\"" << s.spec.metric << "\"} "
          << *s.trials[*best].rungs.back().metric << "\n";
    }
  }
  out << "# HELP pstrain_nodes_alive Registered nodes that heartbeat.\n# TYPE pstrain_nodes_alive gauge\n";
  std::map<std::string, int> alive = {{"server", 0}, {"worker", 0}};
  for (const auto& n : store_.nodes()) {
    if (n.alive) ++alive[n.role];
  }
  for (const auto& [role, n] : alive) out << "pstrain_nodes_alive{role=\"" << role << "\"} " << n << "\n";
  out << "# HELP pstrain_nodes_stalled Live nodes in a job whose progress has stopped advancing (see the job's "
         "notes).\n# TYPE pstrain_nodes_stalled gauge\n";
  std::map<std::string, int> stalled = {{"server", 0}, {"worker", 0}};
  for (const auto& n : store_.nodes()) {
    if (n.alive && n.stalled) ++stalled[n.role];
  }
  for (const auto& [role, n] : stalled) out << "pstrain_nodes_stalled{role=\"" << role << "\"} " << n << "\n";
  out << "# HELP pstrain_http_requests_total HTTP requests by route and status.\n"
         "# TYPE pstrain_http_requests_total counter\n";
  for (const auto& [key, n] : counters_.responses()) {
    out << "pstrain_http_requests_total{route=\"" << escape_label(key.first) << "\",status=\"" << key.second << "\"} "
        << n << "\n";
  }
  out << "# HELP pstrain_http_auth_failures_total Requests refused: no token (missing), an unknown one (invalid), "
         "a role too weak (forbidden).\n# TYPE pstrain_http_auth_failures_total counter\n"
      << "pstrain_http_auth_failures_total{reason=\"missing\"} " << counters_.auth_missing.load() << "\n"
      << "pstrain_http_auth_failures_total{reason=\"invalid\"} " << counters_.auth_invalid.load() << "\n"
      << "pstrain_http_auth_failures_total{reason=\"forbidden\"} " << counters_.auth_forbidden.load() << "\n";
  if (rpc_refusals_) {
    out << "# HELP pstrain_rpc_auth_refusals_total Cluster connections to the coordinator refused at their "
           "handshake (no or a wrong cluster secret).\n# TYPE pstrain_rpc_auth_refusals_total counter\n"
        << "pstrain_rpc_auth_refusals_total " << rpc_refusals_->count() << "\n";
  }
  const EventStreamStats& events = store_.event_stats();
  out << "# HELP pstrain_event_streams Open event streams (Server-Sent Events clients).\n"
         "# TYPE pstrain_event_streams gauge\n"
      << "pstrain_event_streams " << events.open.load() << "\n";
  out << "# HELP pstrain_event_streams_dropped_total Event streams closed because the client did not keep up.\n"
         "# TYPE pstrain_event_streams_dropped_total counter\n"
      << "pstrain_event_streams_dropped_total " << events.dropped.load() << "\n";
  out << "# HELP pstrain_events_total Job events recorded by this coordinator process.\n"
         "# TYPE pstrain_events_total counter\n"
      << "pstrain_events_total " << events.events.load() << "\n";
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = out.str();
  return r;
}

}  // namespace pstrain
