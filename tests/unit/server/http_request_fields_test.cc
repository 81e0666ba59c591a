// How the HTTP port reads a request's target and its header fields, without a running server.
#include "server/http_request_fields.h"

#include <gtest/gtest.h>

#include <string>

namespace attnscope::server {
namespace {

namespace http = boost::beast::http;

HttpRequestHeader Request(const std::string& target, const std::string& host = "127.0.0.1") {
  HttpRequestHeader request;
  request.method(http::verb::get);
  request.target(target);
  request.set(http::field::host, host);
  return request;
}

TEST(NormalizeTargetTest, AbsoluteFormBecomesOriginFormAndItsAuthorityTheHost) {
  HttpRequestHeader request =
      Request("HTTP://example.test:8080/attnscope.v1.AttentionService/ListModels?x=1", "other");
  NormalizeTarget(request);
  EXPECT_EQ(request.target(), "/attnscope.v1.AttentionService/ListModels?x=1");
  EXPECT_EQ(request[http::field::host], "example.test:8080");

  HttpRequestHeader bare = Request("https://example.test");
  NormalizeTarget(bare);
  EXPECT_EQ(bare.target(), "/");
  EXPECT_EQ(bare[http::field::host], "example.test");

  HttpRequestHeader query_only = Request("http://example.test?a=b");
  NormalizeTarget(query_only);
  EXPECT_EQ(query_only.target(), "/?a=b");
}

TEST(NormalizeTargetTest, DecodesUnreservedCharactersOfThePathOnly) {
  HttpRequestHeader request =
      Request("/attnscope.v1.AttentionService/%54okenize%7e%2F%20%2e?message=%54%2F");
  NormalizeTarget(request);
  // Letters, '~' and '.' are unreserved; '/' and ' ' keep their encoding, as does the query.
  EXPECT_EQ(request.target(), "/attnscope.v1.AttentionService/Tokenize~%2F%20.?message=%54%2F");
  EXPECT_EQ(request[http::field::host], "127.0.0.1");

  HttpRequestHeader malformed = Request("/a%5/b%");
  NormalizeTarget(malformed);
  EXPECT_EQ(malformed.target(), "/a%5/b%");
}

TEST(CheckSingleFieldsTest, NamesTheFirstFieldGivenTwice) {
  HttpRequestHeader request = Request("/");
  request.insert(http::field::authorization, "Bearer a");
  request.insert(http::field::content_type, "application/json");
  EXPECT_TRUE(CheckSingleFields(request).ok());
  request.insert(http::field::authorization, "Bearer b");
  const absl::Status twice = CheckSingleFields(request);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twice.message(),
            "request header 'Authorization': expected at most one, got 2; send it once");
  HttpRequestHeader connect = Request("/");
  connect.insert("connect-protocol-version", "1");
  connect.insert("Connect-Protocol-Version", "1");
  EXPECT_NE(CheckSingleFields(connect).message().find("'Connect-Protocol-Version'"),
            std::string::npos);
}

}  // namespace
}  // namespace attnscope::server
