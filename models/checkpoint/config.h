// Typed view of a Hugging Face config.json.
#ifndef ATTNSCOPE_MODELS_CONFIG_H_
#define ATTNSCOPE_MODELS_CONFIG_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace attnscope {

// kRoberta is BERT with RoBERTa's positions (transformers' RobertaModel and XLMRobertaModel, whose
// model_types "roberta" and "xlm-roberta" it serves) and classifier head. kMarian and kBart are
// encoder-decoders of one family (transformers' MarianMTModel and BartForConditionalGeneration),
// told apart by their positions and embedding normalisation. kT5 is the encoder-decoder of Raffel
// et al. 2020 (transformers' T5ForConditionalGeneration): pre-RMSNorm blocks and relative position
// buckets instead of absolute positions. kDistilBert is DistilBERT (transformers'
// DistilBertModel / DistilBertForSequenceClassification): BERT without token types or pooler.
// kMpnet is MPNet (Song et al. 2020; transformers' MPNetModel / MPNetForSequenceClassification,
// sentence-transformers' all-mpnet-base-v2): RoBERTa's positions and head without token types, and
// one relative position bias, T5's bidirectional buckets, added to every layer's scores. kElectra
// is ELECTRA (Clark et al. 2020; transformers' ElectraModel / ElectraForSequenceClassification):
// BERT's layers behind embeddings of embedding_size, projected to hidden_size when the two differ,
// and a GELU classifier head.
// kGpt2 is GPT-2 (transformers' GPT2LMHeadModel): learned
// positions, pre-LayerNorm blocks, a fused c_attn. kGptNeox is GPT-NeoX (GPTNeoXForCausalLM,
// EleutherAI's Pythia): GPT-2's LayerNorms and biases with partial RoPE and, by default, the
// attention and the MLP side by side on the same input (use_parallel_residual). kOpt is OPT
// (Zhang et al. 2022, OPTForCausalLM): GPT-2's layout with separate q/k/v projections, ReLU, and
// learned positions offset by 2. kLlama, kQwen2,
// kQwen3, kMistral, kGemma, kGemma2 and kGemma3 are the decoder-only Llama family (transformers'
// LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, GemmaForCausalLM,
// Gemma2ForCausalLM and Gemma3ForCausalLM, the text model of Gemma 3) and kPhi3 (Phi3ForCausalLM:
// Phi-3, Phi-3.5 and Phi-4's text models): one implementation, told apart by the ModelConfig fields
// qkv_bias, o_proj_bias, qk_norm, layer_sliding_windows, Gemma's and Phi-3's.
enum class Architecture {
  kBert,
  kRoberta,
  kLlama,
  kMarian,
  kBart,
  kT5,
  kQwen2,
  kQwen3,
  kMistral,
  kGpt2,
  kDistilBert,
  kGemma2,
  kGemma3,
  kPhi3,
  kGptNeox,
  kGemma,
  kOpt,
  kMpnet,
  kElectra
};

// MPNetEncoder.compute_position_bias's buckets (relative_position_bucket's defaults, which
// transformers passes whatever config.json says): 32 buckets, exact below 8 tokens of distance
// per direction, logarithmic up to 128.
constexpr int64_t kMpnetPositionBuckets = 32;
constexpr int64_t kMpnetMaxDistance = 128;

// "bert", "roberta", "llama", "marian", "bart", "t5", "qwen2", "qwen3", "mistral", "gpt2",
// "distilbert", "gemma", "gemma2", "gemma3_text", "phi3", "gpt_neox", "opt", "mpnet" or
// "electra".
absl::string_view ArchitectureName(Architecture architecture);

// True for the BERT family's encoders (BERT, RoBERTa, DistilBERT, MPNet, ELECTRA), which bert.cc
// serves and whose cross-encoders Attribute explains.
bool IsBertFamily(Architecture architecture);

