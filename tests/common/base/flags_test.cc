#include <doctest/doctest.h>

#include <cstdlib>

#include "common/base/error.h"
#include "common/base/flags.h"

using pstrain::FlagSet;

namespace {

FlagSet make() {
  FlagSet f("prog", "summary");
  f.add("port", "PSTRAIN_TEST_PORT", "7000", "port");
  f.add("name", "", "x", "name");
  f.add_switch("check-config", "", "validate and exit");
  return f;
}

FlagSet::Outcome parse(FlagSet& f, std::vector<std::string> args) {
  std::vector<char*> argv = {const_cast<char*>("prog")};
  for (auto& a : args) argv.push_back(a.data());
  return f.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("flag beats environment beats default") {
  ::unsetenv("PSTRAIN_TEST_PORT");
  FlagSet f = make();
  REQUIRE(parse(f, {}) == FlagSet::Outcome::kRun);
  CHECK(f.get_int("port", 1, 65535) == 7000);
  ::setenv("PSTRAIN_TEST_PORT", "7100", 1);
  CHECK(f.get_int("port", 1, 65535) == 7100);
  FlagSet g = make();
  REQUIRE(parse(g, {"--port=7200", "--name", "y", "--check-config"}) == FlagSet::Outcome::kRun);
  CHECK(g.get_int("port", 1, 65535) == 7200);
  CHECK(g.get("name") == "y");
  CHECK(g.get_switch("check-config"));
  ::unsetenv("PSTRAIN_TEST_PORT");
}

TEST_CASE("bad flags are errors that say what is wrong") {
  FlagSet f = make();
  CHECK(parse(f, {"--nope=1"}) == FlagSet::Outcome::kError);
  CHECK(f.error() == "unknown flag --nope (see --help)");
  FlagSet g = make();
  CHECK(parse(g, {"--name"}) == FlagSet::Outcome::kError);
  CHECK(g.error() == "flag --name needs a value");
  FlagSet h = make();
  REQUIRE(parse(h, {"--port=http"}) == FlagSet::Outcome::kRun);
  CHECK_THROWS_WITH_AS(h.get_int("port", 1, 65535), "--port must be an integer from 1 to 65535, not 'http'", pstrain::Error);
  FlagSet k = make();
  CHECK(parse(k, {"--help"}) == FlagSet::Outcome::kHelpShown);
  CHECK(k.help().find("env PSTRAIN_TEST_PORT; default '7000'") != std::string::npos);
}

TEST_CASE("a switch on by default is turned off by --name=false or its environment variable") {
  const auto on = [] {
    FlagSet f("prog", "summary");
    f.add_switch("fast-path", "PSTRAIN_TEST_FAST_PATH", "fast", /*on_by_default=*/true);
    return f;
  };
  ::unsetenv("PSTRAIN_TEST_FAST_PATH");
  FlagSet f = on();
  REQUIRE(parse(f, {}) == FlagSet::Outcome::kRun);
  CHECK(f.get_switch("fast-path"));
  CHECK(f.help().find("on by default (--fast-path=false turns it off)") != std::string::npos);
  FlagSet g = on();
  REQUIRE(parse(g, {"--fast-path=false"}) == FlagSet::Outcome::kRun);
  CHECK_FALSE(g.get_switch("fast-path"));
  FlagSet h = on();
  REQUIRE(parse(h, {"--fast-path"}) == FlagSet::Outcome::kRun);
  CHECK(h.get_switch("fast-path"));
  ::setenv("PSTRAIN_TEST_FAST_PATH", "0", 1);
  FlagSet k = on();
  REQUIRE(parse(k, {}) == FlagSet::Outcome::kRun);
  CHECK_FALSE(k.get_switch("fast-path"));
  ::unsetenv("PSTRAIN_TEST_FAST_PATH");
}
