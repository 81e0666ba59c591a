#include "server/http_request_fields.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace attnscope::server {
namespace {

namespace http = boost::beast::http;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

absl::string_view View(boost::beast::string_view text) { return {text.data(), text.size()}; }
boost::beast::string_view BeastView(absl::string_view text) { return {text.data(), text.size()}; }

std::string HeaderOf(const HttpRequestHeader& request, http::field field) {
  return std::string(request[field]);
}
std::string HeaderOf(const HttpRequestHeader& request, absl::string_view name) {
  return std::string(request[BeastView(name)]);
}

absl::Status CheckSingleFields(const HttpRequestHeader& request) {
  static constexpr absl::string_view kSingleFields[] = {"Authorization",
                                                        "Origin",
                                                        "Content-Type",
                                                        "Content-Encoding",
                                                        "Connect-Protocol-Version",
                                                        "Connect-Content-Encoding"};
  for (const absl::string_view name : kSingleFields) {
    const size_t given = request.count(BeastView(name));
    if (given > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request header '", name, "': expected at most one, got ", given, "; send it once"));
    }
  }
  return absl::OkStatus();
}

void NormalizeTarget(HttpRequestHeader& request) {
  std::string target(View(request.target()));
  for (const absl::string_view scheme : {"http://", "https://"}) {
    if (target.size() < scheme.size() ||
        !absl::EqualsIgnoreCase(absl::string_view(target).substr(0, scheme.size()), scheme)) {
      continue;
    }
    const size_t path = target.find_first_of("/?", scheme.size());
    const std::string authority = target.substr(
        scheme.size(), path == std::string::npos ? std::string::npos : path - scheme.size());
    request.set(http::field::host, BeastView(authority));
    target = path == std::string::npos ? "/"
             : target[path] == '?'     ? absl::StrCat("/", target.substr(path))
                                       : target.substr(path);
    break;
  }
  // The query's values are decoded where they are read (QueryParam).
  const size_t path_end = std::min(target.find('?'), target.size());
  std::string normalized;
  normalized.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < path_end && HexDigit(target[i + 1]) >= 0 &&
        HexDigit(target[i + 2]) >= 0) {
      const char c = static_cast<char>(HexDigit(target[i + 1]) * 16 + HexDigit(target[i + 2]));
      if (absl::ascii_isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
        normalized.push_back(c);
        i += 2;
        continue;
      }
    }
    normalized.push_back(target[i]);
  }
  if (normalized != View(request.target())) request.target(BeastView(normalized));
}

absl::string_view PathOf(absl::string_view target) { return target.substr(0, target.find('?')); }
absl::string_view QueryOf(absl::string_view target) {
  const size_t mark = target.find('?');
  return mark == absl::string_view::npos ? absl::string_view() : target.substr(mark + 1);
}

absl::StatusOr<std::string> PercentDecode(absl::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(plus_is_space && text[i] == '+' ? ' ' : text[i]);
      continue;
    }
    const int high = i + 2 < text.size() ? HexDigit(text[i + 1]) : -1;
    const int low = high >= 0 ? HexDigit(text[i + 2]) : -1;
    if (low < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", text.substr(i, 3), "' in the request URI: expected % and two hex digits"));
    }
    out.push_back(static_cast<char>(high * 16 + low));
    i += 2;
  }
  return out;
}

absl::StatusOr<std::optional<std::string>> QueryParam(absl::string_view query,
                                                      absl::string_view name) {
  std::optional<std::string> value;
  int count = 0;
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t equals = pair.find('=');
    if (pair.substr(0, equals) != name) continue;
    ++count;
    if (value.has_value()) continue;
    if (equals == absl::string_view::npos) {
      value.emplace();
      continue;
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(value,
                               PercentDecode(pair.substr(equals + 1), /*plus_is_space=*/true));
  }
  if (count > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("query parameter '", name, "': given ", count, " times, expected once"));
  }
  return value;
}

bool HasQueryParam(absl::string_view query, absl::string_view name) {
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    if (pair.substr(0, pair.find('=')) == name) return true;
  }
  return false;
}

std::string MediaType(const HttpRequestHeader& request) {
  const std::string type = HeaderOf(request, http::field::content_type);
  return absl::AsciiStrToLower(absl::StripAsciiWhitespace(type.substr(0, type.find(';'))));
}

bool FromBrowser(const HttpRequestHeader& request) {
  return request.count(http::field::origin) > 0 || request.count("Sec-Fetch-Site") > 0;
}

std::string NormalizeOrigin(absl::string_view origin) {
  std::string normal = absl::AsciiStrToLower(absl::StripSuffix(origin, "/"));
  if (absl::StartsWith(normal, "http://") && absl::EndsWith(normal, ":80")) {
    normal.resize(normal.size() - 3);
  } else if (absl::StartsWith(normal, "https://") && absl::EndsWith(normal, ":443")) {
    normal.resize(normal.size() - 4);
  }
  return normal;
}

}  // namespace attnscope::server
