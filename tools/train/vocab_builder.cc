#include "tools/train/vocab_builder.h"

#include <algorithm>
#include <queue>
#include <set>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode.h"

namespace attnscope::train {
namespace {

// WordPieceOptions::max_input_chars_per_word: longer words are one [UNK] in the engine.
constexpr size_t kMaxWordChars = 100;
constexpr char kContinuation[] = "##";

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

// A merge candidate in the priority queue; stale entries (whose count changed since) are skipped
// when popped.
struct Candidate {
  int64_t count;
  std::string token;  // the merged piece
  std::string left;   // the left piece, a tie-breaker for two pairs making the same piece
  int32_t a;
  int32_t b;
};

struct CandidateOrder {
  // std::priority_queue pops the largest: the highest count, then the smallest strings.
  bool operator()(const Candidate& x, const Candidate& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.token != y.token) return x.token > y.token;
    return x.left > y.left;
  }
};

class Symbols {
 public:
  int32_t Intern(const std::string& token) {
    auto [it, inserted] = ids_.try_emplace(token, static_cast<int32_t>(tokens_.size()));
    if (inserted) tokens_.push_back(token);
    return it->second;
  }
  const std::string& Token(int32_t id) const { return tokens_[id]; }
  // The piece a pair merges into: the right piece is always a continuation ("##...").
  std::string Merged(int32_t a, int32_t b) const {
    return tokens_[a] + tokens_[b].substr(sizeof(kContinuation) - 1);
  }

 private:
  absl::flat_hash_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
};

}  // namespace

