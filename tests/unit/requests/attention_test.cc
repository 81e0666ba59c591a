// RunAttention (models/requests/attention.cc) in process: its checks before any tokenization, the
// size estimate against the bytes of the answer it would send, and the post-processing (head
// aggregation, windows, top-k, the decoder's side) against the dense answer of the same pass.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using testing::BytesOf;
using ::testing::HasSubstr;
using testing::NewRunner;
using testing::NoCheck;
using ::testing::Not;

constexpr char kText[] = "the quick brown fox jumps over the lazy dog";

AttentionQuery BertQuery() {
  AttentionQuery query;
  query.model = "bert";
  query.input.text = kText;
  return query;
}

TEST(RequestAttentionTest, ContradictoryOptionsAreRefusedBeforeTokenizing) {
  testing::TokenizationCounter counter;
  std::unique_ptr<RequestRunner> runner = NewRunner({}, &counter);
  struct Case {
    std::string name;
    AttentionQuery query;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({"negative top_k", BertQuery(), "top_k -1: expected 0"});
  cases.back().query.top_k = -1;
  cases.push_back({"scores with top_k", BertQuery(), "include_scores with top_k"});
  cases.back().query.include_scores = true;
  cases.back().query.top_k = 2;
  cases.push_back({"scores with words", BertQuery(), "include_scores with aggregate_words"});
  cases.back().query.include_scores = true;
  cases.back().query.aggregate_words = true;
  cases.push_back({"decoder text on an encoder", BertQuery(), "is not an encoder-decoder"});
  cases.back().query.decoder_text = "a target";
  cases.push_back({"empty text", BertQuery(), "text: expected a non-empty UTF-8 text"});
  cases.back().query.input.text.clear();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<AttentionAnswer> answer =
        runner->RunAttention(c.query, NoCheck(), Delivery::kUnary);
    ASSERT_FALSE(answer.ok());
    EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(answer.status().message(), HasSubstr(c.message));
  }
  EXPECT_EQ(counter.tokenized(), 0);
}

TEST(RequestAttentionTest, IndicesOutsideTheModelNameTheField) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  AttentionQuery query = BertQuery();
  const int64_t layers = runner->models()[0]->config().num_hidden_layers;
  query.layers = {static_cast<int32_t>(layers)};
  absl::StatusOr<AttentionAnswer> answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr(absl::StrCat("layer ", layers)));

  query = BertQuery();
  query.window = {/*query_start=*/0, /*query_end=*/1000, /*key_start=*/0, /*key_end=*/0};
  answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr(" tokens; an end of 0 means the end"));
  // Over words, the window counts words, and the message says so.
  query.aggregate_words = true;
  answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_FALSE(answer.ok());
  EXPECT_THAT(answer.status().message(), HasSubstr(" words; an end of 0 means the end"));
}

// Llama 2's tokenizer.json layout (tiny-mistral's) has no pre-tokenizer: Hugging Face's word_ids
// count a whole text as one word, and its words were "<s>" and the text. A token beginning with
// "▁" begins a word, as the same tokenizer read from tokenizer.model splits them.
TEST(RequestAttentionTest, WordsOfASentencePieceTokenizerJsonStartAtEachWordMark) {
  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(testing::LoadModel("mistral", testing::TestDataDir() + "/tiny-mistral"));
  RequestRunner runner(RequestRunner::Options(), std::move(models), /*observer=*/nullptr);
  AttentionQuery query;
  query.model = "mistral";
  query.input.text = "Once upon a time there was a dog";
  query.aggregate_words = true;
  absl::StatusOr<AttentionAnswer> answer = runner.RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(answer.ok()) << answer.status();
  std::vector<std::string> words;
  for (const Word& word : answer->words) words.push_back(word.text);
  EXPECT_THAT(words, ::testing::ElementsAre("<s>", "Once", " upon", " a", " time", " there", " was",
                                            " a", " dog"));
  ASSERT_FALSE(answer->attentions.empty());
  EXPECT_EQ(answer->attentions.front().size(-1), 9);
}

// The bytes an answer puts on the wire: every tensor at the answer's dtype, top-k indices as int32.
int64_t WireBytes(const AttentionAnswer& answer) {
  const int64_t element = BytesPerElement(answer.dtype);
  int64_t bytes = BytesOf(answer.attentions, element) + BytesOf(answer.scores, element) +
                  BytesOf(answer.top_k_indices, 4) + BytesOf(answer.decoder_attentions, element) +
                  BytesOf(answer.cross_attentions, element) +
                  BytesOf(answer.decoder_top_k_indices, 4) + BytesOf(answer.cross_top_k_indices, 4);
  if (answer.rollout.defined()) bytes += answer.rollout.numel() * element;
  return bytes;
}

