#include "coordinator/study/study_json.h"

#include <boost/json.hpp>

#include "common/base/json_parse.h"
#include "coordinator/study/study_spec.h"

namespace pstrain {
namespace json = boost::json;
namespace {

const char* algorithm_name(StudyAlgorithm a) {
  return a == StudyAlgorithm::kGrid ? "grid" : a == StudyAlgorithm::kRandom ? "random" : "asha";
}

json::object parameters(const StudyRecord& study, const TrialRecord& t) {
  const auto values = trial_values(study.spec, t.number);
  json::object o;
  for (size_t i = 0; i < values.size(); ++i) o[study.spec.search_space[i].pointer] = parse_json(values[i]);
  return o;
}

std::optional<double> latest(const TrialRecord& t) {
  return t.rungs.empty() ? std::nullopt : t.rungs.back().metric;
}

json::object best_object(const StudyRecord& study) {
  const auto best = best_trial(study);
  if (!best) return {};
  const TrialRecord& t = study.trials[*best];
  const std::string& job = t.rungs.back().job;
  // A finished job's model is a model id (predict, evaluate, export, init_from).
  return json::object{{"trial", t.number},  {"job", job},         {"model", job},
                      {"metric", *latest(t)}, {"epochs", t.rungs.back().epochs}, {"parameters", parameters(study, t)}};
}

json::object counts(const StudyRecord& study) {
  json::object o;
  for (const auto& t : study.trials) {
    const char* name = trial_state_name(t.state);
    o[name] = (o.contains(name) ? o[name].as_int64() : 0) + 1;
  }
  return o;
}

}  // namespace

std::optional<size_t> best_trial(const StudyRecord& study) {
  std::optional<size_t> best;
  for (size_t i = 0; i < study.trials.size(); ++i) {
    const auto& t = study.trials[i];
    const auto m = latest(t);
    if (!m) continue;
    if (!best) {
      best = i;
      continue;
    }
    const auto& b = study.trials[*best];
    const int64_t te = t.rungs.back().epochs, be = b.rungs.back().epochs;
    const double bm = *latest(b);
    if (te > be || (te == be && (study.spec.maximize ? *m > bm : *m < bm))) best = i;
  }
  return best;
}

std::string study_view_json(const StudyRecord& study, const JobStore& jobs) {
  json::object o = parse_json(study_to_json(study)).as_object();
  auto& trials = o["trials"].as_array();
  double node_seconds = 0, worker_seconds = 0;
  for (size_t i = 0; i < study.trials.size(); ++i) {
    const TrialRecord& t = study.trials[i];
    auto& v = trials[i].as_object();
    v["parameters"] = parameters(study, t);
    v["job"] = t.rungs.empty() ? json::value(nullptr) : json::value(t.rungs.back().job);
    v["epochs"] = t.rungs.empty() ? 0 : t.rungs.back().epochs;
    const auto m = latest(t);
    v["metric"] = m ? json::value(*m) : json::value(nullptr);
    // The metric after every epoch the trial's jobs recorded (a promoted trial's jobs go on from
    // each other's epochs).
    json::array history;
    for (const auto& rung : t.rungs) {
      const auto job = jobs.get(rung.job);
      if (!job) continue;
      for (const auto& e : job->epoch_history) {
        json::object point{{"epoch", e.epoch}, {"test_loss", e.test_loss}};
        if (e.train_loss) point["train_loss"] = *e.train_loss;
        if (!e.test_mae) point["test_accuracy"] = e.test_accuracy;
        if (e.val_loss) point["val_loss"] = *e.val_loss;
        if (e.val_accuracy) point["val_accuracy"] = *e.val_accuracy;
        history.push_back(std::move(point));
      }
    }
    v["history"] = std::move(history);
    node_seconds += t.node_seconds;
    worker_seconds += t.worker_seconds;
  }
  o["name"] = study.spec.name;
  o["algorithm"] = algorithm_name(study.spec.algorithm);
  o["metric"] = study.spec.metric;
  o["mode"] = study.spec.maximize ? "max" : "min";
  o["trial_counts"] = counts(study);
  o["node_seconds"] = node_seconds;
  o["worker_seconds"] = worker_seconds;
  if (study.spec.algorithm == StudyAlgorithm::kAsha) {
    json::array rungs;
    for (auto e : asha_rungs(study.spec.asha)) rungs.push_back(e);
    o["rungs"] = std::move(rungs);
  }
  const json::object best = best_object(study);
  o["best"] = best.empty() ? json::value(nullptr) : json::value(best);
  return json::serialize(o);
}

std::string study_list_json(const std::vector<StudyRecord>& studies) {
  json::array list;
  for (const auto& s : studies) {
    const json::object best = best_object(s);
    list.push_back(json::object{{"id", s.id},
                                {"name", s.spec.name},
                                {"state", study_state_name(s.state)},
                                {"algorithm", algorithm_name(s.spec.algorithm)},
                                {"metric", s.spec.metric},
                                {"mode", s.spec.maximize ? "max" : "min"},
                                {"max_trials", s.spec.max_trials},
                                {"trials", s.trials.size()},
                                {"trial_counts", counts(s)},
                                {"created_ms", s.created_ms},
                                {"finished_ms", s.finished_ms},
                                {"best", best.empty() ? json::value(nullptr) : json::value(best)}});
  }
  return json::serialize(json::object{{"studies", std::move(list)}});
}

}  // namespace pstrain
