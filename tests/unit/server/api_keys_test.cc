// The --api_keys_file reader: which lines are keys, and which requests they let in.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>

#include "server/security.h"

namespace attnscope::server {
namespace {

std::string WriteKeys(const std::string& contents) {
  const std::string path = ::testing::TempDir() + "/api_keys";
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(ApiKeysTest, ReadsOneKeyALineAndSkipsCommentsAndBlankLines) {
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys =
      ApiKeys::Create(WriteKeys("# keys\nfirst-key\n\n  second-key  \r\n"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ((*keys)->size(), 2u);
  EXPECT_TRUE((*keys)->Accepts("Bearer first-key"));
  EXPECT_TRUE((*keys)->Accepts("bearer second-key"));
  EXPECT_FALSE((*keys)->Accepts("Bearer second-ke"));
  EXPECT_FALSE((*keys)->Accepts("first-key"));
}

// A file saved by an editor that writes a byte order mark: before, the mark became part of the
// first key, which then matched no request (or, before a comment, refused the whole file).
TEST(ApiKeysTest, AByteOrderMarkIsNotPartOfTheFirstKey) {
  absl::StatusOr<std::unique_ptr<ApiKeys>> keys =
      ApiKeys::Create(WriteKeys("\xEF\xBB\xBF"
                                "first-key\nsecond-key\n"));
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_TRUE((*keys)->Accepts("Bearer first-key"));
  absl::StatusOr<std::unique_ptr<ApiKeys>> commented =
      ApiKeys::Create(WriteKeys("\xEF\xBB\xBF# our keys\nkey-1\n"));
  ASSERT_TRUE(commented.ok()) << commented.status();
  EXPECT_EQ((*commented)->size(), 1u);
}

TEST(ApiKeysTest, RefusesAFileWithoutKeysOrAKeyWithSpaces) {
  const absl::Status none = ApiKeys::Create(WriteKeys("# none yet\n")).status();
  EXPECT_EQ(none.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.message().find("expected at least one key"), std::string::npos) << none;
  const absl::Status spaced = ApiKeys::Create(WriteKeys("two words\n")).status();
  EXPECT_EQ(spaced.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spaced.message().find("line 1"), std::string::npos) << spaced;
}

}  // namespace
}  // namespace attnscope::server
