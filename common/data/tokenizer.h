// Text to model features inside the model (issue 52; Keras' `TextVectorization`), fitted per job by
// a streaming pass over the training documents and kept with the model, so training, `evaluate`,
// `:predict` and exported models turn the same text into the same numbers.
//
//   standardize  `lower_and_strip_punctuation` (ASCII letters lowered, then every character of
//                !"#$%&()*+,-./:;<=>?@[\]^_`{|}~' removed, as Keras' default regex), `lower`, `none`
//   split        on runs of ASCII whitespace (space, \t, \n, \v, \f, \r), empty tokens dropped
//   ngrams       N: the 1-grams, then the 2-grams, ... then the N-grams, each joined by one space
//   vocabulary   the `max_tokens` - reserved most frequent tokens of the training documents
//                (reserved: "" padding and "[UNK]" for `int`; "[UNK]" otherwise), ties broken
//                by the token's bytes, greater first (Keras sorts (count, token) and reverses);
//                counted by TopKeys with max(4 x max_tokens, 65,536) counters (at most 2^20, about
//                100 MB and the tokens' bytes): exact while the
//                documents hold no more distinct tokens
//   output_mode  `int`: each token's index (0 padding, 1 out of vocabulary, then the vocabulary
//                in order), padded with 0 or cut to `output_sequence_length`;
//                `multi_hot` / `count` / `tf_idf`: `max_tokens` values, index 0 for
//                out-of-vocabulary tokens (Keras with pad_to_max_tokens: the width is known at
//                submit); tf_idf multiplies counts by idf = log(1 + documents / (1 + documents
//                holding the token)), the out-of-vocabulary index's idf the mean of the vocabulary's,
//                unused indices 0.
//
// Thread rules: plain values and pure functions; a TokenizerFit belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/data/top_keys.h"

namespace boost::json {
class value;
class object;
}  // namespace boost::json

namespace pstrain {

enum class Standardize { kLowerAndStripPunctuation, kLower, kNone };
enum class TextOutput { kInt, kMultiHot, kCount, kTfIdf };

// Most tokens a vocabulary may have, most n-gram width, longest int output.
inline constexpr uint32_t kMaxTokens = uint32_t{1} << 20;
inline constexpr uint32_t kMaxNgrams = 5;
inline constexpr uint32_t kMaxSequenceLength = uint32_t{1} << 16;

struct TokenizerSpec {
  Standardize standardize = Standardize::kLowerAndStripPunctuation;
  uint32_t ngrams = 1;
  uint32_t max_tokens = 20'000;
  TextOutput output_mode = TextOutput::kInt;
  uint32_t output_sequence_length = 0;  // int: required (1 to kMaxSequenceLength)

  uint32_t width() const;  // features per document
  uint32_t reserved() const { return output_mode == TextOutput::kInt ? 2 : 1; }
};

const char* standardize_name(Standardize s);
const char* text_output_name(TextOutput m);

// The tokens of `text` as the spec makes them (standardized, split, n-grams).
std::vector<std::string> text_tokens(const TokenizerSpec& spec, std::string_view text);

struct FittedTokenizer {
  TokenizerSpec spec;
  // The kept tokens in index order, after the reserved indices (index reserved() + i is
  // vocabulary[i]).
  std::vector<std::string> vocabulary;
  std::vector<float> idf;  // tf_idf: width() weights

  // A document's features into `out` (spec.width() floats).
  void apply(std::string_view text, float* out) const;
  // The index of one token (out-of-vocabulary: reserved() - 1).
  uint32_t index(std::string_view token) const;

 private:
  friend FittedTokenizer finish_tokenizer(TokenizerSpec spec, std::vector<std::string> vocabulary, std::vector<float> idf);
  void index_vocabulary();
  std::vector<uint32_t> by_token_;  // indices into vocabulary, sorted by token
};

// Builds a fitted tokenizer from its parts (a fit's result, or one read back from JSON).
FittedTokenizer finish_tokenizer(TokenizerSpec spec, std::vector<std::string> vocabulary, std::vector<float> idf);

// The streaming fit: every training document once (`add`), then for tf_idf every document again
// (`add_second`: the document frequencies of the chosen vocabulary, exact), then `finish`.
class TokenizerFit {
 public:
  explicit TokenizerFit(TokenizerSpec spec);
  void add(std::string_view text);
  bool needs_second_pass() const { return spec_.output_mode == TextOutput::kTfIdf; }
  void add_second(std::string_view text);
  FittedTokenizer finish();

 private:
  void choose();  // the vocabulary, after the first pass
  TokenizerSpec spec_;
  TopKeys<std::string, true> counts_;  // ties to the greater token, as Keras
  bool chosen_ = false;
  std::vector<std::string> vocabulary_;
  FittedTokenizer lookup_;                 // the chosen vocabulary, to count document frequencies
  std::vector<uint64_t> document_counts_;  // per vocabulary token
  uint64_t documents_ = 0;
};

// The spec's JSON (a job's `preprocessing.text`; docs/JOB-SPEC.md), read strictly: SpecError naming
// the field under `path`; and written back.
TokenizerSpec read_tokenizer_spec(const boost::json::value& v, const std::string& path);
boost::json::object tokenizer_spec_to_object(const TokenizerSpec& spec);
// The fitted form as JSON (kept with the model); from_json throws DataError.
std::string fitted_tokenizer_to_json(const FittedTokenizer& tokenizer);
FittedTokenizer fitted_tokenizer_from_json(const std::string& text);

}  // namespace pstrain