// True for the decoder-only architectures (GPT-2 and the Llama family, Gemma included), whose
// attention is causal.
bool IsDecoderOnly(Architecture architecture);

// The fields of config.json that the supported architectures read, with the defaults of the
// transformers configuration classes (BertConfig, RobertaConfig, LlamaConfig, Qwen2Config,
// Qwen3Config, MistralConfig, Gemma2Config, Gemma3TextConfig, Phi3Config, GPT2Config,
// GPTNeoXConfig, DistilBertConfig, MPNetConfig, ElectraConfig, MarianConfig, BartConfig, T5Config)
// where config.json omits a field. For the encoder-decoders the common fields hold the encoder's
// sizes (d_model, encoder_layers, encoder_attention_heads, encoder_ffn_dim, activation_function)
// and the decoder_* fields the decoder's. T5Config's fields map onto them as:
//   d_model -> hidden_size; d_kv -> head_dim (num_heads * d_kv may differ from d_model);
//   d_ff -> intermediate_size and decoder_ffn_dim; num_layers -> num_hidden_layers;
//   num_decoder_layers -> decoder_layers; num_heads -> num_attention_heads and
//   decoder_attention_heads; layer_norm_epsilon -> rms_norm_eps; n_positions (default 512) ->
//   max_position_embeddings. GPT2Config's: n_embd -> hidden_size; n_layer -> num_hidden_layers;
//   n_head -> num_attention_heads; n_inner (default 4 * n_embd) -> intermediate_size;
//   n_positions -> max_position_embeddings; activation_function -> hidden_act;
//   layer_norm_epsilon -> layer_norm_eps. GPTNeoXConfig's: rotary_pct (or partial_rotary_factor)
//   * head_dim -> rotary_dim; rotary_emb_base (or rope_theta) -> rope_theta; attention_bias ->
//   qkv_bias and o_proj_bias (query_key_value's and dense's). DistilBertConfig's: dim ->
//   hidden_size; n_layers -> num_hidden_layers; n_heads -> num_attention_heads; hidden_dim ->
//   intermediate_size; activation -> hidden_act. OPTConfig's: ffn_dim -> intermediate_size;
//   activation_function -> hidden_act; do_layer_norm_before and _remove_final_layer_norm ->
//   final_layer_norm.
struct ModelConfig {
  std::string model_type;  // as written in config.json, e.g. "bert" or "xlm-roberta"
  Architecture architecture = Architecture::kBert;
  std::vector<std::string> architectures;  // e.g. {"BertForSequenceClassification"}
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  // Grouped-query attention (Llama): heads that share one key/value head = heads / kv heads.
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json says otherwise
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t type_vocab_size = 0;    // BERT and RoBERTa token type embeddings
  // ELECTRA's embeddings' width (embedding_size), which embeddings_project maps to hidden_size
  // when the two differ; 0 for the other architectures, whose embeddings are hidden_size wide.
  int64_t embedding_size = 0;
  double layer_norm_eps = 1e-12;  // BERT and RoBERTa LayerNorm (1e-5 for marian and bart)
  double rms_norm_eps = 1e-6;     // Llama RMSNorm, T5LayerNorm
  // "gelu" (exact erf) for BERT, RoBERTa and bart, "silu" for Llama and marian; "relu" or
  // "gelu_new" (the tanh approximation) for t5.
  std::string hidden_act;
  double rope_theta = 10000.0;       // RoPE base (Llama)
  bool tie_word_embeddings = false;  // lm_head shares the input embedding matrix
  // -1: not set. RoBERTa requires it: its positions count from it (see max_input_tokens).
  int64_t pad_token_id = -1;
  int64_t bos_token_id = -1;
  int64_t eos_token_id = -1;
  // Every id config.json's eos_token_id lists, eos_token_id first: instruction-tuned checkpoints
  // also end a turn with another token (Gemma 3's [1, 106]: <eos>, <end_of_turn>). Empty for none.
  std::vector<int64_t> eos_token_ids;
  // Encoder-decoders (marian, bart, t5): the decoder's sizes, whether token embeddings are scaled
  // by sqrt(hidden_size) (scale_embedding), and the first decoder token (decoder_start_token_id).
  bool is_encoder_decoder = false;
  int64_t decoder_layers = 0;
  int64_t decoder_attention_heads = 0;
  int64_t decoder_ffn_dim = 0;
  bool scale_embedding = false;
  int64_t decoder_start_token_id = -1;
  // T5 (feed_forward_proj, relative_attention_*): whether the feed-forward is gated (wo(act(wi_0 x)
  // * wi_1 x), "gated-gelu") rather than wo(act(wi x)), and the relative position buckets of
  // T5Attention. With tie_word_embeddings the decoder output is scaled by d_model^-1/2 before the
  // shared embeddings turn it into logits.
  // MPNet's relative_attention_num_buckets sizes its bias table only (at least
  // kMpnetPositionBuckets rows; its max distance is kMpnetMaxDistance).
  bool gated_feed_forward = false;
  int64_t relative_attention_num_buckets = 0;
  int64_t relative_attention_max_distance = 0;
  // The Llama family's variants. qkv_bias: q_proj, k_proj and v_proj have biases (Qwen2 always;
  // llama and qwen3 when attention_bias is true); o_proj_bias: o_proj has one (attention_bias, not
  // Qwen2). qk_norm: each head's queries and keys pass an RMSNorm over head_dim before RoPE
  // (Qwen3's q_norm, k_norm). layer_sliding_windows, one entry per layer: W > 0 lets query i see
  // key j only when i - W < j <= i (Mistral's sliding_window on every layer; Qwen2/Qwen3's with
  // use_sliding_window, on layers from max_window_layers on, or as layer_types says), 0 the whole
  // causal prefix. The window rule is transformers' sliding_window_overlay (masking_utils.py).
  bool qkv_bias = false;
  bool o_proj_bias = false;
  bool qk_norm = false;
  std::vector<int64_t> layer_sliding_windows;
  // "linear" RoPE scaling (rope_scaling {"rope_type": "linear", "factor": f}): the frequencies
  // divided by f (transformers' _compute_linear_scaling_rope_parameters), in every layer but those
  // with a RoPE base of their own (rope_local_theta); 1 for none.
  double rope_linear_factor = 1.0;
  // Gemma 1, 2 and 3 (GemmaConfig, Gemma2Config, Gemma3TextConfig). gemma_norms: every RMSNorm
  // scales by
  // (1 + weight), the stored weight being the offset from 1 (Gemma's RMSNorm), and the token
  // embeddings are multiplied by sqrt(hidden_size) rounded to float32 (the embedding's
  // normalizer). sandwich_norms: the attention's output passes post_attention_layernorm before it
  // joins the residual, and the MLP's input pre_feedforward_layernorm and its output
  // post_feedforward_layernorm (Gemma 2 and 3; Gemma 1's layers are Llama's). attention_scale:
  // the scores' factor, query_pre_attn_scalar^-1/2 (Gemma 2 and 3);
  // 0 for head_dim^-1/2. attn_logit_softcapping and final_logit_softcapping: the scores (before
  // the mask) and the logits become cap * tanh(x / cap) (Gemma 2); 0 for none.
  // rope_local_theta: the RoPE base of the layers with a sliding window (Gemma 3's
  // rope_local_base_freq, unscaled); 0 for rope_theta. Gemma's MLP is gated by GELU's tanh
  // approximation (hidden_act "gelu_pytorch_tanh", from hidden_activation).
  bool gemma_norms = false;
  bool sandwich_norms = false;
  double attention_scale = 0.0;
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  double rope_local_theta = 0.0;
  // RoPE rotates the first rotary_dim dimensions of each head and passes the others through
  // (Phi-3's partial_rotary_factor * head_dim, e.g. 96 of Phi-4-mini's 128); head_dim elsewhere.
  int64_t rotary_dim = 0;
  // Phi-3 (Phi3Config). fused_projections: q, k and v are consecutive rows of one
  // self_attn.qkv_proj [(N + 2 N_kv) * head_dim, hidden], the MLP's gate and up the two halves of
  // mlp.gate_up_proj [2 * intermediate_size, hidden]. LongRoPE (Ding et al. 2024; rope_scaling
  // {"type": "longrope", "short_factor": [...], "long_factor": [...]}, one factor per rotated
  // pair): pair i's frequency divided by rope_short_factors[i] in a sequence of at most
  // rope_original_max_positions tokens (original_max_position_embeddings) and by
  // rope_long_factors[i] in a longer one, cos and sin multiplied by rope_attention_factor
  // (rope_scaling's attention_factor, else sqrt(1 + ln(s) / ln(original)) for s =
  // max_position_embeddings / original > 1, else 1), as transformers'
  // _compute_longrope_parameters. Empty factors: no LongRoPE.
  bool fused_projections = false;
  std::vector<double> rope_short_factors;
  std::vector<double> rope_long_factors;
  int64_t rope_original_max_positions = 0;
  double rope_attention_factor = 1.0;
  // GPT-NeoX (use_parallel_residual): each layer adds attention(input_layernorm(x)) and
  // mlp(post_attention_layernorm(x)) to x, both reading the layer's input; false: the MLP reads
  // the sum after the attention, as in GPT-2.
  bool parallel_residual = false;
  // OPT (OPTDecoder): a final_layer_norm after the last layer (do_layer_norm_before and not
  // _remove_final_layer_norm).
  bool final_layer_norm = true;
  // GPT-2 (GPT2Config): scores divided by sqrt(head_dim) (scale_attn_weights), and also by the
  // layer's 1-based index (scale_attn_by_inverse_layer_idx).
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  // Classifier labels of *ForSequenceClassification checkpoints, by class index.
  std::map<int64_t, std::string> id2label;
  int64_t num_labels = 0;  // id2label size, or num_labels, or 0 when there is no classifier

