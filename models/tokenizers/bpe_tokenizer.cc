#include "models/tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "utf8proc.h"

namespace attnscope {
namespace {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode: the printable bytes of Latin-1 stand for themselves, the other 68
// (controls, space, DEL, NBSP, soft hyphen, ...) map in byte order to U+0100 and up, so that every
// byte is a visible character BPE can merge.
constexpr bool IsPrintableByte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

std::array<char32_t, 256> MakeByteChars() {
  std::array<char32_t, 256> chars{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) chars[b] = IsPrintableByte(b) ? b : next++;
  return chars;
}

const std::array<char32_t, 256>& ByteChars() {
  static const std::array<char32_t, 256> chars = MakeByteChars();
  return chars;
}

// The byte a character of the table stands for, or -1.
int ByteOfChar(char32_t c) {
  static const std::array<int16_t, 0x144> bytes = [] {
    std::array<int16_t, 0x144> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[ByteChars()[b]] = static_cast<int16_t>(b);
    return table;
  }();
  return c < bytes.size() ? bytes[c] : -1;
}

constexpr char32_t kSpaceChar = 0x120;  // "Ġ", the table's character for ' '.

bool IsLetter(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return false;
  }
}

bool IsNumber(char32_t c) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// [^\s\p{L}\p{N}]
bool IsOtherClass(char32_t c) { return !unicode::IsWhiteSpace(c) && !IsLetter(c) && !IsNumber(c); }

// The end of the match of GPT-2's pattern at `begin` (< `end`) of `cps`, alternatives tried in the
// pattern's order as a backtracking engine (Oniguruma in `tokenizers`) tries them:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
int64_t MatchEnd(const std::vector<char32_t>& cps, int64_t begin, int64_t end) {
  if (cps[begin] == '\'') {
    static constexpr std::u32string_view kContractions[] = {U"s", U"t",  U"re", U"ve",
                                                            U"m", U"ll", U"d"};
    const std::u32string_view rest(cps.data() + begin + 1, end - begin - 1);
    for (std::u32string_view suffix : kContractions) {
      if (rest.substr(0, suffix.size()) == suffix) return begin + 1 + suffix.size();
    }
  }
  for (bool (*in_class)(char32_t) : {IsLetter, IsNumber, IsOtherClass}) {
    int64_t i = begin + (cps[begin] == ' ' ? 1 : 0);
    if (i >= end || !in_class(cps[i])) continue;
    while (i < end && in_class(cps[i])) ++i;
    return i;
  }
  int64_t run_end = begin;
  while (run_end < end && unicode::IsWhiteSpace(cps[run_end])) ++run_end;
  // \s+(?!\S): a run followed by a non-space gives back its last character, which starts the next
  // word (as its leading space when it is ' '); a run of one cannot, and \s+ takes it alone.
  if (run_end < end && run_end - begin >= 2) return run_end - 1;
  return std::max(run_end, begin + 1);
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

absl::Status VocabError(const std::string& path, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("vocab.json '", path, "': ", message));
}

absl::Status MergesError(const std::string& path, size_t line, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("merges.txt '", path, "': line ", line, ": ", message));
}

