// Generate: tokens after a prompt (or from an encoder-decoder's source) with each step's
// attention, on the calling thread.

#include "models/requests/generate.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"
#include "models/requests/requests.h"

namespace attnscope {

using requests_internal::CheckHasTokens;
using requests_internal::CheckText;
using requests_internal::HeadsOut;
using requests_internal::OriginalTexts;
using requests_internal::SecondsSince;
using requests_internal::TooLarge;
using Clock = requests_internal::Clock;

// Prompt tokens before the first generated one that its text is decoded after: enough for a
// decoder to see the piece boundary before it.
constexpr size_t kDecodeContext = 5;

absl::StatusOr<GenerateSummary> RequestRunner::RunGenerate(
    const GenerateQuery& query, const CallCheck& check,
    const std::function<absl::Status(const GenerateHeader&)>& on_header,
    const std::function<absl::Status(const GenerateStep&)>& on_step,
    absl::string_view client) const {
  GenerateHeader header;
  ATTNSCOPE_ASSIGN_OR_RETURN(header.model, FindModel(query.model));
  const LoadedModel& model = *header.model;
  const ModelConfig& config = model.config();
  const bool seq2seq = config.is_encoder_decoder;
  if (!model.model().is_decoder() && !seq2seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model.name(),
        "': expected a decoder-only (gpt2, gpt_neox, opt, llama, qwen2, qwen3, mistral, "
        "gemma, gemma2, gemma3_text, phi3) or encoder-decoder (marian, bart, t5) model to "
        "generate with, got an encoder-only ",
        ArchitectureName(config.architecture),
        " model; set `model` to one of those (ListModels says each model's "
        "architecture)"));
  }
  // An encoder-decoder writes from a source text, which must not be empty.
  if (!query.prompt.empty() || seq2seq) {
    ATTNSCOPE_RETURN_IF_ERROR(CheckText(query.prompt, "prompt"));
  }
  header.method = query.generation.method;
  header.dtype = query.dtype;
  if (!query.output_attentions) {
    // They shape an attention that is not sent: a layer out of range would otherwise pass too.
    std::vector<absl::string_view> set;
    if (!query.layers.empty()) set.push_back("layers");
    if (!query.heads.empty()) set.push_back("heads");
    if (query.head_aggregation != HeadAggregation::kNone) set.push_back("head_aggregation");
    if (query.dtype != OutputDType::kFloat32) set.push_back("dtype");
    if (!set.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          absl::StrJoin(set, ", "),
          ": set, but they choose the attention sent with each token, and output_attentions is "
          "off; set output_attentions, or leave ",
          set.size() == 1 ? "it" : "them", " out"));
    }
  }
  if (query.output_attentions) {
    // An encoder-decoder's tokens come with the decoder's cross-attention.
    ATTNSCOPE_ASSIGN_OR_RETURN(
        header.layers,
        ResolveIndices(query.layers, seq2seq ? config.decoder_layers : config.num_hidden_layers,
                       seq2seq ? "decoder layer" : "layer", "layers"));
    ATTNSCOPE_ASSIGN_OR_RETURN(
        header.heads,
        ResolveIndices(query.heads,
                       seq2seq ? config.decoder_attention_heads : config.num_attention_heads,
                       seq2seq ? "decoder head" : "head", "heads"));
  }
  const Clock::time_point start = Clock::now();
  ATTNSCOPE_ASSIGN_OR_RETURN(TokenizedText text, model.Tokenize(query.prompt));
  if (seq2seq) ATTNSCOPE_RETURN_IF_ERROR(CheckHasTokens(text, "prompt"));
  const int64_t text_tokens = static_cast<int64_t>(text.size());
  const bool more_than = text.is_prefix;
  absl::StatusOr<Encoding> encoding = model.Assemble(std::move(text), std::nullopt, TextOptions());
  if (!encoding.ok()) {
    // Generate takes no truncation option: name the prompt and its fix instead.
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt: expected at most ", model.max_tokens(),
        " tokens (the model's limit, special tokens included), got ", more_than ? "more than " : "",
        text_tokens, " tokens of text; shorten the prompt"));
  }
  if (observer_ != nullptr) {
    observer_->OnTokenized(SecondsSince(start), static_cast<int64_t>(encoding->size()));
  }
  header.prompt_tokens.original_texts = OriginalTexts(*encoding, query.prompt, "");
  header.prompt_tokens.encoding = *std::move(encoding);
  const std::vector<int64_t>& prompt_ids = header.prompt_tokens.encoding.input_ids;

  GenerationOptions options = query.generation;
  if (!query.ignore_eos) options.eos_token_ids = config.eos_token_ids;
  options.output_attentions = query.output_attentions;
  // Taken for each step, given to the next waiting call between steps, and left while a step's
  // token is handed on, which may wait for the client to read it.
  ComputeGate::Turn turn(gate_, check, client);
  options.check = [&turn]() {
    turn.Leave();
    return turn.Take("before a generation step");
  };
  // Every option is checked before the header goes out, so that a refusal is the whole answer.
  ATTNSCOPE_RETURN_IF_ERROR(CheckGenerationOptions(model.model(), prompt_ids, options));
  const int64_t beams =
      options.method == DecodingMethod::kBeamSearch ? options.num_beams : int64_t{1};
  const int64_t prompt_length = static_cast<int64_t>(prompt_ids.size());
  // An encoder-decoder's source is encoded once; a decoder-only model's prompt is in each beam.
  const int64_t token_passes = seq2seq ? prompt_length + beams * options.max_new_tokens
                                       : beams * (prompt_length + options.max_new_tokens);
  ATTNSCOPE_RETURN_IF_ERROR(
      CheckWork("Generate", token_passes,
                absl::StrCat(beams, " beams over ", prompt_length, " prompt and ",
                             options.max_new_tokens, " new tokens"),
                "ask for fewer max_new_tokens or num_beams, or send a shorter prompt"));
  if (query.output_attentions) {
    // The last token's attention, over the longest context, is the largest message (an
    // encoder-decoder's is over the source, whatever the step).
    const int64_t context =
        seq2seq ? static_cast<int64_t>(prompt_ids.size())
                : static_cast<int64_t>(prompt_ids.size()) + options.max_new_tokens - 1;
    const int64_t bytes = static_cast<int64_t>(header.layers.size()) *
                          HeadsOut(query.head_aggregation, header.heads.size()) * context *
                          BytesPerElement(query.dtype);
    if (bytes > options_.max_response_bytes) {
      return TooLarge("Generate token", bytes, options_.max_response_bytes,
                      query.dtype == OutputDType::kFloat32
                          ? "request fewer layers or heads, a head_aggregation, dtype "
                            "DTYPE_FLOAT16 or fewer max_new_tokens"
                          : "request fewer layers or heads, a head_aggregation or fewer "
                            "max_new_tokens");
    }
  }
  ATTNSCOPE_RETURN_IF_ERROR(on_header(header));

  // A token's text is what decoding a short run of tokens ending with it adds to decoding the
  // same run without it (text-generation-inference's incremental decoding): both decodes start at
  // the same token, so a piece's leading space and multi-piece characters come out as the
  // tokenizer's decoder writes them, and each step decodes a few tokens, not the whole sequence.
  // An encoder-decoder's output is in the target vocabulary and decodes on its own; its decoder
  // starts from decoder_start_token_id at position 0.
  const Tokenizer& tokenizer = model.tokenizer();
  std::vector<int64_t> ids = seq2seq ? std::vector<int64_t>() : prompt_ids;
  const int64_t first_position = seq2seq ? 1 : static_cast<int64_t>(prompt_ids.size());
  size_t prefix_offset = ids.size() > kDecodeContext ? ids.size() - kDecodeContext : 0;
  size_t read_offset = ids.size();
  std::string text_so_far;
  int64_t index = 0;
  auto decode = [&](size_t begin, size_t end) {
    return tokenizer.Decode(std::vector<int64_t>(ids.begin() + begin, ids.begin() + end),
                            /*skip_special_tokens=*/true);
  };
  constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: an incomplete character
  auto handle = [&](const GeneratedToken& token) -> absl::Status {
    GenerateStep step;
    step.index = index++;
    step.position = first_position + step.index;
    step.id = token.id;
    step.token = tokenizer.IdToToken(token.id);
    step.logprob = token.logprob;
    ids.push_back(token.id);
    const std::string before = decode(prefix_offset, read_offset);
    const std::string now = decode(prefix_offset, ids.size());
    if (now.size() > before.size() && absl::StartsWith(now, before) &&
        !absl::EndsWith(now, kReplacement)) {
      step.text = now.substr(before.size());
      text_so_far += step.text;
      prefix_offset = read_offset;
      read_offset = ids.size();
    }
    if (token.attention.defined()) {
      std::vector<torch::Tensor> layers;
      for (const int64_t layer : header.layers) {
        // [head, context] as one query row: [head, 1, context].
        ATTNSCOPE_ASSIGN_OR_RETURN(torch::Tensor selected,
                                   SelectHeads(token.attention[layer].unsqueeze(1), header.heads,
                                               query.head_aggregation, AttentionWindow()));
        layers.push_back(selected.squeeze(1));
      }
      step.attention = torch::stack(layers);
    }
    turn.Leave();
    return on_step(step);
  };
  ATTNSCOPE_ASSIGN_OR_RETURN(const GenerationResult result,
                             Generate(model.model(), prompt_ids, options, handle));
  GenerateSummary summary;
  summary.finish_reason = result.finish_reason;
  summary.score = result.score;
  for (const GeneratedToken& token : result.tokens) summary.ids.push_back(token.id);
  // The streamed texts joined, then what the tokens held back add before the character they leave
  // incomplete (a last token "cu" + the first bytes of "ữ" adds "cu"; the incomplete character
  // itself, U+FFFD in the decode, never arrives).
  std::string held_back = decode(prefix_offset, ids.size());
  while (absl::EndsWith(held_back, kReplacement)) {
    held_back.resize(held_back.size() - kReplacement.size());
  }
  const std::string streamed = decode(prefix_offset, read_offset);
  if (held_back.size() > streamed.size() && absl::StartsWith(held_back, streamed)) {
    text_so_far += held_back.substr(streamed.size());
  }
  summary.text = std::move(text_so_far);
  return summary;
}

}  // namespace attnscope
