#include "models/engine.h"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/json_util.h"
#include "common/status_macros.h"
#include "models/tokenizers/unicode.h"

namespace attnscope {
namespace {

std::string_view ToStd(absl::string_view text) { return {text.data(), text.size()}; }

// The longest load error: the server prints it as one line on stderr. The loaders bound what they
// quote from files; this is the last guard, so that no file can make the line megabytes long.
constexpr size_t kMaxLoadErrorBytes = 4096;

absl::Status Prefixed(absl::string_view model, const absl::Status& status) {
  return absl::Status(
      status.code(),
      Excerpt(absl::StrCat("model '", model, "': ", status.message()), kMaxLoadErrorBytes));
}

// How many tokens a tokenizer may have past the model's embedding matrix: tokens added to a
// checkpoint's tokenizer that its model never reads (Gemma 3 1B's tokenizer.json has 262,145 for
// a vocab_size of 262,144, <image_soft_token> last). Texts that give one are refused
// (CheckIdsFit); a tokenizer further past the matrix is another checkpoint's.
constexpr int64_t kMaxTokensPastEmbeddings = 256;

// Every id the tokenizer produces for a text must be a row of the model's embedding matrix (an id
// beyond it otherwise made each request that met the token fail, or, for padding, every batched
// request): the model's vocabulary, its padding and its template's special tokens are checked at
// load, and the few added tokens allowed past the matrix in each text (CheckIdsFit).
absl::Status CheckTokenizerFits(const Tokenizer& tokenizer, const ModelConfig& config,
                                const std::string& model_dir) {
  const int64_t rows = config.vocab_size;
  const std::string where = absl::StrCat("tokenizer files in '", model_dir, "'");
  const std::string fix = absl::StrCat(
      "; the tokenizer files must come from the same checkpoint as the weights, whose embedding "
      "matrix has ",
      rows, " rows (config.json 'vocab_size')");
  if (tokenizer.vocab_size() > rows + kMaxTokensPastEmbeddings) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": expected at most ", rows, " tokens (and up to ", kMaxTokensPastEmbeddings,
        " added ones past them), got ", tokenizer.vocab_size(), fix));
  }
  if (tokenizer.pad_token_id() >= rows) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": pad token id: expected below ", rows,
                                                   ", got ", tokenizer.pad_token_id(), fix));
  }
  for (const auto* pieces :
       {&tokenizer.post_processor().single, &tokenizer.post_processor().pair}) {
    for (const TemplatePiece& piece : *pieces) {
      if (piece.kind == TemplatePiece::Kind::kSpecial && (piece.id < 0 || piece.id >= rows)) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": special token '", Excerpt(piece.token),
                         "': expected an id in [0, ", rows, "), got ", piece.id, fix));
      }
    }
  }
  return absl::OkStatus();
}

// The files Checkpoint::Open reads, in its order of preference: model.safetensors, the shards of a
// sharded safetensors checkpoint (every *.safetensors file), or pytorch_model.bin.
std::vector<std::string> WeightFiles(const std::string& model_dir) {
  const std::string single = JoinPath(model_dir, "model.safetensors");
  if (FileExists(single)) return {single};
  std::vector<std::string> shards;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".safetensors") {
      shards.push_back(entry.path().string());
    }
  }
  std::sort(shards.begin(), shards.end());
  if (!shards.empty()) return shards;
  return {JoinPath(model_dir, "pytorch_model.bin")};
}

