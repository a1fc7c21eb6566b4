// What the preprocessing tests share: a table parsed from CSV text, its stored values, a spec
// from JSON, the field a width check names, and a split's rows through a fitted preprocessing.
// Thread rules: test helpers, one thread.
#pragma once

#include <boost/json.hpp>

#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "common/base/error.h"
#include "common/data/dataset_formats.h"
#include "common/data/preprocessing.h"

namespace pstrain::testing {

inline ParsedExamples csv(const std::string& text, const CsvOptions& options = {}) {
  std::istringstream in(text);
  return parse_csv(in, "t.csv", options);
}

inline std::span<const float> values(const ParsedExamples& p) {
  return {reinterpret_cast<const float*>(p.bytes.data()), p.bytes.size() / sizeof(float)};
}

inline PreprocessingSpec spec_of(const std::string& text) { return read_preprocessing(boost::json::parse(text)); }

// The field preprocessed_width names for `spec_text` on `table`, or "(accepted)".
inline std::string width_error_path(const std::string& spec_text, const TableSchema& table) {
  try {
    preprocessed_width(spec_of(spec_text), table);
  } catch (const SpecError& e) {
    return e.path();
  }
  return "(accepted)";
}

// The field read_preprocessing names for `spec_text`, or "(accepted)".
inline std::string spec_error_path(const std::string& spec_text) {
  try {
    spec_of(spec_text);
  } catch (const SpecError& e) {
    return e.path();
  }
  return "(accepted)";
}

inline std::vector<float> apply_rows(const FittedPreprocessing& f, const ParsedExamples& p) {
  std::vector<float> out(p.size() * f.width());
  apply_preprocessing(f, *p.table, values(p), p.size(), out.data());
  return out;
}

}  // namespace pstrain::testing
