// doctest's main for every test executable, with honest skips (tests/test_skip.h): exit code 77 (ctest
// SKIP_RETURN_CODE) when every test case that ran called KVSIM_SKIP_CASE.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <set>

#include "test_skip.h"

namespace kvsim::test {

int exit_code(int doctest_rc) {
    const skip_state & s = skips();
    if (doctest_rc != 0 || s.reasons.empty()) return doctest_rc;
    const std::set<std::string> why(s.reasons.begin(), s.reasons.end());
    const bool all = (int) s.reasons.size() >= s.cases_started;
    std::printf("%s: %zu of %d test case(s) skipped%s\n", all ? "SKIPPED" : "note", s.reasons.size(), s.cases_started,
                all ? " (ctest reports this test as skipped)" : "; the others ran (ctest reports this test as passed)");
    for (const auto & w : why) std::printf("  skipped because: %s\n", w.c_str());
    return all ? skip_exit_code : 0;
}

namespace {

// Listener counting the test cases that start (subcase re-entries are not new cases).
struct case_counter : doctest::IReporter {
    explicit case_counter(const doctest::ContextOptions &) {}
    void report_query(const doctest::QueryData &) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats &) override {}
    void test_case_start(const doctest::TestCaseData &) override { ++skips().cases_started; }
    void test_case_reenter(const doctest::TestCaseData &) override {}
    void test_case_end(const doctest::CurrentTestCaseStats &) override {}
    void test_case_exception(const doctest::TestCaseException &) override {}
    void subcase_start(const doctest::SubcaseSignature &) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData &) override {}
    void log_message(const doctest::MessageData &) override {}
    void test_case_skipped(const doctest::TestCaseData &) override {}
};

}  // namespace
}  // namespace kvsim::test

REGISTER_LISTENER("kvsim_case_counter", 1, kvsim::test::case_counter);

int main(int argc, char ** argv) {
    doctest::Context ctx(argc, argv);
    const int rc = ctx.run();
    if (ctx.shouldExit()) return rc;  // --help, --list-test-cases, ...
    return kvsim::test::exit_code(rc);
}