// `tokenize` on `text`, or on a prefix of it when that already gives more than `max_tokens`
// tokens (TokenizedText::is_prefix).
absl::StatusOr<TokenizedText> TokenizeUpTo(
    absl::string_view text, int64_t max_tokens,
    const std::function<absl::StatusOr<TokenizedText>(std::string_view)>& tokenize) {
  // No encoding keeps more than max_tokens tokens of one text, so a long text is tokenized by
  // growing prefixes until one gives more than that: its first tokens are the text's, and a 4 MB
  // text over the limit costs a few kilobytes of tokenizing. Prefixes start at
  // kPrefixBytesPerToken bytes a token and grow fourfold, so a text of few tokens costs less than
  // two passes. A prefix is cut at an ASCII space or line break where there is one in its last
  // half: no tokenizer here makes a token across one, and a space belongs to the token after it,
  // so the rest of the text cannot change the prefix's tokens.
  //
  // A text may have no such break for kilobytes (Chinese, Japanese and Thai are written without
  // spaces), so there the prefix is cut between two characters instead. That changes only the
  // tokens near the cut: WordPiece's greedy longest match and its [UNK] for words over 100
  // characters, the SentencePiece lattice and BPE's merges reach a few tokens back at most in
  // every vocabulary we know of, so such a prefix counts only when it gives kCutMarginTokens more
  // than are kept.
  //
  // No text is tokenized past kMaxBytesPerToken bytes for each token kept (and the margin): real
  // text has a token every few bytes, while 4 MB of one syllable that Marian's vocabulary lacks is
  // one <unk> that cost SentencePiece 97 CPU-seconds to merge (its time grows with the square of an
  // unknown run). A text that long whose prefix still has too few tokens is refused.
  constexpr size_t kPrefixBytesPerToken = 16;
  constexpr size_t kCutMarginTokens = 256;
  constexpr size_t kMaxBytesPerToken = 32;
  const size_t keep = static_cast<size_t>(max_tokens) + 1;
  const size_t most_bytes = (keep + kCutMarginTokens) * kMaxBytesPerToken;
  for (size_t length = keep * kPrefixBytesPerToken;
       length < text.size() / 2 || text.size() > most_bytes; length *= 4) {
    length = std::min(length, most_bytes);
    size_t cut = text.find_last_of(" \n\r\t", length);
    size_t margin = 0;
    if (cut == absl::string_view::npos || cut < length / 2) {
      cut = length;
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
      margin = kCutMarginTokens;
    }
    ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText prefix, tokenize(ToStd(text.substr(0, cut))));
    if (prefix.size() <= keep + margin) {
      if (length < most_bytes) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "text of ", text.size(), " bytes: expected at least one token per ", kMaxBytesPerToken,
          " bytes in a text over ", most_bytes, " bytes, got ", prefix.size(),
          " tokens in its first ", cut,
          " bytes (a long run that makes few tokens: characters the tokenizer does not know, "
          "letters without a break or one repeated that its merges join, or whitespace, which "
          "makes none); split the text or remove the run"));
    }
    // Invalid UTF-8 past the cut: the whole text's refusal, with its byte offset.
    if (!unicode::CheckUtf8(ToStd(text.substr(cut))).ok()) break;
    prefix.ids.resize(keep);
    prefix.tokens.resize(keep);
    prefix.offsets.resize(keep);
    prefix.byte_offsets.resize(keep);
    prefix.word_ids.resize(keep);
    prefix.is_prefix = true;
    return prefix;
  }
  return tokenize(ToStd(text));
}

}  // namespace

