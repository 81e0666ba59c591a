// The Attribute RPC through a real attnscope-server: its token attributions equal the PyTorch
// autograd golden (tests/data/make_attribution_golden.py) over gRPC, HTTP/JSON and the CLI; word
// values are the sums of their tokens; integrated gradients are complete; bad input gets clear
// errors while the server keeps serving; the RPC is counted in /metrics.
#include <google/protobuf/util/json_util.h>
#include <httplib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// The golden's tolerance (tests/unit/attribution_test.cc): float32 against a float64 reference.
constexpr double kGoldenTolerance = 1e-4;

std::string ReadFile(const std::string& path) {
  std::ifstream file(path);
  std::stringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

// The text of sequence `sequence` of a golden case: its WordPiece tokens joined back into words
// ("capital" "##s" -> "capitals"), the words separated by spaces.
std::string GoldenText(const json& c, int sequence) {
  std::string text;
  int64_t word = -1;
  for (size_t i = 0; i < c["tokens"].size(); ++i) {
    if (c["sequence_ids"][i] != sequence) continue;
    std::string token = c["tokens"][i];
    if (c["word_ids"][i] != word) {
      if (!text.empty()) text += " ";
      word = c["word_ids"][i];
    }
    text += token.rfind("##", 0) == 0 ? token.substr(2) : token;
  }
  return text;
}

// The request of a golden case: its texts, target, baseline and steps.
v1::AttributeRequest GoldenRequest(const json& c) {
  v1::AttributeRequest request;
  request.set_model("bert");
  request.set_text(GoldenText(c, 0));
  const std::string pair = GoldenText(c, 1);
  if (!pair.empty()) request.set_text_pair(pair);
  request.set_target(c["target"]);
  request.set_baseline(c["baseline"] == "zero" ? v1::ATTRIBUTION_BASELINE_ZERO
                                               : v1::ATTRIBUTION_BASELINE_PAD);
  request.set_integrated_gradients_steps(c["integrated_gradients_steps"]);
  return request;
}

// The golden's values at the real (unpadded) positions: the server pads nothing.
std::vector<double> Unpadded(const json& c, const json& values) {
  std::vector<double> out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (c["attention_mask"][i] == 1) out.push_back(values[i]);
  }
  return out;
}

std::vector<int64_t> UnpaddedIds(const json& c, const char* key) {
  std::vector<int64_t> out;
  for (const double value : Unpadded(c, c[key])) out.push_back(static_cast<int64_t>(value));
  return out;
}

double MaxAbsDifference(const google::protobuf::RepeatedField<float>& got,
                        const std::vector<double>& want) {
  EXPECT_EQ(static_cast<size_t>(got.size()), want.size());
  double worst = 0.0;
  for (size_t i = 0; i < want.size() && i < static_cast<size_t>(got.size()); ++i) {
    worst = std::max(worst, std::abs(got[static_cast<int>(i)] - want[i]));
  }
  return worst;
}

// `format` with one double, as printf.
std::string Format(const char* format, double value) {
  char out[128];
  std::snprintf(out, sizeof(out), format, value);
  return out;
}

double Sum(const google::protobuf::RepeatedField<float>& values) {
  double sum = 0.0;
  for (const float value : values) sum += value;
  return sum;
}

// Two answers of the same request: the same tokens and words, and the same values up to float
// rounding.
void ExpectSameAnswer(const v1::AttributeResponse& a, const v1::AttributeResponse& b) {
  EXPECT_EQ(a.tokens().input_ids_size(), b.tokens().input_ids_size());
  EXPECT_TRUE(std::equal(a.tokens().input_ids().begin(), a.tokens().input_ids().end(),
                         b.tokens().input_ids().begin(), b.tokens().input_ids().end()));
  EXPECT_NEAR(a.score(), b.score(), 1e-6);
  EXPECT_NEAR(a.baseline_score(), b.baseline_score(), 1e-6);
  for (const auto& [x, y] : {std::pair{&a.occlusion(), &b.occlusion()},
                             std::pair{&a.gradient_x_input(), &b.gradient_x_input()},
                             std::pair{&a.integrated_gradients(), &b.integrated_gradients()}}) {
    ASSERT_EQ(x->size(), y->size());
    for (int i = 0; i < x->size(); ++i) EXPECT_NEAR(x->Get(i), y->Get(i), 1e-6);
  }
  ASSERT_EQ(a.words_size(), b.words_size());
  for (int i = 0; i < a.words_size(); ++i) {
    EXPECT_EQ(a.words(i).text(), b.words(i).text());
    EXPECT_NEAR(a.words(i).integrated_gradients(), b.words(i).integrated_gradients(), 1e-6);
  }
}

class AttributeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_ = new json(json::parse(ReadFile(TinyBertDir() + "/attribution_golden.json")));
    // A BERT without a classifier head, and a larger cross-encoder whose vocabulary has no [MASK]
    // and whose long inputs take seconds to attribute (for the deadline).
    no_classifier_dir_ = new TempDir();
    BertShape small;
    small.layers = 2;
    small.hidden = 32;
    small.heads = 2;
    small.intermediate = 64;
    small.max_positions = 64;
    small.vocab = 100;
    ASSERT_TRUE(WriteRandomBert(small, no_classifier_dir_->path()).ok());
    no_mask_dir_ = new TempDir();
    ASSERT_TRUE(WriteRandomBert(NoMaskShape(), no_mask_dir_->path()).ok());
    const std::string vocab_path = no_mask_dir_->path() + "/vocab.txt";
    const std::string vocab = ReadFile(vocab_path);
    std::ofstream(vocab_path) << absl::StrReplaceAll(vocab, {{"[MASK]\n", "mask\n"}});
    // The tokenizer's mask token must be in the vocabulary too: a [MASK] it added after the last
    // row of the embeddings would make the server refuse the model.
    const std::string tokenizer_config_path = no_mask_dir_->path() + "/tokenizer_config.json";
    json tokenizer_config = json::parse(ReadFile(tokenizer_config_path));
    tokenizer_config["mask_token"] = "mask";
    std::ofstream(tokenizer_config_path) << tokenizer_config.dump();

    ServerProcess::Options options;
    options.models = {"bert=" + TinyBertDir(), "llama=" + Stories260kDir(),
                      "encoder=" + no_classifier_dir_->path(), "nomask=" + no_mask_dir_->path()};
    options.metrics_port = FreeTcpPort();
    options.extra_flags = {"--dashboard_dir="};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    ASSERT_GT(server_->http_port(), 0);
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    delete golden_;
    delete no_classifier_dir_;
    delete no_mask_dir_;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr) << "the server did not start";
    client_ = server_->NewClient();
  }

  static BertShape NoMaskShape() {
    BertShape shape;
    shape.layers = 4;
    shape.hidden = 256;
    shape.heads = 4;
    shape.intermediate = 1024;
    shape.classifier = true;
    return shape;
  }

  static const json& Case(const char* name) { return (*golden_)[name]; }

  v1::AttributeResponse Attribute(const v1::AttributeRequest& request) {
    absl::StatusOr<v1::AttributeResponse> response = client_->Attribute(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.ok() ? *std::move(response) : v1::AttributeResponse();
  }

  static ServerProcess* server_;
  static json* golden_;
  static TempDir* no_classifier_dir_;
  static TempDir* no_mask_dir_;
  std::unique_ptr<Client> client_;
};

ServerProcess* AttributeTest::server_ = nullptr;
json* AttributeTest::golden_ = nullptr;
TempDir* AttributeTest::no_classifier_dir_ = nullptr;
TempDir* AttributeTest::no_mask_dir_ = nullptr;

