// The MICROLLM_* environment switches: "1" and "0" forms and the size form, whose bad values
// are errors that name the variable.
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "core/expect_error.h"
#include "microllm/core/switch.h"
#include "support/scoped_env.h"

namespace {

using microllm::switch_count;
using microllm::switch_off;
using microllm::switch_on;
using microllm::testing::ScopedEnv;
using microllm::testing::throws_error;

constexpr const char* kName = "MICROLLM_TEST_SWITCH";

TEST(Switch, OnAndOffAreExactlyOneAndZero) {
  {
    ScopedEnv env(kName, "1");
    EXPECT_TRUE(switch_on(kName));
    EXPECT_FALSE(switch_off(kName));
  }
  {
    ScopedEnv env(kName, "0");
    EXPECT_FALSE(switch_on(kName));
    EXPECT_TRUE(switch_off(kName));
  }
  for (const char* other : {"", "yes", "10", " 1"}) {
    ScopedEnv env(kName, other);
    EXPECT_FALSE(switch_on(kName)) << "'" << other << "'";
    EXPECT_FALSE(switch_off(kName)) << "'" << other << "'";
  }
}

TEST(Switch, CountIsTheWholeNumberOrTheFallbackWhenUnset) {
  EXPECT_EQ(switch_count(kName, 7), 7);
  for (const auto& [value, want] : {std::pair{"0", 0}, {"2", 2}, {"16", 16}}) {
    ScopedEnv env(kName, value);
    EXPECT_EQ(switch_count(kName, 7), want) << value;
  }
}

TEST(Switch, CountRejectsWhatIsNotAWholeNumber) {
  for (const char* bad : {"", "-1", "2x", " 2", "1.5", "two", "99999999999"}) {
    ScopedEnv env(kName, bad);
    EXPECT_TRUE(throws_error([] { switch_count(kName, 7); }, "switch",
                             {kName, "whole number", std::string("'") + bad + "'"}))
        << "'" << bad << "'";
  }
}

}  // namespace