// Leading and trailing characters byte_level.rs process_offsets trims: "Ġ" or whitespace.
std::pair<int32_t, int32_t> EdgeSpaces(const std::string& token) {
  absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(token);
  if (!decoded.ok()) return {0, 0};
  const auto is_space = [](char32_t c) { return c == kSpaceChar || unicode::IsWhiteSpace(c); };
  const std::vector<char32_t>& cps = decoded->code_points;
  const int32_t leading =
      static_cast<int32_t>(std::find_if_not(cps.begin(), cps.end(), is_space) - cps.begin());
  const int32_t trailing =
      static_cast<int32_t>(std::find_if_not(cps.rbegin(), cps.rend(), is_space) - cps.rbegin());
  return {leading, trailing};
}

}  // namespace

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromFiles(
    const std::string& vocab_path, const std::string& merges_path, BpeOptions options) {
  for (const auto& [name, value] :
       {std::pair<const char*, const std::string*>{"cls_token", &options.cls_token},
        {"sep_token", &options.sep_token},
        {"unk_token", &options.unk_token}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "byte-level BPE tokenizer '", vocab_path, "': ", name,
          ": expected a token (RobertaProcessing needs cls, sep and unk), got an empty name"));
    }
  }

  ATTNSCOPE_ASSIGN_OR_RETURN(std::string vocab_contents,
                             ReadFileToString(vocab_path, kMaxTokenizerFileBytes));
  const json vocab = json::parse(vocab_contents, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object() || vocab.empty()) {
    return VocabError(
        vocab_path,
        absl::StrCat("expected a non-empty JSON object of token -> id, got ",
                     vocab.is_discarded() ? "unparsable text" : vocab.dump().substr(0, 100)));
  }
  ATTNSCOPE_RETURN_IF_ERROR(CheckJsonDepth(vocab, absl::StrCat("vocab.json '", vocab_path, "'")));
  std::vector<std::string> id_to_token(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  absl::flat_hash_map<std::string, int64_t> token_to_id;
  token_to_id.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= static_cast<int64_t>(vocab.size()) || seen[id.get<int64_t>()]) {
      return VocabError(vocab_path,
                        absl::StrCat("token '", token, "': expected a distinct id in [0, ",
                                     vocab.size(), "), got ", id.dump()));
    }
    seen[id.get<int64_t>()] = true;
    id_to_token[id.get<int64_t>()] = token;
    token_to_id[token] = id.get<int64_t>();
  }

  ATTNSCOPE_ASSIGN_OR_RETURN(std::string merges_contents,
                             ReadFileToString(merges_path, kMaxTokenizerFileBytes));
  std::vector<absl::string_view> lines = absl::StrSplit(merges_contents, '\n');
  // The newline that ends the last line does not start another.
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges;
  merges.reserve(lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (i == 0 && line.substr(0, 8) == "#version") continue;
    const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (parts.size() != 2) {
      return MergesError(merges_path, i + 1,
                         absl::StrCat("expected two tokens separated by a space, got '",
                                      line.substr(0, 200), "'"));
    }
    int64_t ids[3];
    const std::string merged = absl::StrCat(parts[0], parts[1]);
    const absl::string_view names[3] = {parts[0], parts[1], merged};
    for (int k = 0; k < 3; ++k) {
      const auto it = token_to_id.find(names[k]);
      if (it == token_to_id.end()) {
        return MergesError(merges_path, i + 1,
                           absl::StrCat(k == 2 ? "merged token '" : "token '", names[k],
                                        "': expected an entry in vocab.json, got none"));
      }
      ids[k] = it->second;
    }
    merges.try_emplace({ids[0], ids[1]}, Merge{static_cast<int64_t>(merges.size()), ids[2]});
  }

  std::vector<SpecialToken> special_tokens;
  for (const std::string* name :
       {&options.bos_token, &options.eos_token, &options.unk_token, &options.sep_token,
        &options.pad_token, &options.cls_token, &options.mask_token}) {
    if (name->empty()) continue;
    auto [it, inserted] = token_to_id.try_emplace(*name, static_cast<int64_t>(id_to_token.size()));
    if (inserted) id_to_token.push_back(*name);
    const bool known = std::any_of(special_tokens.begin(), special_tokens.end(),
                                   [&](const SpecialToken& s) { return s.content == *name; });
    if (!known) special_tokens.push_back({*name, it->second, name == &options.mask_token});
  }
  // Longest first, so that at one position the longest special token wins (`tokenizers` matches
  // them leftmost-longest).
  std::stable_sort(special_tokens.begin(), special_tokens.end(),
                   [](const SpecialToken& a, const SpecialToken& b) {
                     return a.content.size() > b.content.size();
                   });

  using Kind = TemplatePiece::Kind;
  const TemplatePiece cls{Kind::kSpecial, token_to_id.at(options.cls_token), options.cls_token, 0};
  const TemplatePiece sep{Kind::kSpecial, token_to_id.at(options.sep_token), options.sep_token, 0};
  PostProcessorTemplate post_processor;
  post_processor.single = {cls, {Kind::kFirst, 0, "", 0}, sep};
  post_processor.pair = {cls, {Kind::kFirst, 0, "", 0}, sep, sep, {Kind::kSecond, 0, "", 0}, sep};
  // Like transformers, id 0 pads when no pad token is configured.
  const int64_t pad_id = options.pad_token.empty() ? 0 : token_to_id.at(options.pad_token);
  const int64_t unk_id = token_to_id.at(options.unk_token);
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(
      std::move(id_to_token), std::move(token_to_id), std::move(merges), std::move(special_tokens),
      std::move(options), std::move(post_processor), pad_id, unk_id));
}

