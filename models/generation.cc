#include "models/generation.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace attnscope {
absl::Status CheckGenerationOptions(const TransformerModel& model,
                                    const std::vector<int64_t>& prompt_ids,
                                    const GenerationOptions& options) {
  const ModelConfig& config = model.config();
  if (!model.is_decoder() && !config.is_encoder_decoder) {
    return absl::InvalidArgumentError(
        absl::StrCat("model_type '", config.model_type,
                     "': expected a model that generates text (llama, marian, bart, t5), got an "
                     "encoder-only model; generate with a decoder or an encoder-decoder"));
  }
  if (prompt_ids.empty()) {
    return absl::InvalidArgumentError("prompt: expected at least one token, got none");
  }
  if (config.is_encoder_decoder && config.decoder_start_token_id < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model_type '", config.model_type,
        "': expected config.json's decoder_start_token_id (the decoder's first token), got none"));
  }
  if (options.max_new_tokens < 1 || options.max_new_tokens > kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat("max_new_tokens: expected 1 to ", kMaxNewTokens,
                                                   ", got ", options.max_new_tokens));
  }
  // An encoder-decoder's decoder starts from decoder_start_token_id alone; the source has its
  // own positions, checked by Encode.
  const int64_t prompt_length =
      config.is_encoder_decoder ? 1 : static_cast<int64_t>(prompt_ids.size());
  if (prompt_length >= config.max_position_embeddings) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt: expected fewer than ", config.max_position_embeddings,
                     " tokens (max_position_embeddings), so that a token can follow, got ",
                     prompt_length, "; shorten the prompt"));
  }
  const int64_t total = prompt_length + options.max_new_tokens;
  if (total > config.max_position_embeddings) {
    // The decoder's positions hold its start token and what it writes; the source text does not
    // count against them, so shortening it would not help.
    const std::string after = config.is_encoder_decoder
                                  ? "after the decoder's start token"
                                  : absl::StrCat("after a prompt of ", prompt_length, " tokens");
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens: expected at most ", config.max_position_embeddings - prompt_length, " ",
        after, " (max_position_embeddings ", config.max_position_embeddings, "), got ",
        options.max_new_tokens,
        config.is_encoder_decoder ? "; ask for fewer tokens"
                                  : "; ask for fewer tokens or shorten the prompt"));
  }
  switch (options.method) {
    case DecodingMethod::kGreedy:
      break;
    case DecodingMethod::kBeamSearch: {
      const int64_t widest = std::min(config.vocab_size, kMaxBeams);
      if (options.num_beams < 1 || options.num_beams > widest) {
        return absl::InvalidArgumentError(absl::StrCat(
            "num_beams: expected 1 to ", widest, " (at most the vocabulary, ", config.vocab_size,
            " tokens, and ", kMaxBeams, "), got ", options.num_beams));
      }
      if (!(std::abs(options.length_penalty) <= kMaxLengthPenalty)) {
        return absl::InvalidArgumentError(
            absl::StrCat("length_penalty: expected a number from ", -kMaxLengthPenalty, " to ",
                         kMaxLengthPenalty, ", got ", options.length_penalty));
      }
      break;
    }
    case DecodingMethod::kSampling:
      if (!(options.temperature >= kMinTemperature) || !std::isfinite(options.temperature)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "temperature: expected a finite number of at least ", kMinTemperature, ", got ",
            options.temperature, "; for the most probable token use greedy search"));
      }
      if (options.top_k < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("top_k: expected 0 (all tokens) or more, got ", options.top_k));
      }
      if (!(options.top_p > 0 && options.top_p <= 1)) {
        return absl::InvalidArgumentError(
            absl::StrCat("top_p: expected a value in (0, 1], got ", options.top_p));
      }
      break;
  }
  return absl::OkStatus();
}

namespace {

bool IsEos(const GenerationOptions& options, int64_t id) {
  return std::find(options.eos_token_ids.begin(), options.eos_token_ids.end(), id) !=
         options.eos_token_ids.end();
}

// The passes of one generation: the (decoder) sequences so far ([B, length] int64, prompt first)
// and, with use_cache, the keys and values of all but their last token. For an encoder-decoder the
// prompt is the source: it is encoded once, and the decoder's sequences start from
// decoder_start_token_id.
class Stepper {
 public:
  Stepper(const TransformerModel& model, const GenerationOptions& options)
      : model_(model), options_(options) {}

