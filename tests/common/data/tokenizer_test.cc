// The tokenizer (tokenizer.h, Keras' TextVectorization): standardization, whitespace split and
// n-grams; a fitted vocabulary with Keras' reserved indices and tie rule; int, multi_hot, count and
// tf_idf outputs computed by hand; the spec's and the fitted form's JSON.
#include "common/data/tokenizer.h"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "common/base/error.h"

using namespace pstrain;

namespace {

FittedTokenizer fit(TokenizerSpec spec, const std::vector<std::string>& documents) {
  TokenizerFit f(spec);
  for (const std::string& d : documents) f.add(d);
  if (f.needs_second_pass()) {
    for (const std::string& d : documents) f.add_second(d);
  }
  return f.finish();
}

std::vector<float> features(const FittedTokenizer& t, const std::string& text) {
  std::vector<float> out(t.spec.width(), -7.0f);
  t.apply(text, out.data());
  return out;
}

const std::vector<std::string> kDocuments = {"The cat sat.", "the DOG sat", "The cat!"};

}  // namespace

TEST_CASE("tokenizer: Keras' standardization (ASCII lowered, its punctuation stripped), whitespace runs, n-grams 1 then 2") {
  TokenizerSpec spec;
  CHECK(text_tokens(spec, "Hello, World!\t It's  a TEST.\n") == std::vector<std::string>{"hello", "world", "its", "a", "test"});
  CHECK(text_tokens(spec, "Ünïcode stays; C++ & e-mail") == std::vector<std::string>{"Ünïcode", "stays", "c", "email"});
  CHECK(text_tokens(spec, "  ").empty());
  spec.standardize = Standardize::kLower;
  CHECK(text_tokens(spec, "Hi, there") == std::vector<std::string>{"hi,", "there"});
  spec.standardize = Standardize::kNone;
  CHECK(text_tokens(spec, "Hi, there") == std::vector<std::string>{"Hi,", "there"});
  spec.standardize = Standardize::kLowerAndStripPunctuation;
  spec.ngrams = 3;
  CHECK(text_tokens(spec, "a b c d") == std::vector<std::string>{"a", "b", "c", "d", "a b", "b c", "c d", "a b c", "b c d"});
}

TEST_CASE("tokenizer: int output, the most frequent tokens after padding and [UNK], ties to the greater token") {
  TokenizerSpec spec;
  spec.max_tokens = 5;  // "", [UNK] and 3 tokens
  spec.output_sequence_length = 4;
  const FittedTokenizer t = fit(spec, kDocuments);
  // the x3, cat x2, sat x2, dog x1: sat before cat (a tie: the greater first, as Keras).
  CHECK(t.vocabulary == std::vector<std::string>{"the", "sat", "cat"});
  CHECK(features(t, "The dog sat") == std::vector<float>{2, 1, 3, 0});
  CHECK(features(t, "cat cat cat cat cat the") == std::vector<float>{4, 4, 4, 4});  // cut to 4
  CHECK(features(t, "") == std::vector<float>{0, 0, 0, 0});
  CHECK(t.index("[UNK]") == 1);
  TokenizerSpec wide = spec;
  wide.max_tokens = 100;
  CHECK(fit(wide, kDocuments).vocabulary == std::vector<std::string>{"the", "sat", "cat", "dog"});
}