// The estimate made before the forward pass is the answer's size exactly: a cap of that many bytes
// passes, one byte less is refused with the figure.
TEST(RequestAttentionTest, SizeEstimateIsTheAnswersSize) {
  std::vector<std::pair<std::string, AttentionQuery>> queries;
  queries.push_back({"dense", BertQuery()});
  queries.push_back({"head mean, float16", BertQuery()});
  queries.back().second.head_aggregation = HeadAggregation::kMean;
  queries.back().second.dtype = OutputDType::kFloat16;
  queries.push_back({"window, one layer", BertQuery()});
  queries.back().second.window = {1, 4, 2, 6};
  queries.back().second.layers = {-1};
  queries.push_back({"top_k", BertQuery()});
  queries.back().second.top_k = 3;
  queries.push_back({"scores and rollout", BertQuery()});
  queries.back().second.include_scores = true;
  queries.back().second.rollout = true;
  queries.push_back({"words", BertQuery()});
  queries.back().second.aggregate_words = true;
  queries.push_back({"decoder text", AttentionQuery()});
  queries.back().second.model = "bart";
  queries.back().second.input.text = "hello world";
  queries.back().second.decoder_text = "a short target";
  queries.back().second.top_k = 2;

  std::unique_ptr<RequestRunner> unlimited = NewRunner();
  for (const auto& [name, query] : queries) {
    SCOPED_TRACE(name);
    absl::StatusOr<AttentionAnswer> streamed =
        unlimited->RunAttention(query, NoCheck(), Delivery::kStream);
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    const int64_t bytes = WireBytes(*streamed);
    ASSERT_GT(bytes, 0);

    RequestRunner::Options at_cap;
    at_cap.max_response_bytes = bytes;
    EXPECT_TRUE(NewRunner(at_cap)->RunAttention(query, NoCheck(), Delivery::kUnary).ok());
    RequestRunner::Options below;
    below.max_response_bytes = bytes - 1;
    std::unique_ptr<RequestRunner> small = NewRunner(below);
    absl::StatusOr<AttentionAnswer> refused =
        small->RunAttention(query, NoCheck(), Delivery::kUnary);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(refused.status().message(),
                HasSubstr(absl::StrCat("GetAttention response would be ", bytes, " bytes")));
    // A stream has no cap.
    EXPECT_TRUE(small->RunAttention(query, NoCheck(), Delivery::kStream).ok());
  }
}

// Answers held at once (a stream's until its client has read it) stay under
// max_answer_bytes_in_flight: the next call is refused before its pass while they are held, and
// served once they are gone. A call alone is served whatever its size.
TEST(RequestAttentionTest, AnswersHeldAtOnceStayUnderTheBudget) {
  AttentionQuery query = BertQuery();
  const int64_t bytes =
      BytesOf(NewRunner()->RunAttention(query, NoCheck(), Delivery::kStream).value().attentions,
              /*bytes_per_element=*/4);
  ASSERT_GT(bytes, 0);
  RequestRunner::Options options;
  options.max_answer_bytes_in_flight = bytes + bytes / 2;
  std::unique_ptr<RequestRunner> runner = NewRunner(options);

  std::optional<absl::StatusOr<AttentionAnswer>> first =
      runner->RunAttention(query, NoCheck(), Delivery::kStream);
  ASSERT_TRUE(first->ok()) << first->status();
  for (const Delivery delivery : {Delivery::kStream, Delivery::kUnary}) {
    const absl::StatusOr<AttentionAnswer> refused =
        runner->RunAttention(query, NoCheck(), delivery);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(refused.status().message(),
                HasSubstr(absl::StrCat("would hold ", bytes,
                                       " bytes while the answers being "
                                       "computed or read by their clients hold ",
                                       bytes)));
    EXPECT_THAT(refused.status().message(), HasSubstr("--max_answer_bytes_in_flight"));
  }
  // A copy holds the reservation as the original does.
  const AttentionAnswer copy = **first;
  first.reset();
  EXPECT_FALSE(runner->RunAttention(query, NoCheck(), Delivery::kStream).ok());
}

// Counts the answer budget's refusals by what refused them.
class RefusalCounter : public testing::TokenizationCounter {
 public:
  void OnAnswerBytesRefused(bool over_client_share) override {
    ++(over_client_share ? over_share_ : over_limit_);
  }
  int over_share() const { return over_share_; }
  int over_limit() const { return over_limit_; }

 private:
  int over_share_ = 0;
  int over_limit_ = 0;
};

