// A study (POST /v1/studies): a job spec as a template, a search space over JSON pointers into it,
// an algorithm (grid, random, ASHA), the epoch metric to optimise and the budget. Parsed strictly
// (errors name the field by its JSON pointer, as a job spec's); the trials' parameters are a pure
// function of the study and the trial's number, so a restarted coordinator samples trial N again
// exactly as before (docs/STUDIES.md).
//
// Thread rules: pure functions and plain values; any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pstrain {

// One dimension of the search space: where it goes in the spec and what it takes.
struct SearchParam {
  enum class Kind { kChoice, kUniform, kLogUniform, kInt };
  std::string pointer;              // RFC 6901, into the job spec
  Kind kind = Kind::kChoice;
  std::vector<std::string> choices;  // kChoice: each value as JSON text
  double lo = 0, hi = 0;             // the others: inclusive bounds (kInt: integers)
};

enum class StudyAlgorithm { kGrid, kRandom, kAsha };

// Asynchronous successive halving (Li et al. 2020): rungs at min_epochs x factor^k epochs, capped
// by max_epochs (always the top rung).
struct AshaSpec {
  int64_t min_epochs = 1, max_epochs = 0, reduction_factor = 3;
  bool grid = false;  // trials take the grid's points (in an order seeded by `seed`), not random draws
};

struct StudySpec {
  std::string name;
  std::string spec_json;  // the template job spec, as submitted (an object)
  std::vector<SearchParam> search_space;  // in the request's order
  StudyAlgorithm algorithm = StudyAlgorithm::kRandom;
  AshaSpec asha;
  std::string metric = "test_loss";  // an epoch figure (kStudyMetrics)
  bool maximize = false;             // mode "max"
  int64_t max_trials = 0;            // grid: the grid's size unless given
  int64_t max_concurrent_trials = 4;
  uint64_t seed = 0;
};

// The epoch figures a study can optimise (EpochMetric's names in GET /v1/jobs/{id}/metrics).
extern const std::vector<std::string> kStudyMetrics;

// Parses and checks a study request. `check_spec(json_text)` must throw a SpecError for an invalid
// job spec: it is called with the template and with the spec at every choice and at both ends of
// every range (each parameter in turn, the others at their first value), and a spec it refuses is
// reported at the parameter's `/search_space/<pointer>`. Throws SpecError (kMalformed: not JSON).
StudySpec parse_study_spec(const std::string& text, const std::function<void(const std::string&)>& check_spec);

// The study as canonical JSON (what GET /v1/studies/{id} shows under "request", and what is stored).
std::string study_spec_to_json(const StudySpec& spec);

// The number of points in the grid (the product of the choices' and the integer ranges' sizes).
int64_t grid_size(const StudySpec& spec);

// Trial `number`'s parameters (0-based), each value as JSON text in search_space order: the grid's
// number-th point (the last parameter varies fastest; ASHA with asha.grid: the grid in a random
// order seeded by `seed`), or a draw seeded by (seed, number, index).
std::vector<std::string> trial_values(const StudySpec& spec, int64_t number);

// The job spec of a trial: the template with each pointer set to its value, `epochs` (> 0) as
// training.epochs, and the name "<study> trial <number>". Throws SpecError naming the pointer if a
// pointer's parent is missing.
std::string trial_job_spec(const StudySpec& spec, const std::vector<std::string>& values, int64_t number,
                           int64_t epochs = 0);

// The ASHA rungs' epochs, ascending: min_epochs x factor^k below max_epochs, then max_epochs.
std::vector<int64_t> asha_rungs(const AshaSpec& asha);

}  // namespace pstrain
