// ParseBody (server/request_body.h): JSON bodies nested deeper than kMaxJsonDepth are refused
// before they are parsed, and what nests within it still parses.
#include "server/request_body.h"

#include <string>

#include "attnscope/v1/attnscope.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace attnscope::server {
namespace {

using ::testing::HasSubstr;

TEST(RequestBodyTest, DeepNestingIsRefusedBeforeTheBodyIsParsed) {
  v1::TokenizeRequest request;
  // 101 levels and then text that is not JSON: a parser would stop at the "x" and say so; the
  // depth is what is reported, so the text was never handed to one.
  absl::Status status = ParseBody(std::string(101, '[') + "x", BodyFormat::kJson,
                                  /*source=*/"request body", &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("request body: expected JSON nested at most 100 levels deep, got 101"));
  // Four million levels, as a 4 MB body of '[' has.
  status = ParseBody(std::string(4'000'000, '['), BodyFormat::kJson, /*source=*/"request body",
                     &request);
  EXPECT_THAT(status.message(), HasSubstr("levels deep, got 4000000"));
}

TEST(RequestBodyTest, BracketsInStringsAndTheDeepestAllowedNestingStillParse) {
  v1::TokenizeRequest request;
  // Brackets and escaped quotes inside a string are text, not nesting.
  const std::string text = std::string(200, '[') + "\\\"" + std::string(200, '{');
  ASSERT_TRUE(ParseBody("{\"model\": \"m\", \"text\": \"" + text + "\"}", BodyFormat::kJson,
                        /*source=*/"request body", &request)
                  .ok());
  EXPECT_EQ(request.text(), std::string(200, '[') + "\"" + std::string(200, '{'));
  // 100 levels: the object and 99 nested arrays in an unknown field's value reach the parser,
  // which refuses the field, not the depth.
  const std::string nested = std::string(99, '[') + std::string(99, ']');
  const absl::Status status = ParseBody("{\"model\": \"m\", \"extra\": " + nested + "}",
                                        BodyFormat::kJson, /*source=*/"request body", &request);
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("levels deep")));
}

// A key given twice in one object is refused, naming it and where the JSON came from; the same
// key in two objects is no repetition.
TEST(RequestBodyTest, AKeyGivenTwiceInOneObjectIsRefused) {
  v1::TokenizeRequest request;
  absl::Status status = ParseBody(R"({"text": "hi", "text": "there"})", BodyFormat::kJson,
                                  /*source=*/"query parameter 'message'", &request);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("query parameter 'message': JSON key 'text' given more "
                                          "than once in one object"));
  // Both spellings of one field are one field given twice.
  status = ParseBody(R"({"text": "hi", "tokenization": {"maxLength": 5, "max_length": 6}})",
                     BodyFormat::kJson, /*source=*/"request body", &request);
  EXPECT_THAT(status.message(), HasSubstr("JSON key 'max_length' given more than once"));
  v1::EncodeRequest encode;
  status = ParseBody(R"({"inputs": [{"text": "a"}, {"text": "b"}], "model": "m"})",
                     BodyFormat::kJson, /*source=*/"request body", &encode);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(encode.inputs_size(), 2);
}

}  // namespace
}  // namespace attnscope::server