// One client's answers stay under its share of the budget while other clients' are served beside
// them: the budget takes five answers, a client's share two (fewer near full).
TEST(RequestAttentionTest, AClientsAnswersStayUnderItsShare) {
  AttentionQuery query = BertQuery();
  const int64_t bytes =
      BytesOf(NewRunner()->RunAttention(query, NoCheck(), Delivery::kStream).value().attentions,
              /*bytes_per_element=*/4);
  ASSERT_GT(bytes, 0);
  RequestRunner::Options options;
  options.max_answer_bytes_in_flight = 5 * bytes;
  options.max_answer_bytes_per_client = 2 * bytes;
  RefusalCounter refusals;
  std::unique_ptr<RequestRunner> runner = NewRunner(options, &refusals);

  std::vector<AttentionAnswer> held;
  for (int call = 0; call < 2; ++call) {
    absl::StatusOr<AttentionAnswer> answer =
        runner->RunAttention(query, NoCheck(), Delivery::kStream, /*client=*/"a");
    ASSERT_TRUE(answer.ok()) << answer.status();
    held.push_back(*std::move(answer));
  }
  const absl::StatusOr<AttentionAnswer> refused =
      runner->RunAttention(query, NoCheck(), Delivery::kUnary, /*client=*/"a");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status().message(),
              HasSubstr(absl::StrCat("GetAttention's answer would hold ", bytes,
                                     " bytes while this client's answers being computed or read "
                                     "hold ",
                                     2 * bytes, ", over its share of ", 2 * bytes,
                                     " bytes (--max_answer_bytes_per_client")));
  EXPECT_EQ(refusals.over_share(), 1);
  EXPECT_EQ(refusals.over_limit(), 0);
  // Another client, and a call of nobody in particular, still find room in the budget.
  for (const char* other : {"b", ""}) {
    absl::StatusOr<AttentionAnswer> answer =
        runner->RunAttention(query, NoCheck(), Delivery::kStream, other);
    ASSERT_TRUE(answer.ok()) << other << ": " << answer.status();
    held.push_back(*std::move(answer));
  }
  // Past three quarters of the budget a client's share is an equal part among the clients holding
  // answers and one more: the other client's second answer would leave no room for a third.
  const absl::StatusOr<AttentionAnswer> past_part =
      runner->RunAttention(query, NoCheck(), Delivery::kStream, /*client=*/"b");
  ASSERT_FALSE(past_part.ok());
  EXPECT_THAT(past_part.status().message(),
              HasSubstr(absl::StrCat("over its share of ", 5 * bytes / 3,
                                     " bytes (while the answers held fill over three quarters")));
  EXPECT_EQ(refusals.over_share(), 2);
  // The third client's answer finds that room; then the budget is full, and the server's limit
  // refuses the next client.
  absl::StatusOr<AttentionAnswer> third =
      runner->RunAttention(query, NoCheck(), Delivery::kStream, /*client=*/"c");
  ASSERT_TRUE(third.ok()) << third.status();
  held.push_back(*std::move(third));
  const absl::StatusOr<AttentionAnswer> full =
      runner->RunAttention(query, NoCheck(), Delivery::kStream, /*client=*/"d");
  ASSERT_FALSE(full.ok());
  EXPECT_THAT(full.status().message(), HasSubstr("--max_answer_bytes_in_flight"));
  EXPECT_THAT(full.status().message(), Not(HasSubstr("--max_answer_bytes_per_client")));
  EXPECT_EQ(refusals.over_share(), 2);
  EXPECT_EQ(refusals.over_limit(), 1);
  // Once its answers are gone the first client is served again.
  held.erase(held.begin(), held.begin() + 2);
  EXPECT_TRUE(runner->RunAttention(query, NoCheck(), Delivery::kStream, /*client=*/"a").ok());
}

TEST(RequestAttentionTest, AnswersAreServedAgainOnceTheHeldOnesAreGone) {
  AttentionQuery query = BertQuery();
  RequestRunner::Options options;
  options.max_answer_bytes_in_flight = 1;
  std::unique_ptr<RequestRunner> runner = NewRunner(options);
  for (int call = 0; call < 3; ++call) {
    // Each alone: over the limit, but nothing else is held.
    absl::StatusOr<AttentionAnswer> answer =
        runner->RunAttention(query, NoCheck(), Delivery::kStream);
    ASSERT_TRUE(answer.ok()) << answer.status();
  }
}

