// Trains the translation model: an encoder-decoder computed as Hugging Face's MarianMTModel
// (Junczys-Dowmunt et al. 2018; transformers' modeling_marian.py) and as attnscope's engine runs it
// (models/architectures/encoder_decoder.cc): post-LayerNorm layers, static sinusoidal positions,
// token embeddings scaled by sqrt(d_model), SiLU, an lm_head tied to the shared embeddings plus
// final_logits_bias. The engine is inference-only; this is its differentiable twin from torch::nn
// modules, trained by teacher-forced cross-entropy, and saved as a MarianMTModel checkpoint the
// engine loads. final_logits_bias is trained here (transformers keeps it a zero buffer): it learns
// the target tokens' prior, and pushes down "<pad>", which the decoder reads as its start but never
// writes.
//
// One model translates English into several languages: the source starts with the target
// language's token (">>vie<< Inserting Tables"), Marian's multilingual convention.
#ifndef ATTNSCOPE_TOOLS_TRAIN_MARIAN_TRAINER_H_
#define ATTNSCOPE_TOOLS_TRAIN_MARIAN_TRAINER_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "models/tokenizers/tokenizer.h"
#include "nlohmann/json.hpp"

namespace attnscope::train {

// Model shape and recipe. Every field is recorded next to the model (training_record.json).
struct MarianConfig {
  // Taken from the tokenizer: its vocabulary, "<pad>" (also the decoder's start token, as in
  // Marian) and "</s>".
  int64_t vocab_size = 0;
  int64_t pad_token_id = -1;
  int64_t eos_token_id = -1;

  int64_t d_model = 256;
  int64_t encoder_layers = 3;
  int64_t decoder_layers = 3;
  int64_t attention_heads = 4;  // encoder and decoder
  int64_t ffn_dim = 1024;       // encoder and decoder
  // Rows of the sinusoidal position table: the longest sequence the saved model accepts.
  int64_t max_position_embeddings = 512;
  // Pairs whose source or target (</s> included) has more tokens than this are left out of
  // training; a truncated target would teach the model to stop mid-sentence.
  int64_t max_length = 128;
  // MarianConfig's `dropout`: on the embeddings and on each sublayer's output before the residual
  // sum. Attention and activation dropout are 0.
  double dropout = 0.1;
  // The target distribution puts 1 - s on the reference token and s spread over the vocabulary
  // (Szegedy et al. 2016), as PyTorch's cross_entropy(label_smoothing=s).
  double label_smoothing = 0.1;

  int64_t batch_size = 64;  // sentence pairs per step
  int64_t steps = 4000;
  // Adam with the transformer paper's betas, linear warm-up to peak_lr over warmup_steps, then a
  // straight line down to 0 at `steps`: the run ends annealed whatever its length.
  double peak_lr = 7e-4;
  int64_t warmup_steps = 400;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.98;
  double adam_eps = 1e-9;
  double clip_grad_norm = 1.0;
  // Batches are cut from windows of this many batches' worth of shuffled pairs sorted by source
  // length (1: no sorting), so that a batch is mostly tokens rather than padding.
  int64_t length_bucket_batches = 64;
  uint64_t seed = 20261202;
  // Fixed, so that float reductions split the same way on every run.
  int threads = 1;

