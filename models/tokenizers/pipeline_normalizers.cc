#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/tokenizers/pipeline_chars.h"
#include "models/tokenizers/pipeline_tokenizer.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

// normalizers/bert.rs is_chinese_char, its ranges verbatim (Extension E from 0x2B920, where the
// original BERT code has 0x2B820).
bool IsChineseChar(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace

using pipeline_chars::MatchesInChars;

TokenizerNormalization PipelineTokenizer::NormalizerFlags() const {
  TokenizerNormalization flags;
  for (const NormalizerStep& step : pipeline_.normalizer) {
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
        flags.unicode_form = "NFC";
        break;
      case NormalizerStep::Kind::kNfd:
        flags.unicode_form = "NFD";
        break;
      case NormalizerStep::Kind::kNfkc:
        flags.unicode_form = "NFKC";
        break;
      case NormalizerStep::Kind::kNfkd:
        flags.unicode_form = "NFKD";
        break;
      case NormalizerStep::Kind::kPrecompiled: {
        // SentencePiece's nmt_nfkc and nfkc rules turn U+FB01 into "fi"; identity ones have no
        // charsmap at all.
        const std::vector<PrecompiledCharsmap::Change> changes = step.charsmap->Changes({0xFB01});
        if (changes.size() == 2 && changes[0].c == 'f' && changes[1].c == 'i') {
          flags.unicode_form = "NFKC";
        }
        break;
      }
      case NormalizerStep::Kind::kLowercase:
        flags.lowercase = true;
        break;
      case NormalizerStep::Kind::kStripAccents:
        flags.strip_accents = true;
        break;
      case NormalizerStep::Kind::kReplace:
      case NormalizerStep::Kind::kPrepend:
      case NormalizerStep::Kind::kStrip:
      case NormalizerStep::Kind::kBertCleanText:
      case NormalizerStep::Kind::kBertChineseChars:
      case NormalizerStep::Kind::kNmt:
        break;
    }
  }
  std::vector<std::string> parts;
  if (!flags.unicode_form.empty()) parts.push_back("Unicode " + flags.unicode_form);
  if (flags.lowercase) parts.push_back("lower-cased");
  if (flags.strip_accents) parts.push_back("accents removed");
  flags.description = absl::StrJoin(parts, ", ");
  return flags;
}