TEST_CASE("tokenizer: multi_hot, count and tf_idf over max_tokens, index 0 for [UNK], idf as Keras computes it") {
  TokenizerSpec spec;
  spec.max_tokens = 5;  // [UNK], the, sat, cat, dog
  spec.output_mode = TextOutput::kMultiHot;
  CHECK(features(fit(spec, kDocuments), "the the dog") == std::vector<float>{0, 1, 0, 0, 1});
  CHECK(features(fit(spec, kDocuments), "the bird") == std::vector<float>{1, 1, 0, 0, 0});
  spec.output_mode = TextOutput::kCount;
  const FittedTokenizer counts = fit(spec, kDocuments);
  CHECK(counts.vocabulary == std::vector<std::string>{"the", "sat", "cat", "dog"});
  CHECK(features(counts, "the the dog cat") == std::vector<float>{0, 2, 0, 1, 1});
  CHECK(features(counts, "the the bird") == std::vector<float>{1, 2, 0, 0, 0});
  spec.output_mode = TextOutput::kTfIdf;
  spec.max_tokens = 4;  // [UNK] and 3 tokens: dog is out of vocabulary
  const FittedTokenizer tf_idf = fit(spec, kDocuments);
  // 3 documents; the in 3, sat in 2, cat in 2: idf = log(1 + 3 / (1 + df)); [UNK]'s the mean.
  const float the = static_cast<float>(std::log(1.0 + 3.0 / 4.0)), two = static_cast<float>(std::log(1.0 + 3.0 / 3.0));
  const float unk = static_cast<float>((static_cast<double>(the) + 2.0 * two) / 3.0);
  REQUIRE(tf_idf.idf.size() == 4);
  CHECK(tf_idf.idf == std::vector<float>{unk, the, two, two});
  CHECK(features(tf_idf, "the the dog") == std::vector<float>{unk, 2 * the, 0, 0});
}

TEST_CASE("tokenizer: the spec read strictly with errors naming the field, the fitted form's JSON applied bit for bit") {
  auto error_path = [](const std::string& text) {
    try {
      read_tokenizer_spec(boost::json::parse(text), "/preprocessing/text");
    } catch (const SpecError& e) {
      return e.path();
    }
    return std::string("(accepted)");
  };
  CHECK(error_path(R"({"output_sequence_length": 8})") == "(accepted)");
  CHECK(error_path(R"({})") == "/preprocessing/text/output_sequence_length");  // int needs it
  CHECK(error_path(R"({"output_mode": "count", "output_sequence_length": 8})") == "/preprocessing/text/output_sequence_length");
  CHECK(error_path(R"({"output_mode": "tf_idf", "ngrams": 6})") == "/preprocessing/text/ngrams");
  CHECK(error_path(R"({"output_sequence_length": 8, "max_tokens": 2})") == "/preprocessing/text/max_tokens");
  CHECK(error_path(R"({"output_mode": "multi_hot", "standardize": "upper"})") == "/preprocessing/text/standardize");
  CHECK(error_path(R"({"output_mode": "bag"})") == "/preprocessing/text/output_mode");
  CHECK(error_path(R"({"output_mode": "count", "max_token": 9})") == "/preprocessing/text/max_token");
  for (const TextOutput mode : {TextOutput::kInt, TextOutput::kMultiHot, TextOutput::kCount, TextOutput::kTfIdf}) {
    TokenizerSpec spec;
    spec.output_mode = mode;
    spec.ngrams = 2;
    spec.max_tokens = 9;
    spec.output_sequence_length = mode == TextOutput::kInt ? 6 : 0;
    const FittedTokenizer t = fit(spec, kDocuments);
    const FittedTokenizer back = fitted_tokenizer_from_json(fitted_tokenizer_to_json(t));
    CHECK(back.vocabulary == t.vocabulary);
    CHECK(features(back, "the cat sat on the dog") == features(t, "the cat sat on the dog"));
    const TokenizerSpec spec_back = read_tokenizer_spec(boost::json::value(tokenizer_spec_to_object(spec)), "");
    CHECK(spec_back.width() == spec.width());
  }
  CHECK_THROWS_AS(fitted_tokenizer_from_json(R"({"spec": {"output_mode": "count", "max_tokens": 3}, "vocabulary": ["a", "a"]})"), DataError);
  CHECK_THROWS_AS(fitted_tokenizer_from_json(R"({"spec": {"output_mode": "count", "max_tokens": 2}, "vocabulary": ["a", "b"]})"), DataError);
  CHECK_THROWS_AS(fitted_tokenizer_from_json("[]"), DataError);
}