const std::vector<std::string>& SpecialTokens() {
  static const auto* const kTokens =
      new std::vector<std::string>{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  return *kTokens;
}

absl::StatusOr<WordCounter> WordCounter::Create(const WordPieceOptions& normalization) {
  ATTNSCOPE_ASSIGN_OR_RETURN(std::unique_ptr<WordPieceTokenizer> splitter,
                             WordPieceTokenizer::Create(SpecialTokens(), normalization));
  return WordCounter(std::move(splitter), normalization);
}

absl::Status WordCounter::Add(std::string_view text) {
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText words, splitter_->Tokenize(text));
  for (const Offset& span : words.byte_offsets) {
    ATTNSCOPE_ASSIGN_OR_RETURN(
        std::string word,
        NormalizeWord(text.substr(span.start, span.end - span.start), normalization_));
    if (!word.empty()) ++counts_[word];
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> NormalizeWord(std::string_view word,
                                          const WordPieceOptions& normalization) {
  ATTNSCOPE_ASSIGN_OR_RETURN(unicode::DecodedText decoded, unicode::DecodeUtf8(word));
  std::vector<char32_t> chars = std::move(decoded.code_points);
  if (normalization.nfc) {
    std::vector<char32_t> composed;
    for (const unicode::ComposedChar& ch : unicode::Nfc(chars)) composed.push_back(ch.c);
    chars = std::move(composed);
  }
  if (normalization.strip_accents.value_or(normalization.lowercase)) {
    std::vector<char32_t> stripped;
    for (const unicode::SourcedChar& ch : unicode::Nfd(chars)) {
      if (!unicode::IsNonspacingMark(ch.c)) stripped.push_back(ch.c);
    }
    chars = std::move(stripped);
  }
  std::string out;
  for (char32_t ch : chars) {
    if (!normalization.lowercase) {
      unicode::AppendUtf8(ch, &out);
      continue;
    }
    for (char32_t lower : unicode::ToLower(ch)) unicode::AppendUtf8(lower, &out);
  }
  return out;
}

std::vector<std::string> BuildWordPieceVocab(
    const absl::flat_hash_map<std::string, int64_t>& word_counts, int64_t vocab_size,
    const std::vector<std::string>& required_tokens) {
  // Sorted input: the merges must not depend on the hash map's per-process iteration order.
  std::vector<std::pair<std::string, int64_t>> sorted(word_counts.begin(), word_counts.end());
  std::sort(sorted.begin(), sorted.end());

  Symbols symbols;
  std::vector<Word> words;
  std::set<char32_t> alphabet;
  for (const auto& [text, count] : sorted) {
    absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(text);
    if (!decoded.ok() || decoded->code_points.size() > kMaxWordChars) continue;
    Word word{{}, count};
    for (size_t i = 0; i < decoded->code_points.size(); ++i) {
      const char32_t c = decoded->code_points[i];
      alphabet.insert(c);
      std::string token = i == 0 ? "" : kContinuation;
      unicode::AppendUtf8(c, &token);
      word.symbols.push_back(symbols.Intern(token));
    }
    words.push_back(std::move(word));
  }

  std::vector<std::string> vocab = SpecialTokens();
  absl::flat_hash_set<std::string> in_vocab(vocab.begin(), vocab.end());
  auto add = [&](const std::string& token) {
    if (in_vocab.insert(token).second) vocab.push_back(token);
  };
  // Every character seen, in both positions, so that no seen character is ever unknown.
  for (char32_t c : alphabet) {
    std::string token;
    unicode::AppendUtf8(c, &token);
    add(token);
    add(kContinuation + token);
  }
  for (const std::string& token : required_tokens) add(token);

  absl::flat_hash_map<uint64_t, int64_t> pair_counts;
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> pair_words;
  for (size_t w = 0; w < words.size(); ++w) {
    const std::vector<int32_t>& s = words[w].symbols;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t key = PairKey(s[i], s[i + 1]);
      pair_counts[key] += words[w].count;
      pair_words[key].push_back(static_cast<int32_t>(w));
    }
  }
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue;
  auto push = [&](uint64_t key, int64_t count) {
    const auto a = static_cast<int32_t>(key >> 32);
    const auto b = static_cast<int32_t>(key & 0xffffffffu);
    queue.push({count, symbols.Merged(a, b), symbols.Token(a), a, b});
  };
  for (const auto& [key, count] : pair_counts) push(key, count);

  while (static_cast<int64_t>(vocab.size()) < vocab_size && !queue.empty()) {
    const Candidate best = queue.top();
    queue.pop();
    const uint64_t key = PairKey(best.a, best.b);
    auto found = pair_counts.find(key);
    if (found == pair_counts.end() || found->second != best.count) continue;  // stale
    // A pair seen once is noise, not a subword.
    if (best.count < 2) break;
    const int32_t merged = symbols.Intern(best.token);
    add(best.token);

    std::vector<int32_t> affected = std::move(pair_words[key]);
    pair_words.erase(key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    absl::flat_hash_set<uint64_t> touched;
    for (int32_t w : affected) {
      std::vector<int32_t>& s = words[w].symbols;
      const int64_t count = words[w].count;
      bool has_pair = false;
      for (size_t i = 0; i + 1 < s.size() && !has_pair; ++i) {
        has_pair = s[i] == best.a && s[i + 1] == best.b;
      }
      if (!has_pair) continue;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t old_key = PairKey(s[i], s[i + 1]);
        pair_counts[old_key] -= count;
        touched.insert(old_key);
      }
      std::vector<int32_t> next;
      next.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == best.a && s[i + 1] == best.b) {
          next.push_back(merged);
          ++i;
        } else {
          next.push_back(s[i]);
        }
      }
      s = std::move(next);
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t new_key = PairKey(s[i], s[i + 1]);
        pair_counts[new_key] += count;
        pair_words[new_key].push_back(w);
        touched.insert(new_key);
      }
    }
    for (uint64_t touched_key : touched) {
      const int64_t count = pair_counts[touched_key];
      if (count > 0) {
        push(touched_key, count);
      } else {
        pair_counts.erase(touched_key);
      }
    }
  }
  return vocab;
}

}  // namespace attnscope::train
