// The Generate RPC through a real attnscope-server on loopback: stories260K's greedy stream equals
// ../shared/models/stories260K/expected_greedy.jsonl (ids, text and attention rows), beam search
// and seeded sampling equal tests/data/generation_golden.json (make_generation_golden.py), the
// attention selection options shape each token's tensor, bad input gets INVALID_ARGUMENT naming
// the field while the server keeps serving, the CLI prints the text, and /metrics counts it.
#include <httplib.h>

#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using json = nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream file(path);
  std::stringstream bytes;
  bytes << file.rdbuf();
  return json::parse(bytes.str());
}

// Element [layer, head, key] of a decoded [layer, head, key_token] tensor.
float At(const DecodedTensor& tensor, int64_t layer, int64_t head, int64_t key) {
  return tensor.values[(layer * tensor.shape[1] + head) * tensor.shape[2] + key];
}

class GenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"stories=" + Stories260kDir(), "bert=" + TinyBertDir()};
    options.metrics_port = FreeTcpPort();
    options.extra_flags = {"--dashboard_dir="};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
    client_ = server_->NewClient().release();
  }
  static void TearDownTestSuite() {
    delete client_;
    delete server_;
  }

  static GenerateResult Generate(const v1::GenerateRequest& request) {
    absl::StatusOr<GenerateResult> result = client_->Generate(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : GenerateResult();
  }

  static std::vector<int64_t> Ids(const GenerateResult& result) {
    return std::vector<int64_t>(result.done.ids().begin(), result.done.ids().end());
  }

  static v1::GenerateRequest Once(int max_new_tokens) {
    v1::GenerateRequest request;
    request.set_model("stories");
    request.set_prompt("Once upon a time");
    request.set_max_new_tokens(max_new_tokens);
    return request;
  }

  static ServerProcess* server_;
  static Client* client_;
};

ServerProcess* GenerateTest::server_ = nullptr;
Client* GenerateTest::client_ = nullptr;