TEST(RequestAttentionTest, PostProcessingMatchesTheDenseAnswer) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  absl::StatusOr<AttentionAnswer> dense =
      runner->RunAttention(BertQuery(), NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(dense.ok()) << dense.status();
  const int64_t layers = static_cast<int64_t>(dense->layers.size());
  ASSERT_EQ(dense->attentions.size(), static_cast<size_t>(layers));
  const int64_t length = static_cast<int64_t>(dense->tokens.encoding.size());
  EXPECT_EQ(dense->attentions[0].sizes().vec(),
            (std::vector<int64_t>{static_cast<int64_t>(dense->heads.size()), length, length}));

  AttentionQuery mean = BertQuery();
  mean.head_aggregation = HeadAggregation::kMean;
  absl::StatusOr<AttentionAnswer> averaged =
      runner->RunAttention(mean, NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(averaged.ok()) << averaged.status();
  AttentionQuery window = BertQuery();
  window.window = {/*query_start=*/1, /*query_end=*/4, /*key_start=*/2, /*key_end=*/6};
  absl::StatusOr<AttentionAnswer> cut = runner->RunAttention(window, NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(cut.ok()) << cut.status();
  AttentionQuery top = BertQuery();
  top.top_k = 3;
  absl::StatusOr<AttentionAnswer> largest = runner->RunAttention(top, NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(largest.ok()) << largest.status();

  for (int64_t layer = 0; layer < layers; ++layer) {
    SCOPED_TRACE(absl::StrCat("layer ", layer));
    const torch::Tensor& full = dense->attentions[layer];
    EXPECT_TRUE(torch::allclose(averaged->attentions[layer], full.mean(0, /*keepdim=*/true),
                                /*rtol=*/1e-5, /*atol=*/1e-6));
    EXPECT_TRUE(torch::equal(cut->attentions[layer], full.narrow(1, 1, 3).narrow(2, 2, 4)));
    const auto [values, indices] = full.topk(3, /*dim=*/-1);
    EXPECT_TRUE(torch::allclose(largest->attentions[layer], values));
    EXPECT_TRUE(torch::equal(largest->top_k_indices[layer].to(torch::kInt64), indices));
  }
}

TEST(RequestAttentionTest, DecoderTextGivesTheDecodersSelfAndCrossAttention) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  AttentionQuery query;
  query.model = "bart";
  query.input.text = "hello world, a source longer than its target";
  query.decoder_text = "a short target";
  absl::StatusOr<AttentionAnswer> answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(answer.ok()) << answer.status();
  ASSERT_TRUE(answer->decoder_tokens.has_value());
  ASSERT_TRUE(answer->decoder_labels.has_value());
  const int64_t source = static_cast<int64_t>(answer->tokens.encoding.size());
  const int64_t target = static_cast<int64_t>(answer->decoder_tokens->encoding.size());
  // The decoder reads its start token and the labels but the last: one position each.
  EXPECT_EQ(answer->decoder_labels->encoding.size(), static_cast<size_t>(target));
  const int64_t heads = static_cast<int64_t>(answer->decoder_heads.size());
  ASSERT_EQ(answer->decoder_attentions.size(), answer->decoder_layers.size());
  ASSERT_EQ(answer->cross_attentions.size(), answer->decoder_layers.size());
  for (size_t layer = 0; layer < answer->decoder_layers.size(); ++layer) {
    const torch::Tensor& self = answer->decoder_attentions[layer];
    const torch::Tensor& cross = answer->cross_attentions[layer];
    EXPECT_EQ(self.sizes().vec(), (std::vector<int64_t>{heads, target, target}));
    EXPECT_EQ(cross.sizes().vec(), (std::vector<int64_t>{heads, target, source}));
    EXPECT_TRUE(torch::allclose(self.sum(-1), torch::ones({heads, target}), 1e-4, 1e-5));
    EXPECT_TRUE(torch::allclose(cross.sum(-1), torch::ones({heads, target}), 1e-4, 1e-5));
    // Causal: no position attends to a later one.
    EXPECT_EQ(self.triu(/*diagonal=*/1).abs().max().item<float>(), 0.0f);
  }
  // A top_k over the decoder's length but within the source's is refused naming the block it
  // does not fit, with that block's length.
  ASSERT_LT(target, source);
  query.top_k = target + 1;
  answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(),
              HasSubstr(absl::StrCat("expected a value in [1, ", target,
                                     "] (the rows of the decoder's self-attention")));
  query.top_k = target;
  answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->cross_attentions[0].size(-1), target);
}

// A decoder text far over the decoder's positions is tokenized only as far as a prefix over them,
// as every other text is: the refusal says "more than" instead of the whole text's count.
TEST(RequestAttentionTest, ALongDecoderTextIsRefusedFromAPrefix) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  AttentionQuery query;
  query.model = "bart";
  query.input.text = "hello world";
  query.decoder_text.emplace();
  for (int i = 0; i < 200000; ++i) query.decoder_text->append("hello world ");
  absl::StatusOr<AttentionAnswer> answer = runner->RunAttention(query, NoCheck(), Delivery::kUnary);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(answer.status().message(), HasSubstr("decoder_text: expected at most"));
  EXPECT_THAT(answer.status().message(), HasSubstr("got more than"));
}

}  // namespace
}  // namespace attnscope
