#include "tests/unit/test_util.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace attnscope::testing {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : fallback;
}

}  // namespace

std::string SharedDir() { return EnvOr("ATTNSCOPE_SHARED_DIR", ATTNSCOPE_DEFAULT_SHARED_DIR); }

std::string TestDataDir() { return EnvOr("ATTNSCOPE_TEST_DATA", ATTNSCOPE_DEFAULT_TEST_DATA); }

std::string MakeTempDir() {
  std::string pattern = ::testing::TempDir() + "attnscope_XXXXXX";
  char* made = mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp failed for " << pattern;
  return pattern;
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteFileBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
}

}  // namespace attnscope::testing
