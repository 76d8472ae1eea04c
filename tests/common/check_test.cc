// common/check.h: a failed SHELF_CHECK stops the process in every build type
// (this test builds with NDEBUG under RelWithDebInfo and Release, where
// assert() would be gone) and says where and why.
#include "common/check.h"

#include <gtest/gtest.h>

#include <string>

namespace shelf {
namespace {

int Evaluations(int* n) { return ++*n; }

TEST(CheckDeathTest, FailingCheckAbortsWithFileLineAndCondition) {
  const int used = 3;
  EXPECT_DEATH(SHELF_CHECK(used == 4), "check_test.cc:[0-9]+: CHECK failed: used == 4\n");
}

TEST(CheckDeathTest, StreamedContextIsPrinted) {
  const int used = 3;
  EXPECT_DEATH(SHELF_CHECK(used <= 2) << "freeing " << used << " bytes",
               "CHECK failed: used <= 2: freeing 3 bytes");
}

#ifdef NDEBUG
TEST(CheckDeathTest, SurvivesNdebug) { EXPECT_DEATH(SHELF_CHECK(false), "CHECK failed: false"); }
#endif

TEST(CheckTest, PassingCheckEvaluatesOnceAndSkipsTheContext) {
  int n = 0;
  int context = 0;
  SHELF_CHECK(Evaluations(&n) == 1) << Evaluations(&context);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(context, 0);
}

TEST(CheckTest, IsOneStatementInAnUnbracedIf) {
  bool reached_else = false;
  if (false)
    SHELF_CHECK(false);
  else
    reached_else = true;
  EXPECT_TRUE(reached_else);
}

}  // namespace
}  // namespace shelf
