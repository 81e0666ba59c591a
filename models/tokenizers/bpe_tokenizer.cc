#include "models/tokenizers/bpe_tokenizer.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace attnscope {
namespace {

using json = nlohmann::json;

absl::Status VocabError(const std::string& path, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("vocab.json '", path, "': ", message));
}

absl::Status MergesError(const std::string& path, size_t line, const std::string& message) {
  return absl::InvalidArgumentError(
      absl::StrCat("merges.txt '", path, "': line ", line, ": ", message));
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
    return VocabError(vocab_path,
                      absl::StrCat("expected a non-empty JSON object of token -> id, got ",
                                   DescribeJsonText(vocab_contents)));
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
  if (absl::StartsWith(merges_contents, kByteOrderMark)) {
    return MergesError(merges_path, 1,
                       "expected text without a byte-order mark, got one (U+FEFF, an editor's "
                       "mark, read as part of the first token); save the file as UTF-8 without it");
  }
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

  Pipeline pipeline;
  for (const std::string* name :
       {&options.bos_token, &options.eos_token, &options.unk_token, &options.sep_token,
        &options.pad_token, &options.cls_token, &options.mask_token}) {
    if (name->empty()) continue;
    auto [it, inserted] = token_to_id.try_emplace(*name, static_cast<int64_t>(id_to_token.size()));
    if (inserted) id_to_token.push_back(*name);
    const bool known = std::any_of(pipeline.added_tokens.begin(), pipeline.added_tokens.end(),
                                   [&](const AddedToken& added) { return added.content == *name; });
    if (known) continue;
    AddedToken added;
    added.content = *name;
    added.id = it->second;
    added.special = true;
    added.lstrip = name == &options.mask_token;
    pipeline.added_tokens.push_back(std::move(added));
  }
  pipeline.pre_tokenizer.push_back(PreTokenizerStep{});  // ByteLevel with GPT-2's pattern.
  pipeline.trim_offsets = options.trim_offsets;
  Model model;
  model.unk_id = token_to_id.at(options.unk_token);

  using Kind = TemplatePiece::Kind;
  const TemplatePiece cls{Kind::kSpecial, token_to_id.at(options.cls_token), options.cls_token, 0};
  const TemplatePiece sep{Kind::kSpecial, token_to_id.at(options.sep_token), options.sep_token, 0};
  PostProcessorTemplate post_processor;
  post_processor.single = {cls, {Kind::kFirst, 0, "", 0}, sep};
  post_processor.pair = {cls, {Kind::kFirst, 0, "", 0}, sep, sep, {Kind::kSecond, 0, "", 0}, sep};
  // Like transformers, id 0 pads when no pad token is configured.
  const int64_t pad_id = options.pad_token.empty() ? 0 : token_to_id.at(options.pad_token);
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(
      std::move(id_to_token), std::move(token_to_id), std::move(merges), model, std::move(pipeline),
      std::move(post_processor), pad_id, options.model_max_length));
}

BpeTokenizer::BpeTokenizer(std::vector<std::string> id_to_token,
                           absl::flat_hash_map<std::string, int64_t> token_to_id,
                           absl::flat_hash_map<std::pair<int64_t, int64_t>, Merge> merges,
                           Model model, Pipeline pipeline, PostProcessorTemplate post_processor,
                           int64_t pad_token_id, int64_t model_max_length)
    : PipelineTokenizer(std::move(id_to_token), std::move(pipeline), std::move(post_processor),
                        pad_token_id, model_max_length),
      token_to_id_(std::move(token_to_id)),
      merges_(std::move(merges)),
      model_(model) {
  for (int b = 0; b < 256; ++b) {
    std::string token;
    if (model_.byte_level) {
      unicode::AppendUtf8(ByteChars()[b], &token);
    } else {
      token = absl::StrFormat("<0x%02X>", b);  // SentencePiece's byte pieces
    }
    const auto it = token_to_id_.find(token);
    byte_ids_[b] = it != token_to_id_.end() ? it->second : model_.byte_level ? model_.unk_id : -1;
  }
}

TokenizerNormalization BpeTokenizer::normalization() const {
  TokenizerNormalization normalization = NormalizerFlags();
  const std::string changes = std::move(normalization.description);
  if (!model_.byte_level) {
    const bool replaces = std::any_of(pipeline().normalizer.begin(), pipeline().normalizer.end(),
                                      [](const NormalizerStep& step) {
                                        return step.kind == NormalizerStep::Kind::kReplace ||
                                               step.kind == NormalizerStep::Kind::kPrepend;
                                      });
    normalization.description = absl::StrCat(
        changes.empty() ? "text kept as written" : changes + ", otherwise kept as written",
        replaces ? " apart from the normalizer's replacements (a space becomes '▁', shown at the "
                   "start of the word after it)"
                 : "",
        "; a character the vocabulary lacks becomes ",
        model_.byte_fallback ? "its UTF-8 bytes as <0xXX> tokens"
        : model_.unk_id >= 0 ? "the unknown token"
                             : "no token");
    return normalization;
  }
  if (changes.empty()) {
    normalization.description =
        "text kept as written (no lower-casing, no Unicode normalization: 'Tôi' typed with a "
        "combining accent gives other tokens than precomposed); a space belongs to the word after "
        "it, shown as 'Ġ' in tokens";
  } else if (changes == "Unicode NFC") {
    normalization.description =
        "Unicode NFC (a letter typed with combining accents is composed first, so 'Tôi' gives "
        "the same tokens either way), no lower-casing; a space belongs to the word after it, "
        "shown as 'Ġ' in tokens";
  } else {
    normalization.description =
        absl::StrCat(changes, "; a space belongs to the word after it, shown as 'Ġ' in tokens");
  }
  return normalization;
}