  absl::Status Start(const std::vector<int64_t>& prompt_ids) {
    const torch::Tensor prompt = torch::tensor(prompt_ids, torch::kInt64).unsqueeze(0);
    const ModelConfig& config = model_.config();
    if (!config.is_encoder_decoder) {
      sequences_ = prompt;
      cache_.reserved_positions = std::min<int64_t>(prompt.size(1) + options_.max_new_tokens,
                                                    config.max_position_embeddings);
      return absl::OkStatus();
    }
    ForwardInput source;
    source.input_ids = prompt;
    ATTNSCOPE_ASSIGN_OR_RETURN(source_, model_.RunEncoder(source));
    cache_ = source_;
    // The decoder's positions: its start token and the new tokens.
    cache_.reserved_positions =
        std::min<int64_t>(1 + options_.max_new_tokens, config.max_position_embeddings);
    sequences_ = torch::full({1, 1}, config.decoder_start_token_id, torch::kInt64);
    return absl::OkStatus();
  }

  // The next-token log-probabilities [B, vocab] float32 of each sequence and, with
  // output_attentions, the last position's attention [B, layer, head, keys]: over the sequence
  // (decoder-only models) or over the source (cross-attention, encoder-decoders).
  absl::Status Run(torch::Tensor* logprobs, torch::Tensor* attention) {
    KvCache fresh;
    // Every beam reads the one source (its batch of 1 broadcast).
    if (!options_.use_cache && model_.config().is_encoder_decoder) fresh = source_;
    KvCache* cache = options_.use_cache ? &cache_ : &fresh;
    const torch::Tensor input =
        cache->length() == 0 ? sequences_ : sequences_.narrow(1, cache->length(), 1);
    ATTNSCOPE_ASSIGN_OR_RETURN(DecodeOutput out,
                               model_.Decode(input, cache, options_.output_attentions));
    *logprobs = torch::log_softmax(out.logits.select(1, -1), -1);
    if (options_.output_attentions) {
      std::vector<torch::Tensor> rows;
      for (const torch::Tensor& layer :
           model_.config().is_encoder_decoder ? out.cross_attentions : out.attentions) {
        rows.push_back(layer.select(2, -1));
      }
      *attention = torch::stack(rows, /*dim=*/1);
    }
    return absl::OkStatus();
  }

  // Continues sequence rows[b] with tokens[b] ([B'] int64 each).
  void Append(const torch::Tensor& rows, const torch::Tensor& tokens) {
    sequences_ = torch::cat({sequences_.index_select(0, rows), tokens.unsqueeze(1)}, 1);
    if (options_.use_cache) cache_.SelectRows(rows);
  }

 private:
  const TransformerModel& model_;
  const GenerationOptions& options_;
  torch::Tensor sequences_;
  KvCache source_;  // encoder-decoders: the encoded source alone
  KvCache cache_;
};

GeneratedToken MakeToken(const torch::Tensor& logprobs, const torch::Tensor& attention, int64_t row,
                         int64_t id) {
  GeneratedToken token;
  token.id = id;
  token.logprob = logprobs[row][id].item<double>();
  if (attention.defined()) token.attention = attention[row].clone();
  return token;
}

// Greedy search and sampling: one sequence, each token handed on as it is chosen.
absl::StatusOr<GenerationResult> GenerateOne(
    Stepper& stepper, const GenerationOptions& options,
    const std::function<absl::Status(const GeneratedToken&)>& on_token) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const torch::Tensor first = torch::zeros({1}, torch::kInt64);
  GenerationResult result;
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (options.check) ATTNSCOPE_RETURN_IF_ERROR(options.check());
    torch::Tensor logprobs, attention;
    ATTNSCOPE_RETURN_IF_ERROR(stepper.Run(&logprobs, &attention));
    int64_t id = 0;
    if (options.method == DecodingMethod::kGreedy) {
      id = logprobs[0].argmax().item<int64_t>();
    } else {
      torch::Tensor scores = logprobs[0] / options.temperature;
      const int64_t vocab = scores.size(0);
      if (options.top_k > 0 && options.top_k < vocab) {
        const torch::Tensor kth = std::get<0>(scores.topk(options.top_k)).select(0, -1);
        scores = scores.masked_fill(scores < kth, -std::numeric_limits<float>::infinity());
      }
      if (options.top_p < 1) {
        const auto [sorted, order] = scores.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true);
        const torch::Tensor probs = torch::softmax(sorted, 0);
        // A token stays while the tokens before it hold less than top_p; the first always stays
        // (a top_p below float32's range would otherwise drop it too).
        torch::Tensor drop = probs.cumsum(0) - probs >= options.top_p;
        drop[0] = false;
        scores = scores.index_fill(0, order.masked_select(drop),
                                   -std::numeric_limits<float>::infinity());
      }
      id = torch::multinomial(torch::softmax(scores, 0), /*num_samples=*/1,
                              /*replacement=*/false, generator)
               .item<int64_t>();
    }
    GeneratedToken token = MakeToken(logprobs, attention, /*row=*/0, id);
    result.score += token.logprob;
    ATTNSCOPE_RETURN_IF_ERROR(on_token(token));
    result.tokens.push_back(std::move(token));
    if (IsEos(options, id)) {
      result.finish_reason = FinishReason::kEos;
      return result;
    }
    stepper.Append(first, torch::full({1}, id, torch::kInt64));
  }
  result.finish_reason = FinishReason::kLength;
  return result;
}