TEST_F(AttributeTest, MatchesPyTorchAutogradGolden) {
  for (const char* name : {"pair", "padded", "zero_baseline"}) {
    SCOPED_TRACE(name);
    const json& c = Case(name);
    const json& expected = c["expected"];
    const v1::AttributeResponse response = Attribute(GoldenRequest(c));
    // The server tokenized the texts into the golden's inputs.
    const v1::Tokens& tokens = response.tokens();
    EXPECT_EQ(std::vector<int64_t>(tokens.input_ids().begin(), tokens.input_ids().end()),
              UnpaddedIds(c, "input_ids"));
    EXPECT_EQ(std::vector<int64_t>(tokens.token_type_ids().begin(), tokens.token_type_ids().end()),
              UnpaddedIds(c, "token_type_ids"));
    EXPECT_EQ(std::vector<int64_t>(tokens.word_ids().begin(), tokens.word_ids().end()),
              UnpaddedIds(c, "word_ids"));
    EXPECT_EQ(response.model(), "bert");
    EXPECT_EQ(response.target(), 0);
    EXPECT_NEAR(response.score(), expected["score"].get<double>(), kGoldenTolerance);
    EXPECT_NEAR(response.baseline_score(), expected["baseline_score"].get<double>(),
                kGoldenTolerance);
    EXPECT_EQ(response.integrated_gradients_steps(), c["integrated_gradients_steps"]);
    for (const auto& [method, values] :
         {std::pair{"occlusion", &response.occlusion()},
          std::pair{"gradient_x_input", &response.gradient_x_input()},
          std::pair{"integrated_gradients", &response.integrated_gradients()}}) {
      EXPECT_LE(MaxAbsDifference(*values, Unpadded(c, expected[method])), kGoldenTolerance)
          << method;
    }
  }
}

TEST_F(AttributeTest, WordsAreTheSumsOfTheirTokens) {
  const v1::AttributeRequest request = GoldenRequest(Case("pair"));
  const v1::AttributeResponse response = Attribute(request);
  const v1::Tokens& tokens = response.tokens();
  // "what is the capitals of france" and "paris is the capital city of france".
  ASSERT_EQ(response.words_size(), 13);
  for (const v1::WordAttribution& word : response.words()) {
    SCOPED_TRACE(word.text());
    ASSERT_LT(word.token_start(), word.token_end());
    ASSERT_LE(word.token_end(), tokens.tokens_size());
    double occlusion = 0, gradient_x_input = 0, integrated_gradients = 0;
    for (int i = word.token_start(); i < word.token_end(); ++i) {
      EXPECT_EQ(tokens.word_ids(i), word.word_id());
      EXPECT_EQ(tokens.sequence_ids(i), word.sequence_id());
      occlusion += response.occlusion(i);
      gradient_x_input += response.gradient_x_input(i);
      integrated_gradients += response.integrated_gradients(i);
    }
    EXPECT_NEAR(word.occlusion(), occlusion, 1e-5);
    EXPECT_NEAR(word.gradient_x_input(), gradient_x_input, 1e-5);
    EXPECT_NEAR(word.integrated_gradients(), integrated_gradients, 1e-5);
    // The word's text is the caller's, at its byte offsets.
    const std::string& source = word.sequence_id() == 0 ? request.text() : request.text_pair();
    EXPECT_EQ(word.text(), source.substr(word.byte_offsets().start(),
                                         word.byte_offsets().end() - word.byte_offsets().start()));
  }
  EXPECT_EQ(response.words(3).text(), "capitals");
  EXPECT_EQ(response.words(3).token_end() - response.words(3).token_start(), 2);
  EXPECT_EQ(response.words(6).text(), "paris");
  EXPECT_EQ(response.words(6).sequence_id(), 1);
  EXPECT_EQ(response.words(6).word_id(), 0);
}