  int64_t num_queries_per_kv() const { return num_attention_heads / num_key_value_heads; }
  // The longest input in tokens. RoBERTa (and MPNet) gives padding the position pad_token_id and
  // numbers real tokens from pad_token_id + 1 (transformers' create_position_ids_from_input_ids),
  // so its table of max_position_embeddings rows holds max_position_embeddings - pad_token_id - 1
  // tokens (512 of XLM-R's 514); every other architecture's limit is max_position_embeddings.
  int64_t max_input_tokens() const;
};

// Parses the text of a config.json. `source` names the file in error messages.
// InvalidArgument: malformed JSON, a missing or mistyped required field, inconsistent sizes (for
// example hidden_size not divisible by num_attention_heads), or an unsupported model_type (the
// message lists the supported ones). Every size is bounded before anything is allocated from it
// (1 to 1024 layers and heads, up to 2^24 tokens, 2^16 hidden units, 2^18 feed-forward units,
// 2^20 positions, 4096 per head), every token id lies in [0, vocab_size) or is -1 for none, and
// the epsilons and the RoPE base are finite and positive (rope_theta at least 1). RoBERTa's
// pad_token_id must be set and leave at least one position for a token; its
// position_embedding_type, like BERT's, must be "absolute" (the only kind served). The Llama
// family refuses what it would compute differently from transformers: a rope_scaling other than
// "linear" (Phi-3: other than "longrope"), mlp_bias true,
// a hidden_act other than "silu", layer_types other than "full_attention" / "sliding_attention".
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view source);

// Reads and parses `<model_dir>/config.json`. NotFound when the file does not exist;
// InvalidArgument, besides ParseModelConfig's, when it is not a regular file of at most
// kMaxSettingsFileBytes (file_util.h).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_CONFIG_H_