absl::StatusOr<std::vector<PipelineTokenizer::NormChar>> PipelineTokenizer::Normalize(
    const std::vector<NormalizerStep>& normalizer, std::vector<NormChar> chars) {
  for (const NormalizerStep& step : normalizer) {
    std::vector<NormChar> next;
    next.reserve(chars.size());
    std::vector<char32_t> cps;
    cps.reserve(chars.size());
    for (const NormChar& c : chars) cps.push_back(c.c);
    switch (step.kind) {
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfkc:
        // The library aligns a composed character with the first one it replaced only (its
        // NormalizedString::transform): the marks composed into it are covered by no token.
        for (const unicode::ComposedChar& composed :
             step.kind == NormalizerStep::Kind::kNfc ? unicode::Nfc(cps) : unicode::Nfkc(cps)) {
          const NormChar& source = chars[composed.first];
          next.push_back({composed.c, source.start, source.end});
        }
        break;
      case NormalizerStep::Kind::kNfd:
      case NormalizerStep::Kind::kNfkd:
        // Each character of a decomposition shares the alignment of the one it came from.
        for (const unicode::SourcedChar& sourced :
             step.kind == NormalizerStep::Kind::kNfd ? unicode::Nfd(cps) : unicode::Nfkd(cps)) {
          next.push_back({sourced.c, chars[sourced.source].start, chars[sourced.source].end});
        }
        break;
      case NormalizerStep::Kind::kLowercase:
        // Rust's char::to_lowercase, each character of a longer mapping aligned with the one
        // lowered.
        for (const NormChar& c : chars) {
          for (char32_t lower : unicode::ToLower(c.c)) next.push_back({lower, c.start, c.end});
        }
        break;
      case NormalizerStep::Kind::kStripAccents:
        // NormalizedString::filter: the kept characters keep their alignment, the removed ones
        // leave none behind.
        std::copy_if(chars.begin(), chars.end(), std::back_inserter(next), [&](const NormChar& c) {
          return !(step.nonspacing_only ? unicode::IsNonspacingMark(c.c) : unicode::IsMark(c.c));
        });
        break;
      case NormalizerStep::Kind::kBertCleanText:
        // normalizers/bert.rs do_clean_text: a filter, then a map; both keep the alignment.
        for (const NormChar& c : chars) {
          const bool control = c.c != '\t' && c.c != '\n' && c.c != '\r' && unicode::IsOther(c.c);
          if (c.c == 0 || c.c == 0xFFFD || control) continue;
          next.push_back({unicode::IsWhiteSpace(c.c) ? U' ' : c.c, c.start, c.end});
        }
        break;
      case NormalizerStep::Kind::kBertChineseChars:
        // do_handle_chinese_chars: the spaces the transform inserts share the ideograph's
        // alignment.
        for (const NormChar& c : chars) {
          if (!IsChineseChar(c.c)) {
            next.push_back(c);
            continue;
          }
          next.push_back({' ', c.start, c.end});
          next.push_back(c);
          next.push_back({' ', c.start, c.end});
        }
        break;
      case NormalizerStep::Kind::kNmt:
        // normalizers/unicode.rs do_nmt: a filter, then a map.
        for (const NormChar& c : chars) {
          const char32_t x = c.c;
          if ((x >= 0x01 && x <= 0x08) || x == 0x0B || (x >= 0x0E && x <= 0x1F) || x == 0x7F ||
              x == 0x8F || x == 0x9F) {
            continue;
          }
          const bool space = x == 0x09 || x == 0x0A || x == 0x0C || x == 0x0D || x == 0x1680 ||
                             (x >= 0x200B && x <= 0x200F) || x == 0x2028 || x == 0x2029 ||
                             x == 0x2581 || x == 0xFEFF || x == 0xFFFD;
          next.push_back({space ? U' ' : x, c.start, c.end});
        }
        break;
      case NormalizerStep::Kind::kPrepend:
        // NormalizedString::prepend: the new characters share the first character's alignment;
        // an empty text stays empty.
        if (!chars.empty()) {
          absl::StatusOr<unicode::DecodedText> content = unicode::DecodeUtf8(step.content);
          for (char32_t c : content->code_points) {
            next.push_back({c, chars.front().start, chars.front().end});
          }
        }
        next.insert(next.end(), chars.begin(), chars.end());
        break;
      case NormalizerStep::Kind::kReplace: {
        absl::StatusOr<unicode::DecodedText> content = unicode::DecodeUtf8(step.content);
        int64_t kept = 0;
        ATTNSCOPE_ASSIGN_OR_RETURN(const auto found, MatchesInChars(*step.pattern, chars));
        for (const auto& [first, last] : found) {
          if (first == last) continue;
          next.insert(next.end(), chars.begin() + kept, chars.begin() + first);
          // NormalizedString::replace: the new characters are inserted ones, aligned with the
          // last character they replace.
          for (char32_t c : content->code_points) {
            next.push_back({c, chars[last - 1].start, chars[last - 1].end});
          }
          kept = last;
        }
        next.insert(next.end(), chars.begin() + kept, chars.end());
        break;
      }
      case NormalizerStep::Kind::kPrecompiled: {
        // NormalizedString::transform: a change of 0 or less takes the alignment of the next
        // original character and passes it (and the ones it removes), an inserted one (1) shares
        // the alignment of the character before it, or none at the start.
        size_t position = 0;
        // The first change replaces a character (a replacement's first character does), so an
        // inserted one always has one before it, and the changes pass no more characters than
        // they were made for.
        for (const PrecompiledCharsmap::Change& change : step.charsmap->Changes(cps)) {
          if (change.change > 0) {
            next.push_back({change.c, chars[position - 1].start, chars[position - 1].end});
            continue;
          }
          next.push_back({change.c, chars[position].start, chars[position].end});
          position += 1 + static_cast<size_t>(-change.change);
        }
        break;
      }
      case NormalizerStep::Kind::kStrip: {
        // The kept characters keep their alignment (NormalizedString::lrstrip).
        size_t first = 0;
        size_t last = chars.size();
        while (step.strip_left && first < last && unicode::IsWhiteSpace(chars[first].c)) ++first;
        while (step.strip_right && last > first && unicode::IsWhiteSpace(chars[last - 1].c)) --last;
        next.assign(chars.begin() + first, chars.begin() + last);
        break;
      }
    }
    chars = std::move(next);
  }
  return chars;
}

}  // namespace attnscope