TEST_F(AttributeTest, IntegratedGradientsCompleteAtTheDefaultSteps) {
  v1::AttributeRequest request = GoldenRequest(Case("pair"));
  request.set_integrated_gradients_steps(0);
  request.add_methods(v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS);
  const v1::AttributeResponse response = Attribute(request);
  EXPECT_EQ(response.integrated_gradients_steps(), 50);
  // Only the method asked for ran.
  EXPECT_TRUE(response.occlusion().empty());
  EXPECT_TRUE(response.gradient_x_input().empty());
  EXPECT_FALSE(response.words(0).has_occlusion());
  const double difference = response.score() - response.baseline_score();
  ASSERT_GT(std::abs(difference), 0.05) << "too small a difference to measure completeness";
  ASSERT_TRUE(response.has_convergence_delta());
  const double delta = Sum(response.integrated_gradients()) - difference;
  EXPECT_NEAR(response.convergence_delta(), delta, 1e-5);
  std::printf("completeness error %.3f%% of score - baseline score\n",
              100 * std::abs(delta / difference));
  EXPECT_LE(std::abs(delta), 0.01 * std::abs(difference));
}

TEST_F(AttributeTest, HttpAnswersWhatGrpcAnswers) {
  const v1::AttributeRequest request = GoldenRequest(Case("padded"));
  const v1::AttributeResponse grpc = Attribute(request);
  // Texts as plain JSON strings, enums by name.
  const std::string body = json{{"model", request.model()},
                                {"text", request.text()},
                                {"textPair", request.text_pair()},
                                {"baseline", v1::AttributionBaseline_Name(request.baseline())},
                                {"integratedGradientsSteps", request.integrated_gradients_steps()}}
                               .dump();
  httplib::Client http("127.0.0.1", server_->http_port());
  http.set_read_timeout(60);
  httplib::Result result =
      http.Post("/attnscope.v1.AttentionService/Attribute", body, "application/json");
  ASSERT_TRUE(result);
  ASSERT_EQ(result->status, 200) << result->body;
  // Protobuf's JSON mapping: lowerCamelCase names.
  EXPECT_THAT(result->body, HasSubstr("\"integratedGradients\""));
  v1::AttributeResponse answer;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(result->body, &answer).ok());
  ExpectSameAnswer(answer, grpc);
  EXPECT_LE(MaxAbsDifference(
                answer.integrated_gradients(),
                Unpadded(Case("padded"), Case("padded")["expected"]["integrated_gradients"])),
            kGoldenTolerance);

  // Bad input gets the same code and message as over gRPC.
  result = http.Post("/attnscope.v1.AttentionService/Attribute",
                     R"({"model": "bert", "text": "paris", "integratedGradientsSteps": 5000})",
                     "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  const json error = json::parse(result->body);
  EXPECT_EQ(error["code"], "invalid_argument");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("integrated_gradients_steps 5000"));
}