BpeTokenizer::BpeTokenizer(std::vector<std::string> id_to_token,
                           absl::flat_hash_map<std::string, int64_t> token_to_id,
                           absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges,
                           std::vector<SpecialToken> special_tokens, BpeOptions options,
                           PostProcessorTemplate post_processor, int64_t pad_token_id,
                           int64_t unk_id)
    : Tokenizer(std::move(post_processor), pad_token_id, options.model_max_length),
      id_to_token_(std::move(id_to_token)),
      token_to_id_(std::move(token_to_id)),
      merges_(std::move(merges)),
      special_tokens_(std::move(special_tokens)),
      is_special_id_(id_to_token_.size(), false),
      options_(std::move(options)),
      unk_id_(unk_id) {
  for (const SpecialToken& token : special_tokens_) is_special_id_[token.id] = true;
  edge_spaces_.reserve(id_to_token_.size());
  for (const std::string& token : id_to_token_) edge_spaces_.push_back(EdgeSpaces(token));
  for (int b = 0; b < 256; ++b) {
    std::string character;
    unicode::AppendUtf8(ByteChars()[b], &character);
    const auto it = token_to_id_.find(character);
    byte_ids_[b] = it == token_to_id_.end() ? unk_id_ : it->second;
  }
}

TokenizerNormalization BpeTokenizer::normalization() const {
  TokenizerNormalization normalization;
  normalization.description =
      "text kept as written (no lower-casing, no Unicode normalization: 'Tôi' typed with a "
      "combining accent gives other tokens than precomposed); a space belongs to the word after "
      "it, shown as 'Ġ' in tokens";
  return normalization;
}

std::string BpeTokenizer::IdToToken(int64_t id) const {
  if (id < 0 || id >= vocab_size()) return "";
  return id_to_token_[id];
}

absl::StatusOr<TokenizedText> BpeTokenizer::Tokenize(std::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(text));
  TokenizedText out;
  int64_t word_index = 0;
  int64_t segment_start = 0;
  int64_t i = 0;
  while (i < decoded.size()) {
    const std::string_view rest = text.substr(decoded.ByteOffset(i));
    const auto match = std::find_if(
        special_tokens_.begin(), special_tokens_.end(), [&](const SpecialToken& token) {
          return rest.compare(0, token.content.size(), token.content) == 0;
        });
    if (match == special_tokens_.end()) {
      ++i;
      continue;
    }
    int64_t start = i;
    // lstrip (added_vocabulary.rs): whitespace before the token, back to the previous match.
    if (match->lstrip) {
      while (start > segment_start && unicode::IsWhiteSpace(decoded.code_points[start - 1])) {
        --start;
      }
    }
    TokenizeSegment(text, decoded, segment_start, start, &word_index, &out);
    const int64_t end = decoded.CodePointsBeforeByte(decoded.ByteOffset(i) + match->content.size());
    // The token is the text matched, stripped whitespace included (`tokenizers` shows " <mask>"),
    // and trim_offsets cuts that whitespace from its offsets.
    std::string matched(text.substr(decoded.ByteOffset(start),
                                    decoded.ByteOffset(end) - decoded.ByteOffset(start)));
    const std::pair<int32_t, int32_t> edges = EdgeSpaces(matched);
    Emit(decoded, match->id, std::move(matched), edges, start, end, word_index++, &out);
    i = end;
    segment_start = end;
  }
  TokenizeSegment(text, decoded, segment_start, decoded.size(), &word_index, &out);
  return out;
}

