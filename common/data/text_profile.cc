#include "common/data/text_profile.h"

#include <boost/json.hpp>

#include <algorithm>
#include <bit>
#include <cmath>

#include "common/base/error.h"
#include "common/base/json_parse.h"
#include "common/base/json_text.h"

namespace pstrain {
namespace json = boost::json;

std::optional<Utf8Error> utf8_error(std::string_view s) {
  size_t i = 0;
  uint64_t line = 1;
  size_t line_start = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '\n') {
        ++line;
        line_start = i + 1;
      }
      ++i;
      continue;
    }
    const Utf8Error here{i, line, i - line_start + 1};
    size_t n = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return here;
    if (i + n >= s.size()) return here;
    for (size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return here;
      cp = (cp << 6) | (b & 0x3F);
    }
    static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return here;
    i += n + 1;
  }
  return std::nullopt;
}

namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Keras' DEFAULT_STRIP_REGEX: !"#$%&()*+,-./:;<=>?@[\]^_`{|}~ and the apostrophe.
bool is_stripped(unsigned char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

}  // namespace

void for_each_token(std::string_view text, const std::function<void(std::string_view)>& token) {
  std::string current;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (is_space(c)) {
      if (!current.empty()) token(current);
      current.clear();
    } else if (!is_stripped(c)) {
      current.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : ch);
    }
  }
  if (!current.empty()) token(current);
}

void TextProfiler::add(std::string_view document) {
  uint64_t tokens = 0;
  for_each_token(document, [&](std::string_view t) {
    ++tokens;
    size_t cut = std::min(t.size(), kMaxTokenBytes);
    while (cut < t.size() && cut > 0 && (static_cast<unsigned char>(t[cut]) & 0xC0) == 0x80) --cut;  // a whole character
    std::string key(t.substr(0, cut));
    if (const auto it = counts_.find(key); it != counts_.end()) {
      ++it->second;
    } else if (counts_.size() < kMaxDistinctTokens) {
      counts_.emplace(std::move(key), 1);
    } else {
      profile_.distinct_capped = true;
    }
  });
  TextProfile& p = profile_;
  p.min_tokens = p.documents == 0 ? tokens : std::min(p.min_tokens, tokens);
  p.max_tokens = std::max(p.max_tokens, tokens);
  ++p.documents;
  p.bytes += document.size();
  p.tokens += tokens;
  const size_t bucket = tokens == 0 ? 0 : static_cast<size_t>(std::bit_width(tokens));
  if (p.length_histogram.size() <= bucket) p.length_histogram.resize(bucket + 1, 0);
  ++p.length_histogram[bucket];
}

TextProfile TextProfiler::finish() const {
  TextProfile p = profile_;
  p.distinct_tokens = counts_.size();
  std::vector<std::pair<std::string, uint64_t>> all(counts_.begin(), counts_.end());
  const size_t n = std::min(all.size(), kProfileTopTokens);
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  all.resize(n);
  p.top_tokens = std::move(all);
  return p;
}

std::string text_profile_to_json(const TextProfile& p) {
  json::array histogram;
  for (size_t k = 0; k < p.length_histogram.size(); ++k) {
    const uint64_t at_most = k == 0 ? 0 : (uint64_t{1} << k) - 1;
    histogram.push_back(json::object{{"at_most", at_most}, {"documents", p.length_histogram[k]}});
  }
  json::array top;
  for (const auto& [token, count] : p.top_tokens) top.push_back(json::array{json::string(token), count});
  json::object o{{"documents", p.documents},
                 {"bytes", p.bytes},
                 {"tokens", p.tokens},
                 {"tokens_per_document",
                  json::object{{"min", p.min_tokens},
                               {"max", p.max_tokens},
                               {"mean", std::round(p.mean_tokens() * 1000.0) / 1000.0},
                               {"histogram", std::move(histogram)}}},
                 {"distinct_tokens", p.distinct_tokens},
                 {"distinct_tokens_capped", p.distinct_capped},
                 {"top_tokens", std::move(top)}};
  return to_json_text(o);
}

TextProfile text_profile_from_json(const std::string& text, const std::string& source) {
  TextProfile p;
  try {
    const json::object root = parse_json(text).as_object();
    p.documents = root.at("documents").to_number<uint64_t>();
    p.bytes = root.at("bytes").to_number<uint64_t>();
    p.tokens = root.at("tokens").to_number<uint64_t>();
    const json::object& per = root.at("tokens_per_document").as_object();
    p.min_tokens = per.at("min").to_number<uint64_t>();
    p.max_tokens = per.at("max").to_number<uint64_t>();
    for (const json::value& b : per.at("histogram").as_array()) p.length_histogram.push_back(b.at("documents").to_number<uint64_t>());
    p.distinct_tokens = root.at("distinct_tokens").to_number<uint64_t>();
    p.distinct_capped = root.at("distinct_tokens_capped").as_bool();
    for (const json::value& t : root.at("top_tokens").as_array()) {
      p.top_tokens.emplace_back(std::string(t.at(0).as_string()), t.at(1).to_number<uint64_t>());
    }
  } catch (const std::exception& e) {
    throw DataError(source + ": not a text profile: " + e.what());
  }
  return p;
}

}  // namespace pstrain
