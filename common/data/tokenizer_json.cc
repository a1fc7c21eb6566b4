// The tokenizer's spec and fitted form as JSON (tokenizer.h):
//   {"standardize": "lower_and_strip_punctuation" | "lower" | "none", "ngrams": 1..5,
//    "max_tokens": <int>, "output_mode": "int" | "multi_hot" | "count" | "tf_idf",
//    "output_sequence_length": <int, output_mode int only and required there>}
// and the fitted form: {"spec": {...}, "vocabulary": ["token", ...], "idf": [...] (tf_idf)}.
#include <boost/json.hpp>

#include <cmath>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/json_text.h"
#include "common/data/spec_reader.h"
#include "common/data/tokenizer.h"

namespace pstrain {
using namespace spec_json;

namespace {

constexpr std::pair<const char*, Standardize> kStandardize[] = {{"lower_and_strip_punctuation", Standardize::kLowerAndStripPunctuation},
                                                                {"lower", Standardize::kLower},
                                                                {"none", Standardize::kNone}};
constexpr std::pair<const char*, TextOutput> kOutputs[] = {
    {"int", TextOutput::kInt}, {"multi_hot", TextOutput::kMultiHot}, {"count", TextOutput::kCount}, {"tf_idf", TextOutput::kTfIdf}};

}  // namespace

TokenizerSpec read_tokenizer_spec(const json::value& v, const std::string& path) {
  ObjectReader r(v, path);
  TokenizerSpec s;
  if (const json::value* x = r.optional("standardize")) {
    s.standardize = read_enum(*x, r.field_path("standardize"), {kStandardize[0], kStandardize[1], kStandardize[2]});
  }
  s.ngrams = static_cast<uint32_t>(r.integer("ngrams", 1, kMaxNgrams, 1));
  if (const json::value* x = r.optional("output_mode")) {
    s.output_mode = read_enum(*x, r.field_path("output_mode"), {kOutputs[0], kOutputs[1], kOutputs[2], kOutputs[3]});
  }
  s.max_tokens = static_cast<uint32_t>(r.integer("max_tokens", s.reserved() + 1, kMaxTokens, s.max_tokens));
  const json::value* length = r.optional("output_sequence_length");
  if (s.output_mode == TextOutput::kInt) {
    if (length == nullptr) throw SpecError(r.field_path("output_sequence_length"), "is required with output_mode \"int\" (1 to 65536)");
    s.output_sequence_length = static_cast<uint32_t>(read_int(*length, r.field_path("output_sequence_length"), 1, kMaxSequenceLength));
  } else if (length != nullptr) {
    throw SpecError(r.field_path("output_sequence_length"), "applies to output_mode \"int\" (the others give max_tokens values)");
  }
  r.finish();
  return s;
}

json::object tokenizer_spec_to_object(const TokenizerSpec& s) {
  json::object o{{"standardize", standardize_name(s.standardize)},
                 {"ngrams", s.ngrams},
                 {"max_tokens", s.max_tokens},
                 {"output_mode", text_output_name(s.output_mode)}};
  if (s.output_mode == TextOutput::kInt) o["output_sequence_length"] = s.output_sequence_length;
  return o;
}

std::string fitted_tokenizer_to_json(const FittedTokenizer& t) {
  json::array vocabulary;
  for (const std::string& token : t.vocabulary) vocabulary.push_back(json::string(token));
  json::object o{{"spec", tokenizer_spec_to_object(t.spec)}, {"vocabulary", std::move(vocabulary)}};
  if (t.spec.output_mode == TextOutput::kTfIdf) {
    json::array idf;
    for (const float w : t.idf) idf.push_back(static_cast<double>(w));  // (a float's double reads back exactly)
    o["idf"] = std::move(idf);
  }
  return to_json_text(o);
}

FittedTokenizer fitted_tokenizer_from_json(const std::string& text) {
  try {
    const json::object root = parse_json(text).as_object();
    TokenizerSpec spec = read_tokenizer_spec(root.at("spec"), "/spec");
    std::vector<std::string> vocabulary;
    for (const json::value& token : root.at("vocabulary").as_array()) vocabulary.emplace_back(token.as_string());
    std::vector<float> idf;
    if (const json::value* weights = root.if_contains("idf")) {
      for (const json::value& w : weights->as_array()) {
        idf.push_back(static_cast<float>(w.to_number<double>()));
        if (!std::isfinite(idf.back()) || idf.back() < 0) throw DataError("tokenizer: an idf weight is not a finite non-negative number");
      }
    }
    return finish_tokenizer(spec, std::move(vocabulary), std::move(idf));
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError(std::string("tokenizer: not a fitted tokenizer: ") + e.what());
  }
}

}  // namespace pstrain