absl::StatusOr<std::string> Sha256OfFiles(const std::vector<std::string>& paths) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> context(EVP_MD_CTX_new(),
                                                                  &EVP_MD_CTX_free);
  if (context == nullptr || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1) {
    return absl::InternalError("SHA-256: OpenSSL could not initialise the digest");
  }
  std::vector<char> buffer(1 << 20);
  for (const std::string& path : paths) {
    std::ifstream file(path, std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat("cannot open '", path, "' for hashing"));
    while (file) {
      file.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      if (file.gcount() > 0) {
        EVP_DigestUpdate(context.get(), buffer.data(), static_cast<size_t>(file.gcount()));
      }
    }
    if (!file.eof()) return absl::InternalError(absl::StrCat("error reading '", path, "'"));
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest;
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context.get(), digest.data(), &length) != 1) {
    return absl::InternalError("SHA-256: OpenSSL could not finish the digest");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

absl::StatusOr<std::unique_ptr<LoadedModel>> LoadedModel::Create(const Options& options) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<LoadedModel> loaded(new LoadedModel());
  loaded->name_ = options.name;
  loaded->model_dir_ = options.model_dir;
  // config.json first: an unsupported architecture (a GPT-2 checkpoint, say) is the error to
  // report, not the tokenizer files such a checkpoint lays out differently.
  absl::StatusOr<ModelConfig> config = LoadModelConfig(options.model_dir);
  if (!config.ok()) return Prefixed(options.name, config.status());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(options.model_dir);
  if (!tokenizer.ok()) return Prefixed(options.name, tokenizer.status());
  loaded->tokenizer_ = *std::move(tokenizer);
  absl::StatusOr<std::unique_ptr<TransformerModel>> model = LoadTransformerModel(
      {.model_dir = options.model_dir, .compute_dtype = options.compute_dtype});
  if (!model.ok()) return Prefixed(options.name, model.status());
  loaded->model_ = *std::move(model);
  if (absl::Status fits =
          CheckTokenizerFits(*loaded->tokenizer_, loaded->model_->config(), options.model_dir);
      !fits.ok()) {
    return Prefixed(options.name, fits);
  }
  const int64_t model_max = loaded->model_->max_positions();
  loaded->max_tokens_ =
      options.max_tokens > 0 ? std::min(options.max_tokens, model_max) : model_max;
  absl::StatusOr<std::string> checksum = Sha256OfFiles(WeightFiles(options.model_dir));
  if (!checksum.ok()) return Prefixed(options.name, checksum.status());
  loaded->weights_checksum_ = *std::move(checksum);
  if (const std::string record = JoinPath(options.model_dir, "training_record.json");
      FileExists(record)) {
    absl::StatusOr<std::string> text = ReadFileToString(record);
    if (!text.ok()) return Prefixed(options.name, text.status());
    loaded->training_record_ = *std::move(text);
  }

  // One full pass touches every weight page and lets LibTorch allocate its buffers before the first
  // request, so that the first caller does not pay for it.
  // Truncated to the model's token limit, which --max_tokens may set below the text's length.
  TextOptions warm_up_text;
  warm_up_text.truncation = Truncation::kLongestFirst;
  absl::StatusOr<Encoding> warm_up_input =
      loaded->Encode("attnscope warm-up pass", std::nullopt, warm_up_text);
  if (!warm_up_input.ok()) return Prefixed(options.name, warm_up_input.status());
  ForwardOptions warm_up;
  warm_up.output_hidden_states = true;
  warm_up.output_attention_scores = true;
  absl::StatusOr<BatchOutput> warm_up_output = loaded->Run({*std::move(warm_up_input)}, warm_up);
  if (!warm_up_output.ok()) {
    return Prefixed(options.name, absl::InternalError(absl::StrCat(
                                      "warm-up pass failed: ", warm_up_output.status().message())));
  }
  loaded->load_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loaded;
}

absl::StatusOr<Encoding> LoadedModel::Encode(absl::string_view text,
                                             std::optional<absl::string_view> text_pair,
                                             const TextOptions& options) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText first, Tokenize(text));
  std::optional<TokenizedText> second;
  if (text_pair.has_value()) {
    ATTNSCOPE_ASSIGN_OR_RETURN(second, Tokenize(*text_pair));
  }
  return Assemble(std::move(first), std::move(second), options);
}

absl::StatusOr<TokenizedText> LoadedModel::Tokenize(absl::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText tokens,
                             TokenizeUpTo(text, max_tokens_, [this](std::string_view part) {
                               return tokenizer_->Tokenize(part);
                             }));
  ATTNSCOPE_RETURN_IF_ERROR(CheckIdsFit(tokens));
  return tokens;
}

absl::StatusOr<TokenizedText> LoadedModel::TokenizeTarget(absl::string_view text) const {
  ATTNSCOPE_ASSIGN_OR_RETURN(
      TokenizedText tokens,
      TokenizeUpTo(text, config().max_position_embeddings,
                   [this](std::string_view part) { return tokenizer_->TokenizeTarget(part); }));
  ATTNSCOPE_RETURN_IF_ERROR(CheckIdsFit(tokens));
  return tokens;
}

