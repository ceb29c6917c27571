// Checks that a call throws microllm::Error (not another exception type) from the expected
// operator, with a message that contains every given fragment — EXPECT_THROW alone would
// accept any exception and any message.
//
//   EXPECT_TRUE(throws_error([&] { ops::add(a, b); }, "add", {"(2, 3)", "(4, 5)"}));
#pragma once

#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "microllm/core/error.h"

namespace microllm::testing {

// `op` empty: any operator; otherwise Error::op() must equal it.
template <class Fn>
::testing::AssertionResult throws_error(Fn&& fn, std::string_view op,
                                        std::initializer_list<std::string_view> fragments) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string what = e.what();
    if (!op.empty() && e.op() != op)
      return ::testing::AssertionFailure()
             << "Error from op '" << e.op() << "', expected '" << op << "': " << what;
    for (std::string_view fragment : fragments)
      if (what.find(fragment) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << fragment << "\": " << what;
    return ::testing::AssertionSuccess() << what;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-microllm exception: " << e.what();
  } catch (...) {
    return ::testing::AssertionFailure() << "threw a non-std exception";
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace microllm::testing