void BpeTokenizer::TokenizeWord(const std::vector<NormChar>& chars, int64_t word_index,
                                TokenizedText* out,
                                std::vector<std::pair<int32_t, int32_t>>* edges) const {
  // `tokenizers` Word: a doubly linked list of symbols, each the span of original code points its
  // bytes are aligned with; merged-away symbols are marked by an id of -1.
  struct Symbol {
    int64_t id;
    int64_t start;
    int64_t end;
    int64_t prev;
    int64_t next;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(chars.size() * 2);
  std::string bytes;
  // The piece as the vocabulary spells it, for ignore_merges.
  std::string word;
  bool previous_unk = false;
  const bool affixed =
      !model_.continuing_subword_prefix.empty() || !model_.end_of_word_suffix.empty();
  // The symbol as BPE::merge_word looks it up: the prefix unless it is the piece's first, the
  // suffix when it is its last.
  const auto with_affixes = [&](const std::string& symbol, bool first, bool last) {
    return absl::StrCat(first ? "" : model_.continuing_subword_prefix, symbol,
                        last ? model_.end_of_word_suffix : "");
  };
  // Byte-level: the symbol bytes, for the lookup with affixes once the last one is known.
  std::vector<unsigned char> symbol_bytes;
  for (size_t k = 0; k < chars.size(); ++k) {
    const NormChar& c = chars[k];
    bytes.clear();
    unicode::AppendUtf8(c.c, &bytes);
    if (model_.byte_level) {
      for (unsigned char byte : bytes) {
        symbols.push_back({byte_ids_[byte], c.start, c.end, 0, 0});
        unicode::AppendUtf8(ByteChars()[byte], &word);
        symbol_bytes.push_back(byte);
      }
      continue;
    }
    // BPE::merge_word over characters: the character's token, else its bytes' tokens (byte
    // fallback), else unk (one for a run of them with fuse_unk), else nothing.
    word.append(bytes);
    const auto it = token_to_id_.find(
        affixed ? with_affixes(bytes, /*first=*/k == 0, /*last=*/k + 1 == chars.size()) : bytes);
    if (it != token_to_id_.end()) {
      symbols.push_back({it->second, c.start, c.end, 0, 0});
      previous_unk = false;
      continue;
    }
    if (model_.byte_fallback && std::all_of(bytes.begin(), bytes.end(), [&](char byte) {
          return byte_ids_[static_cast<unsigned char>(byte)] >= 0;
        })) {
      for (unsigned char byte : bytes) symbols.push_back({byte_ids_[byte], c.start, c.end, 0, 0});
      previous_unk = false;
      continue;
    }
    if (model_.unk_id < 0) continue;
    if (previous_unk && model_.fuse_unk) {
      symbols.back().end = std::max(symbols.back().end, c.end);
    } else {
      symbols.push_back({model_.unk_id, c.start, c.end, 0, 0});
    }
    previous_unk = true;
  }
  if (chars.empty()) return;
  if (model_.byte_level && affixed) {
    std::string symbol;
    for (size_t k = 0; k < symbols.size(); ++k) {
      symbol.clear();
      unicode::AppendUtf8(ByteChars()[symbol_bytes[k]], &symbol);
      const auto it = token_to_id_.find(
          with_affixes(symbol, /*first=*/k == 0, /*last=*/k + 1 == symbols.size()));
      symbols[k].id = it != token_to_id_.end() ? it->second : model_.unk_id;
    }
  }
  const auto emit = [&](int64_t id, int64_t start, int64_t end) {
    Emit(id, id_to_token()[id], start, end, word_index, out, edges);
  };
  if (model_.ignore_merges) {
    // BPE::tokenize_with_cache: the whole piece as one token when the model has it.
    const auto it = token_to_id_.find(word);
    if (it != token_to_id_.end()) {
      int64_t word_start = chars.front().start;
      int64_t word_end = chars.front().end;
      for (const NormChar& c : chars) {
        word_start = std::min(word_start, c.start);
        word_end = std::max(word_end, c.end);
      }
      emit(it->second, word_start, word_end);
      return;
    }
  }
  // A byte the vocabulary has no character for (and no unk) is dropped.
  symbols.erase(std::remove_if(symbols.begin(), symbols.end(),
                               [](const Symbol& symbol) { return symbol.id < 0; }),
                symbols.end());
  if (symbols.empty()) return;
  for (size_t k = 0; k < symbols.size(); ++k) {
    symbols[k].prev = static_cast<int64_t>(k) - 1;
    symbols[k].next = static_cast<int64_t>(k) + 1;
  }
  symbols.back().next = -1;

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
    left.start = std::min(left.start, right.start);
    left.end = std::max(left.end, right.end);
    left.next = right.next;
    right.id = -1;
    if (left.next >= 0) symbols[left.next].prev = top.position;
    if (left.prev >= 0) push(left.prev);
    push(top.position);
  }
  for (const Symbol& symbol : symbols) {
    if (symbol.id >= 0) emit(symbol.id, symbol.start, symbol.end);
  }
}

}  // namespace attnscope
