// The doctest main of every test binary. CTest runs one test case per entry
// (--test-case=NAME, doctest_discover_tests); a name CTest mangles (a ';' splits a CTest list)
// then matches no case, and doctest would report success with nothing run. So a run with a
// --test-case filter that selects no case fails, naming the filter.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

// How many test cases passed the filters in this run.
unsigned& selected_cases() {
  static unsigned n = 0;
  return n;
}

std::atomic<unsigned> failed_assertions_so_far{0};

struct SelectionListener final : doctest::IReporter {
  explicit SelectionListener(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override { selected_cases() = stats.numTestCasesPassingFilters; }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData& data) override {
    if (data.m_failed) failed_assertions_so_far.fetch_add(1, std::memory_order_relaxed);
  }
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("selection", 1, SelectionListener);

namespace pstrain::testing {
// How many assertions have failed in this run: the process harness prints its processes' logs
// when a group ends after one failed (tests/integration/process_harness.cc, a weak reference).
unsigned failed_assertions() { return failed_assertions_so_far.load(std::memory_order_relaxed); }
}  // namespace pstrain::testing

int main(int argc, char** argv) {
  std::string filter;
  for (int i = 1; i < argc; ++i) {
    for (const char* prefix : {"--test-case=", "-tc="}) {
      if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) filter = argv[i] + std::strlen(prefix);
    }
  }
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;
  if (!filter.empty() && selected_cases() == 0) {
    std::fprintf(stderr, "test_main: no test case matches --test-case=%s (a ';' in a case's name breaks CTest's list)\n",
                 filter.c_str());
    return 1;
  }
  return result;
}