void BpeTokenizer::TokenizeSegment(std::string_view text, const unicode::DecodedText& decoded,
                                   int64_t begin, int64_t end, int64_t* word_index,
                                   TokenizedText* out) const {
  int64_t start = begin;
  while (start < end) {
    const int64_t stop = MatchEnd(decoded.code_points, start, end);
    TokenizeWord(text, decoded, start, stop, (*word_index)++, out);
    start = stop;
  }
}

void BpeTokenizer::TokenizeWord(std::string_view text, const unicode::DecodedText& decoded,
                                int64_t begin, int64_t end, int64_t word_index,
                                TokenizedText* out) const {
  // `tokenizers` Word: a doubly linked list of symbols, each the span of code points its bytes came
  // from; merged-away symbols are marked by an id of -1.
  struct Symbol {
    int64_t id;
    int64_t start;
    int64_t end;
    int64_t prev;
    int64_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(decoded.ByteOffset(end) - decoded.ByteOffset(begin));
  for (int64_t k = begin; k < end; ++k) {
    for (int64_t b = decoded.ByteOffset(k); b < decoded.ByteOffset(k + 1); ++b) {
      const int64_t index = static_cast<int64_t>(symbols.size());
      const unsigned char byte = static_cast<unsigned char>(text[b]);
      symbols.push_back({byte_ids_[byte], k, k + 1, index - 1, index + 1});
    }
  }
  if (!symbols.empty()) symbols.back().next = -1;

  // Lowest rank first, then leftmost.
  struct Candidate {
    int64_t rank;
    int64_t position;
    int64_t id;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push = [&](int64_t left) {
    const int64_t right = symbols[left].next;
    if (right < 0) return;
    const auto it = merges_.find(std::make_pair(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.id});
  };
  for (int64_t k = 0; k + 1 < static_cast<int64_t>(symbols.size()); ++k) push(k);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.position];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // An entry is stale when either side has merged since it was queued.
    const auto it = merges_.find(std::make_pair(left.id, right.id));
    if (it == merges_.end() || it->second.id != top.id) continue;
    left.id = top.id;
    left.end = right.end;
    left.next = right.next;
    right.id = -1;
    if (left.next >= 0) symbols[left.next].prev = top.position;
    if (left.prev >= 0) push(left.prev);
    push(top.position);
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.id < 0) continue;
    Emit(decoded, symbol.id, id_to_token_[symbol.id], edge_spaces_[symbol.id], symbol.start,
         symbol.end, word_index, out);
  }
}

void BpeTokenizer::Emit(const unicode::DecodedText& decoded, int64_t id, std::string token,
                        std::pair<int32_t, int32_t> edge_spaces, int64_t start, int64_t end,
                        int64_t word_index, TokenizedText* out) const {
  if (options_.trim_offsets) {
    const auto [leading, trailing] = edge_spaces;
    if (leading > 0) start = std::min(start + leading, end);
    if (trailing > 0 && end >= trailing) end = std::max(end - trailing, start);
  }
  out->ids.push_back(id);
  out->tokens.push_back(std::move(token));
  out->offsets.push_back({start, end});
  out->byte_offsets.push_back({decoded.ByteOffset(start), decoded.ByteOffset(end)});
  out->word_ids.push_back(word_index);
}

std::string BpeTokenizer::Decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && is_special_id_[id]) continue;
    const std::string& token = id_to_token_[id];
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
  return Utf8Lossy(bytes);
}

}  // namespace attnscope
