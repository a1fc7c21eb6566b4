// Text as datasets hold it (docs/DATASETS.md "Text"): UTF-8 checked, split into tokens the way
// Keras' TextVectorization does by default, and profiled in one streaming pass with bounded
// memory (documents, bytes, tokens per document, the most frequent tokens).
//
// Tokens: ASCII letters lowercased, the ASCII punctuation Keras' "lower_and_strip_punctuation"
// strips removed, then split on whitespace (space, tab, CR, LF, VT, FF). Other characters are kept
// as they are (a non-ASCII letter is not lowercased: the tokenizer of the text models defines the
// full rules; the profile is a description, not a model input).
//
// Thread rules: utf8_error and for_each_token are pure; TextProfiler is single-owner.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pstrain {

// Where a text stops being RFC 3629 UTF-8 (no overlong forms, no surrogates, nothing above
// U+10FFFF): the byte offset, and the 1-based line and byte column of that offset.
struct Utf8Error {
  uint64_t offset = 0;
  uint64_t line = 1;
  uint64_t column = 1;
};
std::optional<Utf8Error> utf8_error(std::string_view text);

// Calls `token` with each token of `text` in order (see above); the view is valid for the call.
void for_each_token(std::string_view text, const std::function<void(std::string_view)>& token);

struct TextProfile {
  uint64_t documents = 0;
  uint64_t bytes = 0;   // UTF-8 bytes of every document
  uint64_t tokens = 0;  // over every document
  uint64_t min_tokens = 0, max_tokens = 0;  // per document (0 when there is none)
  // Documents by token count: bucket 0 counts documents of 0 tokens, bucket k (k >= 1) those of
  // 2^(k-1) to 2^k - 1 tokens; trailing empty buckets are dropped.
  std::vector<uint64_t> length_histogram;
  // Distinct tokens counted; at most kMaxDistinctTokens (then `distinct_capped`: there are more).
  uint64_t distinct_tokens = 0;
  bool distinct_capped = false;
  // The most frequent tokens with their exact counts, by count then token (byte-wise). Once
  // kMaxDistinctTokens distinct tokens are counted, a token first seen after that is not counted:
  // the list is then the most frequent of the first kMaxDistinctTokens distinct tokens (in text
  // the frequent ones come early; the cap bounds memory to a few MiB).
  std::vector<std::pair<std::string, uint64_t>> top_tokens;

  double mean_tokens() const { return documents == 0 ? 0.0 : static_cast<double>(tokens) / static_cast<double>(documents); }
  bool operator==(const TextProfile&) const = default;
};

inline constexpr size_t kMaxDistinctTokens = 100'000;
inline constexpr size_t kProfileTopTokens = 20;
inline constexpr size_t kMaxTokenBytes = 64;  // a longer token is counted by its first 64 bytes (whole characters)

// The profile as JSON: {"documents", "bytes", "tokens", "tokens_per_document": {"min", "max",
// "mean", "histogram": [{"at_most": N, "documents": C}, ...]}, "distinct_tokens",
// "distinct_tokens_capped", "top_tokens": [["the", 120], ...]}.
std::string text_profile_to_json(const TextProfile& profile);
// Throws DataError naming `source` on a malformed profile.
TextProfile text_profile_from_json(const std::string& text, const std::string& source);

// Builds a TextProfile one document at a time. Memory: at most kMaxDistinctTokens tokens of at
// most kMaxTokenBytes bytes each (under 16 MiB), whatever the text's size.
class TextProfiler {
 public:
  void add(std::string_view document);
  TextProfile finish() const;

 private:
  TextProfile profile_;
  std::unordered_map<std::string, uint64_t> counts_;
};

}  // namespace pstrain