TEST_F(AttributeTest, CliPrintsTheValues) {
  const v1::AttributeRequest request = GoldenRequest(Case("pair"));
  const v1::AttributeResponse grpc = Attribute(request);
  const std::vector<std::string> base = {CliBinary(),
                                         "attribute",
                                         "--server=" + server_->address(),
                                         "--model=bert",
                                         "--text=" + request.text(),
                                         "--text_pair=" + request.text_pair()};

  std::vector<std::string> args = base;
  args.push_back("--format=json");
  CommandResult result = RunCommand(args);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
  const json out = json::parse(result.stdout_text);
  EXPECT_EQ(out["model"], "bert");
  ASSERT_EQ(out["integrated_gradients"].size(), static_cast<size_t>(grpc.tokens().tokens_size()));
  for (int i = 0; i < grpc.integrated_gradients_size(); ++i) {
    EXPECT_NEAR(out["integrated_gradients"][i].get<double>(), grpc.integrated_gradients(i), 1e-6);
    EXPECT_NEAR(out["occlusion"][i].get<double>(), grpc.occlusion(i), 1e-6);
  }
  EXPECT_EQ(out["words"].size(), static_cast<size_t>(grpc.words_size()));

  // The table: the document's words highest integrated gradients first, then the query's.
  result = RunCommand(base);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
  const std::string& text = result.stdout_text;
  EXPECT_THAT(text, HasSubstr(Format("score %.4f (model bert, target 0", grpc.score())));
  const size_t document = text.find("words of text_pair, highest integrated_gradients first:");
  const size_t query = text.find("words of text, highest integrated_gradients first:");
  const size_t tokens = text.find("tokens in order:");
  ASSERT_NE(document, std::string::npos) << text;
  ASSERT_NE(query, std::string::npos) << text;
  ASSERT_NE(tokens, std::string::npos) << text;
  EXPECT_LT(document, query);
  EXPECT_LT(query, tokens);
  const v1::WordAttribution* top = nullptr;
  for (const v1::WordAttribution& word : grpc.words()) {
    if (word.sequence_id() == 1 &&
        (top == nullptr || word.integrated_gradients() > top->integrated_gradients())) {
      top = &word;
    }
  }
  ASSERT_NE(top, nullptr);
  // The row after the column header is the top document word, with its value.
  std::vector<std::string> lines = absl::StrSplit(text.substr(document), '\n');
  ASSERT_GE(lines.size(), 3u);
  EXPECT_THAT(lines[1], HasSubstr("integrated_gradients"));
  EXPECT_THAT(lines[2], HasSubstr(top->text()));
  EXPECT_THAT(lines[2], HasSubstr(Format("%.4f", top->integrated_gradients())));

  // Options, and the flags --help documents.
  args = base;
  args.insert(args.end(), {"--method=occlusion", "--occlusion_token=unk", "--format=json"});
  result = RunCommand(args);
  ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
  const json occlusion = json::parse(result.stdout_text);
  EXPECT_TRUE(occlusion["integrated_gradients"].empty());
  EXPECT_EQ(occlusion["occlusion"].size(), static_cast<size_t>(grpc.tokens().tokens_size()));
  result = RunCommand({CliBinary(), "--help"});
  for (const char* flag :
       {"attribute", "--method", "--steps", "--target", "--occlusion_token", "--baseline"}) {
    EXPECT_THAT(result.stdout_text, HasSubstr(flag));
  }
  for (const auto& [flag, message] : std::vector<std::pair<std::string, std::string>>{
           {"--method=saliency", "--method: 'saliency' in 'saliency' is not one of"},
           {"--steps=many", "--steps: 'many' is not an integer"},
           {"--baseline=blur", "--baseline: 'blur' is not one of pad, zero"},
           {"--format=csv", "--format: 'csv' is not one of text, json"}}) {
    args = base;
    args.push_back(flag);
    result = RunCommand(args);
    EXPECT_EQ(result.exit_code, 2) << flag;
    EXPECT_THAT(result.stderr_text, HasSubstr(message));
  }
  // A server error exits 1 with the code and the server's message.
  args = base;
  args.push_back("--steps=-3");
  result = RunCommand(args);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("INVALID_ARGUMENT: integrated_gradients_steps -3"));
}

