#include "fuzz/tokenizer_checks.h"

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_util.h"
#include "models/tokenizers/unicode.h"

namespace attnscope::fuzz {
namespace {

bool IsUtf8(std::string_view text) { return unicode::DecodeUtf8(text).ok(); }

// The promises of one TokenizedText about `text`, decoded as `decoded`.
void CheckTokenized(const Tokenizer& tokenizer, const unicode::DecodedText& decoded,
                    const TokenizedText& out, bool tokens_are_vocabulary) {
  const size_t n = out.ids.size();
  ATTNSCOPE_FUZZ_CHECK(out.tokens.size() == n && out.offsets.size() == n &&
                           out.byte_offsets.size() == n && out.word_ids.size() == n,
                       "TokenizedText vectors of different lengths");
  int64_t previous_word = 0;
  for (size_t i = 0; i < n; ++i) {
    const Offset& span = out.offsets[i];
    ATTNSCOPE_FUZZ_CHECK(
        0 <= span.start && span.start <= span.end && span.end <= decoded.size(),
        absl::StrCat("token ", i, " offsets [", span.start, ", ", span.end,
                     "): expected inside the text's ", decoded.size(), " code points"));
    const Offset bytes = {decoded.ByteOffset(span.start), decoded.ByteOffset(span.end)};
    ATTNSCOPE_FUZZ_CHECK(out.byte_offsets[i] == bytes,
                         absl::StrCat("token ", i, " byte offsets [", out.byte_offsets[i].start,
                                      ", ", out.byte_offsets[i].end, "): expected [", bytes.start,
                                      ", ", bytes.end, "), the bytes of its code-point span"));
    ATTNSCOPE_FUZZ_CHECK(0 <= out.ids[i] && out.ids[i] < tokenizer.vocab_size(),
                         absl::StrCat("token ", i, " id ", out.ids[i], ": expected in [0, ",
                                      tokenizer.vocab_size(), ")"));
    ATTNSCOPE_FUZZ_CHECK(IsUtf8(out.tokens[i]), absl::StrCat("token ", i, ": expected UTF-8"));
    if (tokens_are_vocabulary) {
      ATTNSCOPE_FUZZ_CHECK(
          out.tokens[i] == tokenizer.IdToToken(out.ids[i]),
          absl::StrCat("token ", i, " '", out.tokens[i], "': expected '",
                       tokenizer.IdToToken(out.ids[i]), "', the token of id ", out.ids[i]));
    }
    ATTNSCOPE_FUZZ_CHECK(out.word_ids[i] >= previous_word,
                         absl::StrCat("token ", i, " word id ", out.word_ids[i],
                                      ": expected at least ", previous_word, ", the word before"));
    previous_word = out.word_ids[i];
  }
}

// The promises of an Encode / EncodePair result; `texts` are the code-point counts of the texts.
void CheckEncoding(const Tokenizer& tokenizer, const Encoding& encoding,
                   const EncodeOptions& options, const int64_t texts[2]) {
  const size_t n = encoding.input_ids.size();
  ATTNSCOPE_FUZZ_CHECK(encoding.tokens.size() == n && encoding.token_type_ids.size() == n &&
                           encoding.attention_mask.size() == n &&
                           encoding.special_tokens_mask.size() == n &&
                           encoding.offsets.size() == n && encoding.byte_offsets.size() == n &&
                           encoding.word_ids.size() == n && encoding.sequence_ids.size() == n,
                       "Encoding vectors of different lengths");
  ATTNSCOPE_FUZZ_CHECK(
      static_cast<int64_t>(n) >= options.pad_to,
      absl::StrCat("encoding of ", n, " positions: expected at least pad_to ", options.pad_to));
  if (options.truncation != Truncation::kNone) {
    const int64_t budget =
        options.max_length > 0 ? options.max_length : tokenizer.model_max_length();
    ATTNSCOPE_FUZZ_CHECK(encoding.num_real_tokens() <= budget,
                         absl::StrCat("truncated encoding of ", encoding.num_real_tokens(),
                                      " tokens: expected at most max_length ", budget));
  }
  bool padding = false;
  for (size_t i = 0; i < n; ++i) {
    const int64_t sequence = encoding.sequence_ids[i];
    ATTNSCOPE_FUZZ_CHECK(
        sequence >= -1 && sequence <= 1,
        absl::StrCat("position ", i, " sequence id ", sequence, ": expected -1, 0 or 1"));
    ATTNSCOPE_FUZZ_CHECK(encoding.attention_mask[i] == 0 || encoding.attention_mask[i] == 1,
                         absl::StrCat("position ", i, ": expected an attention mask of 0 or 1"));
    ATTNSCOPE_FUZZ_CHECK(!padding || encoding.attention_mask[i] == 0,
                         absl::StrCat("position ", i, ": expected padding only at the end"));
    padding = encoding.attention_mask[i] == 0;
    ATTNSCOPE_FUZZ_CHECK((encoding.special_tokens_mask[i] == 1) == (sequence == -1),
                         absl::StrCat("position ", i,
                                      ": expected the special-tokens mask where, and only "
                                      "where, the sequence id is -1"));
    if (sequence >= 0) {
      const Offset& span = encoding.offsets[i];
      ATTNSCOPE_FUZZ_CHECK(span.end <= texts[sequence],
                           absl::StrCat("position ", i, " offsets [", span.start, ", ", span.end,
                                        "): expected inside text ", sequence, "'s ",
                                        texts[sequence], " code points"));
    }
  }
}

// The single-text and pair calls of one input, with options that vary with its length.
void CheckEncode(const Tokenizer& tokenizer, std::string_view first,
                 std::optional<std::string_view> second, size_t input_size) {
  static constexpr Truncation kStrategies[] = {Truncation::kNone, Truncation::kLongestFirst,
                                               Truncation::kOnlyFirst, Truncation::kOnlySecond};
  EncodeOptions options;
  options.truncation = kStrategies[input_size % 4];
  options.max_length = input_size % 3 == 0 ? 0 : static_cast<int64_t>(input_size % 29);
  options.pad_to = input_size % 7 == 0 ? static_cast<int64_t>(input_size % 40) : 0;
  options.add_special_tokens = input_size % 5 != 0;
  auto first_decoded = unicode::DecodeUtf8(first);
  auto second_decoded = unicode::DecodeUtf8(second.value_or(""));
  if (!first_decoded.ok() || !second_decoded.ok()) return;
  const int64_t texts[2] = {first_decoded->size(), second_decoded->size()};
  const absl::StatusOr<Encoding> encoding = second.has_value()
                                                ? tokenizer.EncodePair(first, *second, options)
                                                : tokenizer.Encode(first, options);
  if (!encoding.ok()) {
    // Only budgets that cannot hold the texts fail, never valid UTF-8 as such.
    ATTNSCOPE_FUZZ_CHECK(encoding.status().code() == absl::StatusCode::kInvalidArgument &&
                             options.truncation != Truncation::kNone,
                         absl::StrCat("Encode: unexpected error ", encoding.status().ToString()));
    return;
  }
  CheckEncoding(tokenizer, *encoding, options, texts);
  for (const bool skip : {false, true}) {
    ATTNSCOPE_FUZZ_CHECK(IsUtf8(tokenizer.Decode(encoding->input_ids, skip)),
                         "Decode: expected UTF-8 text");
  }
}

}  // namespace

void ExerciseTokenizer(const Tokenizer& tokenizer, std::string_view input,
                       bool tokens_are_vocabulary) {
  const absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(input);
  const absl::StatusOr<TokenizedText> tokenized = tokenizer.Tokenize(input);
  if (!decoded.ok()) {
    ATTNSCOPE_FUZZ_CHECK(
        !tokenized.ok() && tokenized.status().code() == absl::StatusCode::kInvalidArgument,
        "Tokenize: expected InvalidArgument for invalid UTF-8");
    return;
  }
  ATTNSCOPE_FUZZ_CHECK(tokenized.ok(), absl::StrCat("Tokenize: unexpected error on UTF-8 text: ",
                                                    tokenized.status().ToString()));
  CheckTokenized(tokenizer, *decoded, *tokenized, tokens_are_vocabulary);

  const size_t nul = input.find('\0');
  if (nul == std::string_view::npos) {
    CheckEncode(tokenizer, input, std::nullopt, input.size());
  } else {
    CheckEncode(tokenizer, input.substr(0, nul), input.substr(nul + 1), input.size());
  }
}

}  // namespace attnscope::fuzz