TEST_F(GenerateTest, GreedyStreamEqualsTheGolden) {
  for (const json& c : ReadJsonLines(Stories260kDir() + "/expected_greedy.jsonl")) {
    SCOPED_TRACE(c["prompt"].get<std::string>());
    v1::GenerateRequest request;
    request.set_model("stories");
    request.set_prompt(c["prompt"].get<std::string>());
    request.set_max_new_tokens(static_cast<int32_t>(c["greedy_ids"].size()));
    request.set_output_attentions(true);
    std::vector<int32_t> streamed;
    absl::StatusOr<GenerateResult> result = client_->Generate(
        request, [&](const GeneratedTokenResult& token) { streamed.push_back(token.token.id()); });
    ASSERT_TRUE(result.ok()) << result.status();
    const std::vector<int64_t> prompt_ids(result->header.prompt_tokens().input_ids().begin(),
                                          result->header.prompt_tokens().input_ids().end());
    EXPECT_EQ(prompt_ids, c["input_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(Ids(*result), c["greedy_ids"].get<std::vector<int64_t>>());
    EXPECT_EQ(std::vector<int64_t>(streamed.begin(), streamed.end()), Ids(*result));
    EXPECT_EQ(result->done.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(result->done.text(), c["greedy_text"].get<std::string>());
    std::string joined;
    for (const GeneratedTokenResult& token : result->tokens) joined += token.token.text();
    EXPECT_EQ(joined, result->done.text());

    ASSERT_FALSE(result->tokens.empty());
    double logprobs = 0;
    for (const GeneratedTokenResult& token : result->tokens) {
      ASSERT_TRUE(token.attention.has_value());
      EXPECT_EQ(token.attention->shape, (std::vector<int64_t>{5, 8, token.token.position()}));
      EXPECT_LT(token.token.logprob(), 0);
      logprobs += token.token.logprob();
    }
    EXPECT_NEAR(result->done.score(), logprobs, 1e-6);
    const DecodedTensor& first = *result->tokens[0].attention;
    for (const auto& [layer, head, key] : std::vector<std::tuple<int, int, const char*>>{
             {0, 0, "attn_l0_h0_last_row"}, {4, 7, "attn_l4_h7_last_row"}}) {
      const std::vector<double> want = c[key].get<std::vector<double>>();
      ASSERT_EQ(first.shape[2], static_cast<int64_t>(want.size()));
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_NEAR(At(first, layer, head, static_cast<int64_t>(k)), want[k], 1e-5) << key;
      }
    }
  }
}

TEST_F(GenerateTest, BeamSearchAndSamplingEqualTheReference) {
  const json golden = ReadJson(TestDataDir() + "/generation_golden.json");
  int checked = 0;
  for (const json& c : golden["cases"]) {
    if (c["model"] != "stories260K" || c["method"] == "greedy") continue;
    SCOPED_TRACE(c.dump().substr(0, 160));
    v1::GenerateRequest request;
    request.set_model("stories");
    // The golden prompt's ids are <s> "Once upon a time".
    ASSERT_EQ(c["prompt_ids"], json({1, 403, 407, 261, 378}));
    request.set_prompt("Once upon a time");
    request.set_max_new_tokens(c["max_new_tokens"]);
    if (c["method"] == "beam_search") {
      request.set_method(v1::DECODING_METHOD_BEAM_SEARCH);
      request.set_num_beams(c["num_beams"]);
      request.set_length_penalty(c["length_penalty"]);
    } else {
      request.set_method(v1::DECODING_METHOD_SAMPLING);
      request.set_seed(c["seed"]);
      request.set_temperature(c["temperature"]);
      request.set_top_k(c["top_k"]);
      request.set_top_p(c["top_p"]);
    }
    const GenerateResult result = Generate(request);
    EXPECT_EQ(Ids(result), c["ids"].get<std::vector<int64_t>>());
    if (c["method"] == "beam_search") {
      const double score = c["score"].get<double>();
      EXPECT_NEAR(result.done.score(), score, 1e-5 + 2e-6 * std::abs(score));
      // More than one beam without a method is beam search, as in transformers' generate().
      if (c["num_beams"].get<int>() > 1) {
        request.clear_method();
        EXPECT_EQ(Ids(Generate(request)), Ids(result));
      }
    } else {
      // The same seed gives the same tokens on every call.
      EXPECT_EQ(Ids(Generate(request)), Ids(result));
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

TEST_F(GenerateTest, AttentionSelectionShapesEachToken) {
  v1::GenerateRequest request = Once(6);
  request.set_output_attentions(true);
  const GenerateResult all = Generate(request);
  request.add_layers(-1);
  request.add_heads(0);
  request.add_heads(7);
  const GenerateResult selected = Generate(request);
  ASSERT_EQ(selected.tokens.size(), 6u);
  EXPECT_THAT(selected.header.layers(), ::testing::ElementsAre(4));
  EXPECT_THAT(selected.header.heads(), ::testing::ElementsAre(0, 7));
  for (size_t i = 0; i < selected.tokens.size(); ++i) {
    const DecodedTensor& got = *selected.tokens[i].attention;
    const DecodedTensor& full = *all.tokens[i].attention;
    EXPECT_EQ(got.dim_names, (std::vector<std::string>{"layer", "head", "key_token"}));
    ASSERT_EQ(got.shape, (std::vector<int64_t>{1, 2, static_cast<int64_t>(5 + i)}));
    for (int64_t k = 0; k < got.shape[2]; ++k) {
      EXPECT_EQ(At(got, 0, 0, k), At(full, 4, 0, k));
      EXPECT_EQ(At(got, 0, 1, k), At(full, 4, 7, k));
    }
  }
  request.set_head_aggregation(v1::HEAD_AGGREGATION_MEAN);
  request.set_dtype(v1::DTYPE_FLOAT16);
  const GenerateResult mean = Generate(request);
  const DecodedTensor& got = *mean.tokens[0].attention;
  EXPECT_EQ(got.wire_dtype, v1::DTYPE_FLOAT16);
  ASSERT_EQ(got.shape, (std::vector<int64_t>{1, 1, 5}));
  double sum = 0;
  for (int64_t k = 0; k < 5; ++k) {
    const double expected =
        (At(*all.tokens[0].attention, 4, 0, k) + At(*all.tokens[0].attention, 4, 7, k)) / 2;
    EXPECT_NEAR(At(got, 0, 0, k), expected, 1e-3);
    sum += At(got, 0, 0, k);
  }
  EXPECT_NEAR(sum, 1.0, 3e-3);
  // Without output_attentions no tensor is sent.
  EXPECT_FALSE(Generate(Once(2)).tokens[0].attention.has_value());
}

TEST_F(GenerateTest, BadInputIsRefusedAndTheServerKeepsServing) {
  const std::vector<int64_t> expected = Ids(Generate(Once(8)));
  struct Row {
    std::string name;
    v1::GenerateRequest request;
    absl::StatusCode code;
    std::vector<std::string> message_parts;
  };
  auto with = [](auto change) {
    v1::GenerateRequest request = Once(8);
    change(request);
    return request;
  };
  const std::vector<Row> rows = {
      {"encoder-only model",
       with([](auto& r) { r.set_model("bert"); }),
       absl::StatusCode::kInvalidArgument,
       {"model 'bert'", "encoder-only", "decoder"}},
      {"attention options without output_attentions",
       with([](auto& r) {
         r.add_layers(99);
         r.set_dtype(v1::DTYPE_FLOAT16);
       }),
       absl::StatusCode::kInvalidArgument,
       {"layers, dtype: set, but they choose the attention sent with each token",
        "set output_attentions, or leave them out"}},
      {"unknown model",
       with([](auto& r) { r.set_model("nope"); }),
       absl::StatusCode::kNotFound,
       {"model 'nope'"}},
      {"too many tokens",
       with([](auto& r) { r.set_max_new_tokens(2000); }),
       absl::StatusCode::kInvalidArgument,
       {"max_new_tokens: expected 1 to 1024, got 2000"}},
      {"past the positions",
       with([](auto& r) { r.set_max_new_tokens(510); }),
       absl::StatusCode::kInvalidArgument,
       {"max_new_tokens: expected at most 507", "max_position_embeddings 512"}},
      {"negative tokens",
       with([](auto& r) { r.set_max_new_tokens(-1); }),
       absl::StatusCode::kInvalidArgument,
       {"max_new_tokens"}},
      {"beam wider than the vocabulary",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_BEAM_SEARCH);
         r.set_num_beams(600);
       }),
       absl::StatusCode::kInvalidArgument,
       {"num_beams", "vocabulary, 512 tokens", "600"}},
      {"temperature 0",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_SAMPLING);
         r.set_temperature(0);
       }),
       absl::StatusCode::kInvalidArgument,
       {"temperature"}},
      {"top_p 2",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_SAMPLING);
         r.set_top_p(2);
       }),
       absl::StatusCode::kInvalidArgument,
       {"top_p"}},
      {"unknown method",
       with([](auto& r) { r.set_method(static_cast<v1::DecodingMethod>(9)); }),
       absl::StatusCode::kInvalidArgument,
       {"method 9"}},
      {"layer outside the model",
       with([](auto& r) {
         r.set_output_attentions(true);
         r.add_layers(9);
       }),
       absl::StatusCode::kInvalidArgument,
       {"layer 9"}},
      {"invalid UTF-8",
       with([](auto& r) { r.set_prompt("Once \xff"); }),
       absl::StatusCode::kInvalidArgument,
       {"Generate", "UTF-8"}},
      {"prompt over the positions",
       with([](auto& r) { r.set_prompt(std::string(600, 'x') + " " + std::string(600, 'y')); }),
       absl::StatusCode::kInvalidArgument,
       {"prompt: expected at most 512 tokens", "shorten"}},
      // An option of another method than the one run was silently unused.
      {"temperature with greedy search",
       with([](auto& r) { r.set_temperature(0.7); }),
       absl::StatusCode::kInvalidArgument,
       {"temperature 0.7: expected only with method DECODING_METHOD_SAMPLING",
        "got method DECODING_METHOD_GREEDY"}},
      // A negative count is no count, whichever the method: said as such, not as an option of
      // beam search.
      {"negative beams with greedy search",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_GREEDY);
         r.set_num_beams(-3);
       }),
       absl::StatusCode::kInvalidArgument,
       {"num_beams -3: expected a count of beams, at least 1"}},
      {"negative beams without a method",
       with([](auto& r) { r.set_num_beams(-1); }),
       absl::StatusCode::kInvalidArgument,
       {"num_beams -1: expected a count of beams, at least 1"}},
      {"two beams with greedy search",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_GREEDY);
         r.set_num_beams(2);
       }),
       absl::StatusCode::kInvalidArgument,
       {"num_beams 2: expected only with method DECODING_METHOD_BEAM_SEARCH"}},
      {"beams with sampling",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_SAMPLING);
         r.set_num_beams(4);
       }),
       absl::StatusCode::kInvalidArgument,
       {"num_beams 4", "got method DECODING_METHOD_SAMPLING"}},
      {"top_k with beam search",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_BEAM_SEARCH);
         r.set_top_k(5);
       }),
       absl::StatusCode::kInvalidArgument,
       {"top_k 5", "set method DECODING_METHOD_SAMPLING or leave top_k unset"}},
      {"temperature too small to divide by",
       with([](auto& r) {
         r.set_method(v1::DECODING_METHOD_SAMPLING);
         r.set_temperature(1e-300);
       }),
       absl::StatusCode::kInvalidArgument,
       {"temperature", "greedy"}},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    const absl::Status status = client_->Generate(row.request).status();
    EXPECT_EQ(status.code(), row.code) << status;
    for (const std::string& part : row.message_parts) {
      EXPECT_THAT(status.message(), HasSubstr(part)) << status;
    }
    EXPECT_EQ(Ids(Generate(Once(8))), expected);
  }
}

