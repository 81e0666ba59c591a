// What the request layer's use cases share: texts in and their tokens out, the dtype of answer
// tensors, words, and Tokenize's query and answer. See requests.h for the layer.
#ifndef ATTNSCOPE_MODELS_REQUESTS_TYPES_H_
#define ATTNSCOPE_MODELS_REQUESTS_TYPES_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "models/attention_ops.h"
#include "models/engine.h"

namespace attnscope {

// Element type of the float tensors of an answer on the wire (DTYPE_FLOAT32, DTYPE_FLOAT16,
// DTYPE_BFLOAT16 in the contract).
enum class OutputDType { kFloat32, kFloat16, kBFloat16 };

// Bytes per element: 4 for float32, 2 for float16 and bfloat16.
int64_t BytesPerElement(OutputDType dtype);

// How a text or text pair becomes tokens (TokenizationOptions in the contract).
struct TokenizationQuery {
  // Unset: the RPC's default (none; longest_first for CrossAttention).
  std::optional<Truncation> truncation;
  // Token budget including special tokens when truncating; 0 = the model's limit. InvalidArgument
  // when negative, or when set without truncation.
  int64_t max_length = 0;
  bool skip_special_tokens = false;
};

// One text or text pair. Texts must be valid UTF-8 and yield at least one token of their own (an
// empty or whitespace-only text is refused, whatever the field).
struct TextInput {
  std::string text;
  std::optional<std::string> text_pair;
};

// An encoding together with each token's original text: the bytes of the text it came from at its
// byte offsets ("" for special tokens), so that a display can show "Tôi" where the token is "toi".
struct EncodedText {
  Encoding encoding;
  std::vector<std::string> original_texts;
};

// Whether an answer is sent as one message (size-checked against the cap before the forward pass)
// or streamed layer by layer (no cap).
enum class Delivery { kUnary, kStream };

struct TokenizeQuery {
  std::string model;  // empty = the first loaded model
  TextInput input;
  TokenizationQuery tokenization;
};

struct TokenizeAnswer {
  const LoadedModel* model = nullptr;
  EncodedText tokens;
};

// One word of an answer whose axes count words (aggregate_words).
struct Word {
  // The caller's text from the word's first token to its last ("Tôi" for "to" "##i"); the token
  // itself for a special token.
  std::string text;
  WordSpan tokens;
  // 0 = first text, 1 = second, -1 = special token.
  int64_t sequence_id = -1;
  // Code-point and byte span in the text given by sequence_id; {0, 0} for special tokens.
  Offset offsets;
  Offset byte_offsets;
};

// What shrinks an over-cap Tokenize answer.
inline constexpr absl::string_view kTokenizeFixes = "send a shorter text";

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_TYPES_H_