absl::Status LoadedModel::CheckIdsFit(const TokenizedText& tokens) const {
  const int64_t rows = config().vocab_size;
  if (tokenizer_->vocab_size() <= rows) return absl::OkStatus();
  for (size_t i = 0; i < tokens.ids.size(); ++i) {
    if (tokens.ids[i] >= rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "text: token '", Excerpt(tokens.tokens[i], 64), "' (id ", tokens.ids[i],
          "): expected a token of the model's ", rows,
          " embeddings (config.json vocab_size), got one its tokenizer adds past them; remove it "
          "from the text"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Encoding> LoadedModel::Assemble(TokenizedText text,
                                               std::optional<TokenizedText> text_pair,
                                               const TextOptions& options) const {
  EncodeOptions encode;
  encode.add_special_tokens = options.add_special_tokens;
  encode.truncation = options.truncation;
  if (options.truncation != Truncation::kNone) {
    if (options.max_length < 0 || options.max_length > max_tokens_) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenization.max_length ", options.max_length, ": expected a value in [0, ",
                       max_tokens_, "] for model '", name_, "' (0 = the model's limit of ",
                       max_tokens_, " tokens), got ", options.max_length,
                       options.max_length < 0 ? "; use 0 or a positive count"
                                              : "; lower `tokenization.max_length`"));
    }
    encode.max_length = options.max_length > 0 ? options.max_length : max_tokens_;
  }
  const bool more_than = text.is_prefix || (text_pair.has_value() && text_pair->is_prefix);
  ATTNSCOPE_ASSIGN_OR_RETURN(
      Encoding encoding,
      tokenizer_->Assemble(std::move(text), text_pair.has_value() ? &*text_pair : nullptr, encode));
  const int64_t length = static_cast<int64_t>(encoding.size());
  if (length > max_tokens_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input of model '", name_, "': expected at most ", max_tokens_,
        " tokens (special tokens included), got ", more_than ? "more than " : "", length,
        "; set `tokenization.truncation` (e.g. TRUNCATION_LONGEST_FIRST) or shorten the text"));
  }
  if (length == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input of model '", name_,
                     "': the text gave no tokens and no special tokens were added; "
                     "give a longer text or leave `tokenization.skip_special_tokens` unset"));
  }
  return encoding;
}

absl::StatusOr<BatchOutput> LoadedModel::Run(std::vector<Encoding> encodings,
                                             ForwardOptions options) const {
  if (encodings.empty()) return absl::InvalidArgumentError("expected at least one input, got none");
  int64_t length = 0;
  for (const Encoding& encoding : encodings) {
    length = std::max(length, static_cast<int64_t>(encoding.size()));
  }
  const int64_t batch = static_cast<int64_t>(encodings.size());
  const int64_t pad_id = std::max<int64_t>(tokenizer_->pad_token_id(), 0);
  std::vector<int64_t> ids(batch * length, pad_id);
  std::vector<int64_t> mask(batch * length, 0);
  std::vector<int64_t> types(batch * length, 0);
  for (int64_t b = 0; b < batch; ++b) {
    const Encoding& encoding = encodings[b];
    for (size_t i = 0; i < encoding.size(); ++i) {
      ids[b * length + i] = encoding.input_ids[i];
      mask[b * length + i] = 1;
      types[b * length + i] = encoding.token_type_ids[i];
    }
  }
  BatchOutput output;
  ForwardInput input;
  try {
    input.input_ids = torch::tensor(ids, torch::kInt64).view({batch, length});
    input.attention_mask = torch::tensor(mask, torch::kInt64).view({batch, length});
    // Segment ids exist only in architectures with token type embeddings (BERT); Llama's pair
    // template still numbers its second text 1, which the model must not see.
    if (config().type_vocab_size > 0) {
      input.token_type_ids = torch::tensor(types, torch::kInt64).view({batch, length});
    }
  } catch (const c10::Error& error) {
    return absl::InternalError(
        absl::StrCat("building the input batch failed: ", error.what_without_backtrace()));
  }
  ATTNSCOPE_ASSIGN_OR_RETURN(output.forward, model_->Forward(input, options));
  output.attention_mask = input.attention_mask;
  output.encodings = std::move(encodings);
  return output;
}

}  // namespace attnscope