struct Hypothesis {
  std::vector<GeneratedToken> tokens;
  double logprob = 0.0;
};

// Beam search as transformers' BeamSearchScorer with early_stopping=True: each step ranks every
// continuation of every kept hypothesis by total log-probability (ties by beam, then token id) and
// walks the best 2 * num_beams: an eos among the first num_beams of them finishes that
// hypothesis, the other continuations fill the beams up to num_beams. The search ends when
// num_beams hypotheses have finished, or at max_new_tokens, where the kept ones finish too.
absl::StatusOr<GenerationResult> BeamSearch(
    Stepper& stepper, const GenerationOptions& options,
    const std::function<absl::Status(const GeneratedToken&)>& on_token) {
  const int64_t beams = options.num_beams;
  std::vector<Hypothesis> running(1);
  std::vector<std::pair<GenerationResult, int64_t>> finished;  // result, order of finishing
  auto finish = [&](Hypothesis hypothesis, FinishReason reason) {
    GenerationResult result;
    result.score = hypothesis.logprob /
                   std::pow(static_cast<double>(hypothesis.tokens.size()), options.length_penalty);
    result.tokens = std::move(hypothesis.tokens);
    result.finish_reason = reason;
    finished.emplace_back(std::move(result), static_cast<int64_t>(finished.size()));
  };
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    if (options.check) ATTNSCOPE_RETURN_IF_ERROR(options.check());
    torch::Tensor logprobs, attention;
    ATTNSCOPE_RETURN_IF_ERROR(stepper.Run(&logprobs, &attention));
    const int64_t vocab = logprobs.size(1);
    std::vector<double> totals;
    for (const Hypothesis& hypothesis : running) totals.push_back(hypothesis.logprob);
    const torch::Tensor candidates =
        (torch::tensor(totals, torch::kFloat64).unsqueeze(1) + logprobs.to(torch::kFloat64))
            .view({-1});
    const auto [values, order] = candidates.sort(/*stable=*/true, /*dim=*/0, /*descending=*/true);
    const int64_t considered = std::min<int64_t>(2 * beams, candidates.size(0));
    std::vector<Hypothesis> next;
    std::vector<int64_t> rows, tokens;
    for (int64_t rank = 0; rank < considered && static_cast<int64_t>(next.size()) < beams; ++rank) {
      const int64_t flat = order[rank].item<int64_t>();
      const int64_t row = flat / vocab;
      const int64_t id = flat % vocab;
      Hypothesis hypothesis = running[row];
      hypothesis.tokens.push_back(MakeToken(logprobs, attention, row, id));
      hypothesis.logprob = values[rank].item<double>();
      if (IsEos(options, id)) {
        if (rank < beams) finish(std::move(hypothesis), FinishReason::kEos);
        continue;
      }
      next.push_back(std::move(hypothesis));
      rows.push_back(row);
      tokens.push_back(id);
    }
    if (static_cast<int64_t>(finished.size()) >= beams || next.empty()) break;
    if (step + 1 == options.max_new_tokens) {
      for (Hypothesis& hypothesis : next) finish(std::move(hypothesis), FinishReason::kLength);
      break;
    }
    running = std::move(next);
    stepper.Append(torch::tensor(rows, torch::kInt64), torch::tensor(tokens, torch::kInt64));
  }
  if (finished.empty()) return absl::InternalError("beam search finished no hypothesis (a bug)");
  size_t best = 0;
  for (size_t i = 1; i < finished.size(); ++i) {
    if (finished[i].first.score > finished[best].first.score) best = i;
  }
  GenerationResult result = std::move(finished[best].first);
  for (const GeneratedToken& token : result.tokens) ATTNSCOPE_RETURN_IF_ERROR(on_token(token));
  return result;
}

}  // namespace

absl::StatusOr<GenerationResult> Generate(
    const TransformerModel& model, const std::vector<int64_t>& prompt_ids,
    const GenerationOptions& options,
    const std::function<absl::Status(const GeneratedToken&)>& on_token) {
  ATTNSCOPE_RETURN_IF_ERROR(CheckGenerationOptions(model, prompt_ids, options));
  try {
    torch::InferenceMode guard;
    Stepper stepper(model, options);
    ATTNSCOPE_RETURN_IF_ERROR(stepper.Start(prompt_ids));
    return options.method == DecodingMethod::kBeamSearch ? BeamSearch(stepper, options, on_token)
                                                         : GenerateOne(stepper, options, on_token);
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("generation failed: ", error.what_without_backtrace()));
  }
}

}  // namespace attnscope