TEST_F(AttributeTest, BadInputGetsClearErrorsAndTheServerKeepsServing) {
  v1::AttributeRequest normal;
  normal.set_model("bert");
  normal.set_text("the capital of france");
  normal.set_text_pair("paris");
  const v1::AttributeResponse before = Attribute(normal);
  struct Row {
    std::string name;
    v1::AttributeRequest request;
    absl::StatusCode code;
    std::vector<std::string> message_parts;
  };
  auto with = [&normal](auto change) {
    v1::AttributeRequest request = normal;
    change(request);
    return request;
  };
  const std::vector<Row> rows = {
      {"unknown model",
       with([](auto& r) { r.set_model("nope"); }),
       absl::StatusCode::kNotFound,
       {"model 'nope'", "loaded models"}},
      {"decoder-only model",
       with([](auto& r) { r.set_model("llama"); }),
       absl::StatusCode::kUnimplemented,
       {"model 'llama'", "decoder-only", "cross-encoder"}},
      {"no classifier",
       with([](auto& r) { r.set_model("encoder"); }),
       absl::StatusCode::kInvalidArgument,
       {"model 'encoder'", "classifier head"}},
      {"no [MASK]",
       with([](auto& r) { r.set_model("nomask"); }),
       absl::StatusCode::kInvalidArgument,
       {"occlusion_token", "[MASK]", "OCCLUSION_TOKEN_UNK"}},
      {"negative steps",
       with([](auto& r) { r.set_integrated_gradients_steps(-1); }),
       absl::StatusCode::kInvalidArgument,
       {"integrated_gradients_steps -1", "1000"}},
      {"too many steps",
       with([](auto& r) { r.set_integrated_gradients_steps(1001); }),
       absl::StatusCode::kInvalidArgument,
       {"integrated_gradients_steps 1001", "1000"}},
      {"empty text",
       with([](auto& r) { r.set_text(""); }),
       absl::StatusCode::kInvalidArgument,
       {"text: expected a non-empty"}},
      {"whitespace document",
       with([](auto& r) { r.set_text_pair("   "); }),
       absl::StatusCode::kInvalidArgument,
       {"text_pair: expected text that yields"}},
      {"target out of range",
       with([](auto& r) { r.set_target(1); }),
       absl::StatusCode::kInvalidArgument,
       {"target 1", "[0, 1)"}},
      {"unknown method",
       with([](auto& r) { r.add_methods(static_cast<v1::AttributionMethod>(9)); }),
       absl::StatusCode::kInvalidArgument,
       {"methods[0] 9"}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const absl::Status status = client_->Attribute(row.request).status();
    EXPECT_EQ(status.code(), row.code) << status;
    for (const std::string& part : row.message_parts) {
      EXPECT_THAT(status.message(), HasSubstr(part)) << status;
    }
    ExpectSameAnswer(Attribute(normal), before);
  }
  // The fix the [MASK] message names works.
  v1::AttributeRequest unk = with([](auto& r) {
    r.set_model("nomask");
    r.set_occlusion_token(v1::OCCLUSION_TOKEN_UNK);
  });
  unk.set_text(RandomBertText(NoMaskShape(), 6));
  unk.clear_text_pair();
  EXPECT_EQ(Attribute(unk).occlusion_size(), 6);
}

// Integrated gradients over 1000 steps of a 500-token input take far longer than the deadline:
// the call ends with DEADLINE_EXCEEDED, and the server answers the next call.
TEST_F(AttributeTest, DeadlineStopsTheCall) {
  v1::AttributeRequest request;
  request.set_model("nomask");
  request.set_text(RandomBertText(NoMaskShape(), 500));
  request.add_methods(v1::ATTRIBUTION_METHOD_INTEGRATED_GRADIENTS);
  request.set_integrated_gradients_steps(1000);
  CallOptions call;
  call.timeout = absl::Seconds(1);
  const absl::Status status = client_->Attribute(request, call).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  v1::AttributeRequest normal;
  normal.set_model("bert");
  normal.set_text("paris");
  EXPECT_GT(Attribute(normal).integrated_gradients_size(), 0);
}

TEST_F(AttributeTest, CountedInMetrics) {
  v1::AttributeRequest request;
  request.set_model("bert");
  request.set_text("paris");
  Attribute(request);
  request.set_integrated_gradients_steps(-1);
  EXPECT_EQ(client_->Attribute(request).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> body = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  const std::vector<MetricSample> samples = ParseMetrics(*body);
  auto total = [&samples](const std::map<std::string, std::string>& labels) {
    double sum = 0;
    for (const MetricSample& sample : FindSamples(samples, "attnscope_requests_total", labels)) {
      sum += sample.value;
    }
    return sum;
  };
  EXPECT_GE(total({{"rpc", "Attribute"}, {"model", "bert"}, {"code", "OK"}}), 1);
  EXPECT_GE(total({{"rpc", "Attribute"}, {"model", "bert"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_FALSE(FindSamples(samples, "attnscope_request_duration_seconds_count",
                           {{"rpc", "Attribute"}, {"transport", "grpc"}, {"model", "bert"}})
                   .empty());
}

}  // namespace
}  // namespace attnscope::testing
