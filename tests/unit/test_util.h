// Helpers shared by the unit tests: fixture paths and JSON-lines goldens.
#ifndef ATTNSCOPE_TESTS_UNIT_TEST_UTIL_H_
#define ATTNSCOPE_TESTS_UNIT_TEST_UTIL_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace attnscope::testing {

// ../shared, or ATTNSCOPE_SHARED_DIR when set; no trailing slash.
std::string SharedDir();
// tests/data, or ATTNSCOPE_TEST_DATA when set.
std::string TestDataDir();
// A fresh, empty temporary directory, removed by the OS eventually.
std::string MakeTempDir();
// Every line of a JSON-lines file; fails the current test when the file cannot be read.
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);
// The whole file as bytes; fails the current test when the file cannot be read.
std::string ReadFileBytes(const std::string& path);
void WriteFileBytes(const std::string& path, const std::string& bytes);

}  // namespace attnscope::testing

#endif  // ATTNSCOPE_TESTS_UNIT_TEST_UTIL_H_
