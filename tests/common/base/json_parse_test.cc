// parse_json reads every double back to the bits it was written from (common/base/json_parse.h):
// random doubles of every kind (subnormals, 17 significant digits, large and small exponents)
// written by to_json_text and by boost::json::serialize, read back identical; Boost 1.81's own
// parser is shown to miss some of them (what issue 48 found in the job store).
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/base/json_parse.h"
#include "common/base/json_text.h"

namespace pstrain {
namespace {

namespace json = boost::json;

// Doubles of every kind: uniform bit patterns (every exponent), subnormals, values in [0, 1] with
// 17 significant digits (accuracies), huge and tiny magnitudes, and the edges.
std::vector<double> random_doubles(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> out = {0.0,
                             -0.0,
                             1.0,
                             0.1,
                             0.9017607042817127,
                             0.9115646258503401,
                             std::numeric_limits<double>::min(),
                             std::numeric_limits<double>::denorm_min(),
                             std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::lowest(),
                             std::numeric_limits<double>::epsilon(),
                             std::nextafter(1.0, 2.0),
                             std::nextafter(std::numeric_limits<double>::min(), 0.0)};
  while (out.size() < n) {
    double d = 0;
    switch (rng() % 4) {
      case 0: {  // any finite bit pattern
        d = std::bit_cast<double>(rng());
        break;
      }
      case 1: {  // subnormal
        d = std::bit_cast<double>(rng() & ((uint64_t{1} << 52) - 1));
        break;
      }
      case 2: {  // a fraction, as accuracies and losses are
        d = std::uniform_real_distribution<double>(0, 1)(rng);
        break;
      }
      default: {  // large or small exponents
        d = std::ldexp(std::uniform_real_distribution<double>(1, 2)(rng), static_cast<int>(rng() % 2000) - 1000);
      }
    }
    if (std::isfinite(d)) out.push_back(rng() % 2 ? d : -d);
  }
  return out;
}

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }

}  // namespace

TEST_CASE("parse_json reads random doubles written by to_json_text and by boost::json::serialize to identical bits") {
  const std::vector<double> values = random_doubles(200000, 48);
  size_t ours_wrong = 0, boost_wrong = 0;
  for (double d : values) {
    for (const std::string& text : {to_json_text(json::value(d)), json::serialize(json::value(d))}) {
      const json::value v = parse_json(text);
      const double back = v.is_double() ? v.get_double() : v.to_number<double>();
      if (!same_bits(back, d)) {
        if (++ours_wrong <= 5) MESSAGE("parse_json: " << text << " read as " << back);
      }
      const json::value b = json::parse(text);
      if (!same_bits(b.is_double() ? b.get_double() : b.to_number<double>(), d)) ++boost_wrong;
    }
  }
  CHECK(ours_wrong == 0);
  // Not a requirement, the reason for parse_json: Boost 1.81 misreads some (fixed in Boost 1.83).
  MESSAGE("boost::json::parse misread " << boost_wrong << " of " << 2 * values.size() << " texts");
}

TEST_CASE("parse_json: numbers inside documents, in every position, and the errors of json::parse") {
  const std::vector<double> values = random_doubles(2000, 7);
  json::array a;
  json::object o;
  for (size_t i = 0; i < values.size(); ++i) {
    a.push_back(values[i]);
    o["k" + std::to_string(i)] = json::object{{"v", values[i]}, {"n", json::array{values[i], i}}};
  }
  const json::value back_a = parse_json(to_json_text(a));
  const json::value back_o = parse_json(json::serialize(o));
  for (size_t i = 0; i < values.size(); ++i) {
    CAPTURE(values[i]);
    REQUIRE(same_bits(back_a.as_array()[i].to_number<double>(), values[i]));
    const json::object& e = back_o.as_object().at("k" + std::to_string(i)).as_object();
    REQUIRE(same_bits(e.at("v").to_number<double>(), values[i]));
    REQUIRE(same_bits(e.at("n").as_array()[0].to_number<double>(), values[i]));
    REQUIRE(e.at("n").as_array()[1].as_int64() == static_cast<int64_t>(i));
  }
  // Integers, strings, literals and whitespace as Boost reads them.
  const json::value v = parse_json(" {\"a\": [1, -2, 18446744073709551615, \"x\\u00e9\", true, null, 1e2]} ");
  CHECK(to_json_text(v) == to_json_text(json::parse(" {\"a\": [1, -2, 18446744073709551615, \"x\\u00e9\", true, null, 1e2]} ")));
  // Bad input: the same refusals.
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "1 2", "nan", "[1e]"}) {
    CAPTURE(bad);
    boost::system::error_code ours, theirs;
    const json::value r = parse_json(bad, ours);
    (void)json::parse(bad, theirs);
    CHECK(static_cast<bool>(ours));
    CHECK(static_cast<bool>(theirs));
    CHECK(r.is_null());
    CHECK_THROWS_AS(parse_json(bad), boost::system::system_error);
  }
  // Options pass through (comments are refused by default, taken when allowed).
  boost::system::error_code ec;
  (void)parse_json("[1 /* c */]", ec);
  CHECK(static_cast<bool>(ec));
  json::parse_options options;
  options.allow_comments = true;
  CHECK(parse_json("[1.5 /* c */]", ec, options).as_array()[0].get_double() == 1.5);
}

}  // namespace pstrain
