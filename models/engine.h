// The inference engine facade the server uses: one loaded model (tokenizer + transformer), its
// identity (name, weights checksum), input limits, and batched forward passes with padding handled.
// LibTorch and Abseil only; never gRPC or protobuf.
#ifndef ATTNSCOPE_MODELS_ENGINE_H_
#define ATTNSCOPE_MODELS_ENGINE_H_

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/architectures/transformer.h"
#include "models/tokenizers/tokenizer.h"

namespace attnscope {

// How one text or text pair becomes tokens.
struct TextOptions {
  Truncation truncation = Truncation::kNone;
  // Token budget including special tokens when truncating; 0 = the model's token limit.
  int64_t max_length = 0;
  bool add_special_tokens = true;
};

// A batch of encodings run through the model. Inputs are right-padded to the longest encoding;
// output tensors keep the padded length S, and `encodings[b].size()` (padding excluded) says how
// many positions of item b are real (see StripPadding in attention_ops.h).
struct BatchOutput {
  std::vector<Encoding> encodings;  // unpadded, one per input
  ForwardOutput forward;            // [B, ...] tensors, padded to S
  torch::Tensor attention_mask;     // [B, S] int64, 1 = real token
};

class LoadedModel {
 public:
  struct Options {
    // The name requests select the model by (never a path).
    std::string name;
    // A Hugging Face checkpoint directory.
    std::string model_dir;
    // Longest accepted input in tokens, special tokens included; 0 or more than the model's
    // max_position_embeddings means max_position_embeddings.
    int64_t max_tokens = 0;
    // The projections' arithmetic (ModelOptions::compute_dtype in transformer.h).
    ComputeDtype compute_dtype = ComputeDtype::kFloat32;
  };

  // Loads the tokenizer and weights, validates them, hashes the weight files (SHA-256) and runs a
  // warm-up forward pass. NotFound / InvalidArgument from LoadTokenizer and LoadTransformerModel,
  // each message prefixed with the model name; Internal when the warm-up fails.
  static absl::StatusOr<std::unique_ptr<LoadedModel>> Create(const Options& options);

  // Tokenizes `text` (and `text_pair` when set) with special tokens and truncation, unpadded.
  // InvalidArgument: invalid UTF-8 (with the byte offset); without truncation, more tokens than
  // max_tokens() (naming the count, the limit and the `tokenization.truncation` fix); a max_length
  // above max_tokens().
  absl::StatusOr<Encoding> Encode(absl::string_view text,
                                  std::optional<absl::string_view> text_pair,
                                  const TextOptions& options) const;

  // The two halves of Encode, so that one text can be tokenized once and paired with many:
  // Tokenize (no special tokens; InvalidArgument for invalid UTF-8, or for a token past the
  // embedding matrix, which a tokenizer may add: Gemma 3 1B's <image_soft_token>), then Assemble
  // (special tokens, truncation and the checks of Encode; `text_pair` may be null).
  absl::StatusOr<TokenizedText> Tokenize(absl::string_view text) const;
  // The target side of an encoder-decoder (Tokenizer::TokenizeTarget, transformers' text_target),
  // cut as Tokenize cuts a text: a text with more tokens than max_position_embeddings is tokenized
  // only as far as a prefix that has more (TokenizedText::is_prefix).
  absl::StatusOr<TokenizedText> TokenizeTarget(absl::string_view text) const;
  absl::StatusOr<Encoding> Assemble(TokenizedText text, std::optional<TokenizedText> text_pair,
                                    const TextOptions& options) const;

  // Runs `encodings` as one right-padded batch. `on_layer_done` (may be empty) is called after each
  // layer; a non-OK status stops the pass and is returned (deadlines and cancellation).
  absl::StatusOr<BatchOutput> Run(std::vector<Encoding> encodings, ForwardOptions options) const;

  const std::string& name() const { return name_; }
  const std::string& model_dir() const { return model_dir_; }
  // training_record.json as the model's folder held it at load (attnscope-train writes it);
  // nullopt when the folder had none. Read with the weights, so that a folder replaced under a
  // running server changes nothing this model answers.
  const std::optional<std::string>& training_record() const { return training_record_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const TransformerModel& model() const { return *model_; }
  const ModelConfig& config() const { return model_->config(); }
  int64_t max_tokens() const { return max_tokens_; }
  // Lower-case hex SHA-256 over the weight files' bytes, files in name order.
  const std::string& weights_checksum() const { return weights_checksum_; }
  // Wall time of Create, warm-up included, in seconds.
  double load_seconds() const { return load_seconds_; }

 private:
  LoadedModel() = default;
  // InvalidArgument naming the first token of `tokens` past the embedding matrix.
  absl::Status CheckIdsFit(const TokenizedText& tokens) const;

  std::string name_;
  std::string model_dir_;
  std::optional<std::string> training_record_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<TransformerModel> model_;
  int64_t max_tokens_ = 0;
  std::string weights_checksum_;
  double load_seconds_ = 0;
};

// Lower-case hex SHA-256 over the concatenated bytes of `paths` in the given order.
// NotFound / Internal when a file cannot be read.
absl::StatusOr<std::string> Sha256OfFiles(const std::vector<std::string>& paths);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_ENGINE_H_
