// Keras' TextVectorization as a fitted value (tokenizer.h).
#include "common/data/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "common/base/error.h"

namespace pstrain {
namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// Keras' DEFAULT_STRIP_REGEX: r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']'.
bool stripped(char c) {
  static constexpr std::string_view kPunctuation = "!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~'";
  return kPunctuation.find(c) != std::string_view::npos;
}

std::string standardized(Standardize how, std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (how == Standardize::kNone) {
      out += c;
      continue;
    }
    const char lower = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    if (how == Standardize::kLowerAndStripPunctuation && stripped(lower)) continue;
    out += lower;
  }
  return out;
}

}  // namespace

uint32_t TokenizerSpec::width() const { return output_mode == TextOutput::kInt ? output_sequence_length : max_tokens; }

const char* standardize_name(Standardize s) {
  switch (s) {
    case Standardize::kLowerAndStripPunctuation: return "lower_and_strip_punctuation";
    case Standardize::kLower: return "lower";
    case Standardize::kNone: return "none";
  }
  return "none";
}

const char* text_output_name(TextOutput m) {
  switch (m) {
    case TextOutput::kInt: return "int";
    case TextOutput::kMultiHot: return "multi_hot";
    case TextOutput::kCount: return "count";
    case TextOutput::kTfIdf: return "tf_idf";
  }
  return "int";
}

std::vector<std::string> text_tokens(const TokenizerSpec& spec, std::string_view text) {
  const std::string s = standardized(spec.standardize, text);
  std::vector<std::string> words;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && ascii_space(s[i])) ++i;
    const size_t start = i;
    while (i < s.size() && !ascii_space(s[i])) ++i;
    if (i > start) words.emplace_back(s, start, i - start);
  }
  if (spec.ngrams <= 1) return words;
  std::vector<std::string> out = words;
  for (uint32_t n = 2; n <= spec.ngrams; ++n) {
    for (size_t w = 0; w + n <= words.size(); ++w) {
      std::string gram = words[w];
      for (size_t k = 1; k < n; ++k) gram += ' ' + words[w + k];
      out.push_back(std::move(gram));
    }
  }
  return out;
}

FittedTokenizer finish_tokenizer(TokenizerSpec spec, std::vector<std::string> vocabulary, std::vector<float> idf) {
  if (vocabulary.size() + spec.reserved() > spec.max_tokens) throw DataError("tokenizer: the vocabulary is larger than max_tokens");
  if (spec.output_mode == TextOutput::kTfIdf && idf.size() != spec.width()) throw DataError("tokenizer: idf weights do not match max_tokens");
  FittedTokenizer t;
  t.spec = spec;
  t.vocabulary = std::move(vocabulary);
  t.idf = std::move(idf);
  t.index_vocabulary();
  return t;
}

void FittedTokenizer::index_vocabulary() {
  by_token_.resize(vocabulary.size());
  std::iota(by_token_.begin(), by_token_.end(), 0u);
  std::sort(by_token_.begin(), by_token_.end(), [&](uint32_t a, uint32_t b) { return vocabulary[a] < vocabulary[b]; });
  for (size_t i = 1; i < by_token_.size(); ++i) {
    if (vocabulary[by_token_[i - 1]] == vocabulary[by_token_[i]]) throw DataError("tokenizer: '" + vocabulary[by_token_[i]] + "' is in the vocabulary twice");
  }
}

uint32_t FittedTokenizer::index(std::string_view token) const {
  const auto it = std::lower_bound(by_token_.begin(), by_token_.end(), token,
                                   [&](uint32_t i, std::string_view t) { return vocabulary[i] < t; });
  if (it == by_token_.end() || vocabulary[*it] != token) return spec.reserved() - 1;
  return spec.reserved() + *it;
}

void FittedTokenizer::apply(std::string_view text, float* out) const {
  const uint32_t width = spec.width();
  std::fill(out, out + width, 0.0f);
  const std::vector<std::string> tokens = text_tokens(spec, text);
  if (spec.output_mode == TextOutput::kInt) {
    for (size_t i = 0; i < tokens.size() && i < width; ++i) out[i] = static_cast<float>(index(tokens[i]));
    return;
  }
  for (const std::string& t : tokens) {
    const uint32_t i = index(t);
    out[i] = spec.output_mode == TextOutput::kMultiHot ? 1.0f : out[i] + 1.0f;
  }
  if (spec.output_mode == TextOutput::kTfIdf) {
    for (uint32_t i = 0; i < width; ++i) out[i] *= idf[i];
  }
}

TokenizerFit::TokenizerFit(TokenizerSpec spec)
    : spec_(spec), counts_(std::min<size_t>(std::max<size_t>(size_t{4} * spec.max_tokens, size_t{1} << 16), size_t{1} << 20)) {}

void TokenizerFit::add(std::string_view text) {
  for (const std::string& t : text_tokens(spec_, text)) {
    if (t == "[UNK]") continue;  // (Keras removes the special tokens from its counts)
    counts_.add(t);
  }
}

void TokenizerFit::choose() {
  if (chosen_) return;
  chosen_ = true;
  vocabulary_ = counts_.top(spec_.max_tokens - spec_.reserved());
  TokenizerSpec counting = spec_;  // (its indices are tf_idf's; it needs no weights)
  counting.output_mode = TextOutput::kCount;
  lookup_ = finish_tokenizer(counting, vocabulary_, {});
  document_counts_.assign(vocabulary_.size(), 0);
}

void TokenizerFit::add_second(std::string_view text) {
  choose();
  ++documents_;
  std::vector<uint32_t> seen;
  for (const std::string& t : text_tokens(spec_, text)) {
    const uint32_t i = lookup_.index(t);
    if (i >= spec_.reserved()) seen.push_back(i - spec_.reserved());
  }
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (const uint32_t i : seen) ++document_counts_[i];
}

FittedTokenizer TokenizerFit::finish() {
  choose();
  std::vector<float> idf;
  if (spec_.output_mode == TextOutput::kTfIdf) {
    idf.assign(spec_.width(), 0.0f);
    double sum = 0;
    for (size_t i = 0; i < vocabulary_.size(); ++i) {
      const double w = std::log(1.0 + static_cast<double>(documents_) / (1.0 + static_cast<double>(document_counts_[i])));
      idf[spec_.reserved() + i] = static_cast<float>(w);
      sum += static_cast<float>(w);
    }
    idf[0] = vocabulary_.empty() ? 0.0f : static_cast<float>(sum / static_cast<double>(vocabulary_.size()));
  }
  return finish_tokenizer(spec_, vocabulary_, std::move(idf));
}

}  // namespace pstrain
