#include "worker/session_reports.h"

#include <algorithm>

#include "common/base/log.h"

namespace pstrain {

SessionReports::ProgressRequest SessionReports::progress_request(proto::Progress::Kind kind,
                                                                 const ReportFigures& figures) {
  auto request = facts_.coordinator.reportProgressRequest();
  request.setNodeId(facts_.node_id);
  auto r = request.initReport();
  r.setJobId(facts_.job_id);
  r.setKind(kind);
  r.setEpoch(figures.epoch);
  r.setStep(figures.steps_done);
  r.setExamples(figures.examples);
  r.setLossSum(figures.loss_sum);
  r.setCorrect(figures.correct);
  r.setSamplesPerSecond(figures.samples_per_second);
  return request;
}

bool SessionReports::report(kj::WaitScope& wait_scope, proto::Progress::Kind kind, const ReportFigures& figures) {
  auto request = progress_request(kind, figures);
  return waits_.wait(wait_scope, request.send().then([](auto&& r) { return r.getKeepGoing(); }));
}

void SessionReports::report_steps(const ReportFigures& figures, const ExchangeCounts& counts) {
  auto request = progress_request(proto::Progress::Kind::STEPS, figures);
  // Bytes on the wire per step since the last report (takeover pushes included).
  const double steps = static_cast<double>(std::max<uint64_t>(1, figures.steps_done - reported_steps_));
  request.getReport().setBytesPushedPerStep(static_cast<double>(counts.pushed_bytes - reported_pushed_) / steps);
  request.getReport().setBytesPulledPerStep(static_cast<double>(counts.pulled_bytes - reported_pulled_) / steps);
  reported_pushed_ = counts.pushed_bytes;
  reported_pulled_ = counts.pulled_bytes;
  reported_steps_ = figures.steps_done;
  // Not waited for: training does not stop for the coordinator. A "stop" answer (the job was
  // cancelled or failed) ends the session at the next step; no answer (the coordinator is gone)
  // changes nothing, and the session goes on as long as it has data.
  in_flight_.add(request.send().then(
      [this](auto&& reply) { coordinator_says_stop_ = coordinator_says_stop_ || !reply.getKeepGoing(); },
      [this](kj::Exception&& e) {
        PSLOG(kDebug) << "job " << facts_.job_id << ": progress report lost: " << e.getDescription().cStr();
      }));
}

void SessionReports::report_evaluation(kj::WaitScope& wait_scope, proto::Split split, const ReportFigures& figures,
                                       const nn::LossResult& sums) {
  const auto kind = split == proto::Split::TEST ? proto::Progress::Kind::EVALUATION : proto::Progress::Kind::VALIDATION;
  auto request = progress_request(kind, figures);
  const SessionSpec& spec = facts_.spec;
  if (is_regression(spec.loss)) {
    auto r = request.getReport().initRegression();
    r.setValues(sums.regression.values);
    r.setAbsError(sums.regression.abs_error);
    r.setSquaredError(sums.regression.squared_error);
    r.setTarget(sums.regression.target);
    r.setTargetSquared(sums.regression.target_squared);
  }
  request.getReport().setTopKCorrect(static_cast<uint64_t>(sums.top_k_correct));
  if (spec.loss.type == LossType::kBinaryCrossEntropy) {
    const nn::BinaryScores& binary = sums.binary;
    auto pos = request.getReport().initAucPositives(static_cast<unsigned>(binary.positives.size()));
    auto neg = request.getReport().initAucNegatives(static_cast<unsigned>(binary.negatives.size()));
    for (unsigned j = 0; j < binary.positives.size(); ++j) {
      pos.set(j, binary.positives[j]);
      neg.set(j, binary.negatives[j]);
    }
  }
  waits_.wait(wait_scope, request.send().then([](auto&& r) { return r.getKeepGoing(); }));
}

}  // namespace pstrain