TEST_F(GenerateTest, DeadlineStopsALongGeneration) {
  v1::GenerateRequest request = Once(500);
  request.set_ignore_eos(true);
  request.set_method(v1::DECODING_METHOD_BEAM_SEARCH);
  request.set_num_beams(64);
  request.set_output_attentions(true);
  CallOptions call;
  call.timeout = absl::Milliseconds(300);
  const absl::Status status = client_->Generate(request, {}, call).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_EQ(Generate(Once(3)).tokens.size(), 3u);
}

TEST_F(GenerateTest, CliPrintsTheTextAndTheJson) {
  const std::vector<json> golden = ReadJsonLines(Stories260kDir() + "/expected_greedy.jsonl");
  const std::string expected_text = golden[1]["greedy_text"];
  CommandResult text =
      RunCommand({CliBinary(), "generate", "--server", server_->address(), "--model", "stories",
                  "--prompt", "Once upon a time", "--max_new_tokens", "40"});
  ASSERT_EQ(text.exit_code, 0) << text.stderr_text;
  EXPECT_THAT(text.stdout_text, StartsWith("Once upon a time" + expected_text + "\n"));
  EXPECT_THAT(text.stdout_text, HasSubstr("[40 tokens, stopped at --max_new_tokens"));

  CommandResult out =
      RunCommand({CliBinary(), "generate", "--server", server_->address(), "--model", "stories",
                  "--prompt", "Once upon a time", "--max_new_tokens", "3", "--attentions",
                  "--layers=0", "--heads=0", "--format", "json"});
  ASSERT_EQ(out.exit_code, 0) << out.stderr_text;
  const json answer = json::parse(out.stdout_text);
  EXPECT_EQ(answer["ids"], json({432, 383, 286}));
  EXPECT_EQ(answer["finish_reason"], "FINISH_REASON_LENGTH");
  const std::vector<double> row = answer["tokens"][0]["attention"]["values"][0][0];
  const std::vector<double> want = golden[1]["attn_l0_h0_last_row"];
  ASSERT_EQ(row.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(row[k], want[k], 1e-5);

  // More than one beam without --method is beam search, as over the API.
  std::vector<std::string> ids;
  for (const std::vector<std::string>& method :
       {std::vector<std::string>{}, std::vector<std::string>{"--method", "beam_search"}}) {
    std::vector<std::string> argv = {
        CliBinary(),        "generate", "--server",    server_->address(),
        "--model",          "stories",  "--prompt",    "Once upon a time",
        "--max_new_tokens", "12",       "--num_beams", "3",
        "--format",         "json"};
    argv.insert(argv.end(), method.begin(), method.end());
    const CommandResult beams = RunCommand(argv);
    ASSERT_EQ(beams.exit_code, 0) << beams.stderr_text;
    const json beam_answer = json::parse(beams.stdout_text);
    EXPECT_EQ(beam_answer["method"], "DECODING_METHOD_BEAM_SEARCH");
    ids.push_back(beam_answer["ids"].dump());
  }
  EXPECT_EQ(ids[0], ids[1]);

  CommandResult bad = RunCommand({CliBinary(), "generate", "--server", server_->address(),
                                  "--model", "bert", "--prompt", "hello"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.stderr_text, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_EQ(bad.stdout_text, "");  // the prompt is printed with the first token, not before
  CommandResult usage =
      RunCommand({CliBinary(), "generate", "--server", server_->address(), "--method", "beam"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.stderr_text, HasSubstr("--method: 'beam'"));
  usage = RunCommand({CliBinary(), "generate", "--server", server_->address(), "--attentions"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.stderr_text, HasSubstr("--format json"));
}

// POST /attnscope.v1.AttentionService/Generate answers newline-delimited JSON: the header, one
// line per token, the summary; the same tokens as over gRPC.
TEST_F(GenerateTest, HttpStreamsTheSameTokens) {
  httplib::Client http("127.0.0.1", server_->http_port());
  const httplib::Result response =
      http.Post("/attnscope.v1.AttentionService/Generate",
                R"({"model": "stories", "prompt": "Once upon a time", "maxNewTokens": 8})",
                "application/json");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200) << response->body;
  EXPECT_EQ(response->get_header_value("Content-Type"), "application/x-ndjson");
  std::vector<json> lines;
  for (absl::string_view line : absl::StrSplit(response->body, '\n', absl::SkipEmpty())) {
    lines.push_back(json::parse(line));
  }
  ASSERT_EQ(lines.size(), 10u);
  EXPECT_TRUE(lines.front().contains("header"));
  for (int i = 1; i <= 8; ++i) EXPECT_EQ(lines[i]["token"]["index"].get<int>(), i - 1);
  const std::vector<int64_t> ids = lines.back()["done"]["ids"].get<std::vector<int64_t>>();
  EXPECT_EQ(ids, Ids(Generate(Once(8))));
  const httplib::Result bad =
      http.Post("/attnscope.v1.AttentionService/Generate",
                R"({"model": "bert", "prompt": "hello"})", "application/json");
  ASSERT_TRUE(bad);
  // The stream had started: its one line is the error, as for StreamAttention.
  const json error = json::parse(bad->body);
  EXPECT_EQ(error["error"]["code"], "invalid_argument");
  EXPECT_THAT(error["error"]["message"].get<std::string>(), HasSubstr("encoder-only"));
  // Every option is checked before the header: a refused one is the whole answer.
  const httplib::Result negative =
      http.Post("/attnscope.v1.AttentionService/Generate",
                R"({"model": "stories", "prompt": "hi", "maxNewTokens": -1})", "application/json");
  ASSERT_TRUE(negative);
  const json refused = json::parse(negative->body);
  EXPECT_THAT(refused["error"]["message"].get<std::string>(), HasSubstr("max_new_tokens"));
}

TEST_F(GenerateTest, CountedInMetrics) {
  Generate(Once(7));
  v1::GenerateRequest bad = Once(7);
  bad.set_model("bert");
  EXPECT_EQ(client_->Generate(bad).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::string> body = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(body.ok()) << body.status();
  const std::vector<MetricSample> samples = ParseMetrics(*body);
  auto total = [&samples](const std::string& name,
                          const std::map<std::string, std::string>& labels) {
    double sum = 0;
    for (const MetricSample& sample : FindSamples(samples, name, labels)) sum += sample.value;
    return sum;
  };
  EXPECT_GE(total("attnscope_requests_total",
                  {{"rpc", "Generate"}, {"model", "stories"}, {"code", "OK"}}),
            1);
  EXPECT_GE(total("attnscope_requests_total",
                  {{"rpc", "Generate"}, {"model", "bert"}, {"code", "INVALID_ARGUMENT"}}),
            1);
  EXPECT_GE(total("attnscope_generated_tokens_total", {{"model", "stories"}}), 7);
}

// A generation its deadline cuts short counts the tokens it sent: before, only finished calls
// added theirs, and the work of cancelled ones never showed.
TEST_F(GenerateTest, TokensOfACallCutByItsDeadlineAreCounted) {
  auto generated = [] {
    absl::StatusOr<std::string> body = HttpGet(server_->metrics_port(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    double sum = 0;
    for (const MetricSample& sample :
         FindSamples(ParseMetrics(body.ok() ? *body : ""), "attnscope_generated_tokens_total",
                     {{"model", "stories"}})) {
      sum += sample.value;
    }
    return sum;
  };
  const double before = generated();
  v1::GenerateRequest request = Once(500);
  request.set_ignore_eos(true);
  request.set_output_attentions(true);
  int received = 0;
  CallOptions call;
  call.timeout = absl::Milliseconds(100);
  const absl::Status status =
      client_
          ->Generate(
              request, [&received](const GeneratedTokenResult&) { ++received; }, call)
          .status();
  ASSERT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  ASSERT_GT(received, 0);
  // The metric is updated as the call ends, which may come just after the client's deadline.
  double counted = 0;
  for (const absl::Time start = absl::Now(); absl::Now() - start < absl::Seconds(10);) {
    counted = generated() - before;
    if (counted >= received) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  // Written to the stream: what the client read, and any in flight when the deadline came.
  EXPECT_GE(counted, received);
  EXPECT_LT(counted, 500);
}

}  // namespace
}  // namespace attnscope::testing