  nlohmann::json ToJson() const;
  // InvalidArgument naming the field when one is missing or of the wrong type.
  static absl::StatusOr<MarianConfig> FromJson(const nlohmann::json& json);
};

// One sentence pair: English `source`, `target` in `lang` ("vi" or "ko").
struct TranslationExample {
  std::string lang;
  std::string source;
  std::string target;
};

// Reads JSONL lines {"lang", "source", "target"} (scripts/extract_parallel_text.py).
// NotFound: the file cannot be opened. InvalidArgument naming the line: malformed JSON, a missing
// field, a language LanguageToken does not know.
absl::StatusOr<std::vector<TranslationExample>> ReadTranslationExamples(const std::string& path);

// The target-language token of `lang`: ">>vie<<" for "vi", ">>kor<<" for "ko" (ISO 639-3, as
// the OPUS-MT models). InvalidArgument for any other language.
absl::StatusOr<std::string> LanguageToken(std::string_view lang);

// The encoder's text of an example: its language token, a space, the source.
absl::StatusOr<std::string> PrefixedSource(const TranslationExample& example);

struct TranslationStepStats {
  int64_t step = 0;  // 1-based
  double loss = 0;   // label-smoothed cross-entropy per target token, what is minimised
  double nll = 0;    // plain cross-entropy per target token (perplexity = exp(nll))
  double lr = 0;
  int64_t source_tokens = 0;  // real (non-padding) tokens in the batch
  int64_t target_tokens = 0;
};

class MarianTrainer {
 public:
  // Tokenizes every pair with `tokenizer` (source: Encode of PrefixedSource, "tokens </s>";
  // target: EncodeTarget, "tokens </s>"), leaves out pairs over config.max_length, seeds LibTorch
  // and the batch order from config.seed and initialises the weights. Pairs are consumed in the
  // given order, then again in seeded shuffles. `tokenizer_dir` holds the tokenizer's files, which
  // Save copies next to the weights ("" when there are none to copy).
  // InvalidArgument: no pairs left, a text that does not tokenize, a tokenizer without "<pad>" or
  // "</s>", shapes that do not divide (d_model by attention_heads, an odd d_model).
  static absl::StatusOr<std::unique_ptr<MarianTrainer>> Create(
      MarianConfig config, const Tokenizer& tokenizer, std::vector<TranslationExample> examples,
      std::string tokenizer_dir);
  ~MarianTrainer();

  // Reorders the pairs not yet consumed into length-bucketed batches
  // (config.length_bucket_batches), with a generator of its own.
  void BucketRemainingByLength();

  // One optimiser step on the next batch; reshuffles (and buckets) when the pairs run out.
  TranslationStepStats Step();

  // Teacher-forced logits [B, T, vocab] float32 in evaluation mode (no dropout), what the saved
  // checkpoint gives in the engine's Forward. source_ids, source_mask: [B, S] int64;
  // decoder_ids, decoder_mask: [B, T] int64; masks 1 = real token, right-padded.
  torch::Tensor Logits(const torch::Tensor& source_ids, const torch::Tensor& source_mask,
                       const torch::Tensor& decoder_ids, const torch::Tensor& decoder_mask);

  // Writes into `dir` config.json (model_type "marian"), model.safetensors (float32, the tensor
  // names of transformers' MarianMTModel that models/architectures/encoder_decoder.cc loads) and
  // copies the tokenizer files (source.spm, target.spm, vocab.json, tokenizer_config.json) from
  // tokenizer_dir when that is another folder. Internal on I/O errors.
  absl::Status Save(const std::string& dir) const;

  const MarianConfig& config() const { return config_; }
  // Pairs kept for training and pairs left out for their length.
  int64_t num_examples() const { return static_cast<int64_t>(tokenized_.size()); }
  int64_t num_too_long() const { return too_long_; }

 private:
  struct Model;
  struct Tokenized {
    std::vector<int64_t> source;  // ">>xxx<< tokens </s>"
    std::vector<int64_t> labels;  // "tokens </s>"
  };

  MarianTrainer(MarianConfig config, std::vector<Tokenized> tokenized, int64_t too_long,
                std::string tokenizer_dir);

  MarianConfig config_;
  std::vector<Tokenized> tokenized_;
  int64_t too_long_;
  std::string tokenizer_dir_;
  std::vector<size_t> order_;
  size_t next_ = 0;
  int64_t step_ = 0;
  std::mt19937_64 rng_;
  std::mt19937_64 order_rng_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
};

}  // namespace attnscope::train

#endif  // ATTNSCOPE_TOOLS_TRAIN_MARIAN_TRAINER_H_
