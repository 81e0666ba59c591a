#include <algorithm>
#include <array>
#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "models/tokenizers/pipeline_chars.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

// The byte a character of the table stands for, or -1.
int ByteOfChar(char32_t c) {
  static const std::array<int16_t, 0x144> bytes = [] {
    std::array<int16_t, 0x144> table;
    table.fill(-1);
    const std::array<char32_t, 256>& chars = pipeline_chars::ByteLevelChars();
    for (int b = 0; b < 256; ++b) table[chars[b]] = static_cast<int16_t>(b);
    return table;
  }();
  return c < bytes.size() ? bytes[c] : -1;
}

// `bytes` read as UTF-8, each maximal subpart of an ill-formed sequence replaced by one
// U+FFFD (Unicode's "substitution of maximal subparts", what Rust's from_utf8_lossy does).
std::string Utf8Lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(bytes[i]); };
  size_t i = 0;
  while (i < bytes.size()) {
    const unsigned char lead = byte(i);
    int length = 0;
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    }
    if (length == 0) {
      out.append("\xEF\xBF\xBD");
      ++i;
      continue;
    }
    // Only the second byte has the narrowed range; the rest are any continuation byte.
    int valid = 1;
    while (valid < length && i + valid < bytes.size()) {
      const unsigned char b = byte(i + valid);
      const bool ok = valid == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++valid;
    }
    if (valid == length) {
      out.append(bytes, i, length);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += valid;
  }
  return out;
}

// decoders/wordpiece.rs cleanup: the replacements one after another, on one token.
std::string WordPieceCleanUp(std::string text) {
  for (const auto& [from, to] : {std::pair<const char*, const char*>{" .", "."},
                                 {" ?", "?"},
                                 {" !", "!"},
                                 {" ,", ","},
                                 {" ' ", "'"},
                                 {" n't", "n't"},
                                 {" 'm", "'m"},
                                 {" do not", " don't"},
                                 {" 's", "'s"},
                                 {" 've", "'ve"},
                                 {" 're", "'re"}}) {
    text = absl::StrReplaceAll(text, {{from, to}});
  }
  return text;
}

}  // namespace

std::string PipelineTokenizer::Decode(const std::vector<int64_t>& ids,
                                      bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && is_special_id_[id]) continue;
    tokens.push_back(id_to_token_[id]);
  }
  // No decoder: the library joins the tokens with spaces.
  if (pipeline_.decoder.empty()) return absl::StrJoin(tokens, " ");
  for (const DecoderStep& step : pipeline_.decoder) {
    switch (step.kind) {
      case DecoderStep::Kind::kByteLevel: {
        std::string bytes;
        for (const std::string& token : tokens) {
          absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
          const bool in_table =
              decoded.ok() && std::all_of(decoded->code_points.begin(), decoded->code_points.end(),
                                          [](char32_t c) { return ByteOfChar(c) >= 0; });
          if (!in_table) {
            bytes.append(token);
            continue;
          }
          for (char32_t c : decoded->code_points) bytes.push_back(static_cast<char>(ByteOfChar(c)));
        }
        tokens = {Utf8Lossy(bytes)};
        break;
      }
      case DecoderStep::Kind::kReplace:
        for (std::string& token : tokens) {
          token = absl::StrReplaceAll(token, {{step.pattern, step.content}});
        }
        break;
      case DecoderStep::Kind::kByteFallback: {
        // Runs of "<0xXX>" tokens become their bytes read as UTF-8, or one U+FFFD per token when
        // they are not UTF-8 (decoders::byte_fallback).
        std::vector<std::string> decoded;
        std::string run;
        size_t run_tokens = 0;
        const auto flush = [&] {
          if (run_tokens == 0) return;
          if (unicode::CheckUtf8(run).ok()) {
            decoded.push_back(run);
          } else {
            decoded.insert(decoded.end(), run_tokens, "\xEF\xBF\xBD");
          }
          run.clear();
          run_tokens = 0;
        };
        for (std::string& token : tokens) {
          int value = -1;
          if (token.size() == 6 && absl::StartsWith(token, "<0x") && token.back() == '>' &&
              std::isxdigit(static_cast<unsigned char>(token[3])) &&
              std::isxdigit(static_cast<unsigned char>(token[4]))) {
            value = std::stoi(token.substr(3, 2), nullptr, 16);
          }
          if (value >= 0) {
            run.push_back(static_cast<char>(value));
            ++run_tokens;
            continue;
          }
          flush();
          decoded.push_back(std::move(token));
        }
        flush();
        tokens = std::move(decoded);
        break;
      }
      case DecoderStep::Kind::kFuse:
        tokens = {absl::StrJoin(tokens, "")};
        break;
      case DecoderStep::Kind::kMetaspace:
        // Every replacement of the first token is dropped, not only a leading one (the library's
        // decode_chain).
        for (size_t k = 0; k < tokens.size(); ++k) {
          tokens[k] =
              absl::StrReplaceAll(tokens[k], {{step.content, k == 0 && step.prepend ? "" : " "}});
        }
        break;
      case DecoderStep::Kind::kBpeSuffix:
        // decoders/bpe.rs: every suffix of a token, not only a trailing one.
        for (size_t k = 0; k < tokens.size(); ++k) {
          tokens[k] =
              absl::StrReplaceAll(tokens[k], {{step.content, k + 1 == tokens.size() ? "" : " "}});
        }
        break;
      case DecoderStep::Kind::kWordPiece:
        for (size_t k = 0; k < tokens.size(); ++k) {
          std::string& token = tokens[k];
          if (k != 0) {
            if (absl::StartsWith(token, step.content)) {
              token.erase(0, step.content.size());
            } else {
              token.insert(0, " ");
            }
          }
          if (step.cleanup) token = WordPieceCleanUp(token);
        }
        break;
      case DecoderStep::Kind::kStrip:
        for (std::string& token : tokens) {
          absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
          absl::StatusOr<unicode::DecodedText> content = unicode::DecodeUtf8(step.content);
          if (!decoded.ok() || !content.ok() || content->size() != 1) continue;
          const char32_t strip = content->code_points[0];
          int64_t first = 0;
          while (first < step.start && first < decoded->size() &&
                 decoded->code_points[first] == strip) {
            ++first;
          }
          int64_t last = decoded->size();
          for (int64_t k = 0;
               k < step.stop && last > first && decoded->code_points[last - 1] == strip; ++k) {
            --last;
          }
          token = token.substr(decoded->ByteOffset(first),
                               decoded->ByteOffset(last) - decoded->ByteOffset(first));
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

}  // namespace attnscope
