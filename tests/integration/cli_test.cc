// The `attnscope` CLI run as a subprocess against the real server on Vietnamese and Korean text:
// every token's offsets slice the original text correctly (in code points and in UTF-8 bytes, and
// the slice is the text the token stands for), attention rows sum to 1, .npy output matches the
// JSON, and errors exit non-zero with the server's code and message.
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

constexpr char kVietnamese[] = "Tôi yêu Việt Nam quá";
constexpr char kKorean[] = "나는 오늘 랭체인을 공부한다";

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

int64_t CodePointsIn(const std::string& text, int64_t byte_end) {
  int64_t count = 0;
  for (int64_t i = 0; i < byte_end; ++i) count += IsContinuationByte(text[i]) ? 0 : 1;
  return count;
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServerProcess::Options options;
    options.models = {"llama=" + Stories260kDir(), "bert=" + TinyBertDir()};
    absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = server->release();
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(server_, nullptr) << "the server did not start"; }

  // Runs the CLI with --server set; returns its parsed stdout, failing the test on a non-zero exit.
  static json Run(std::vector<std::string> args) {
    args.insert(args.begin(), CliBinary());
    args.push_back("--server=" + server_->address());
    const CommandResult result = RunCommand(args);
    EXPECT_EQ(result.exit_code, 0) << result.stderr_text;
    return json::parse(result.stdout_text, nullptr, /*allow_exceptions=*/false);
  }

  static ServerProcess* server_;
};

ServerProcess* CliTest::server_ = nullptr;

// Checks every non-special token of `tokens` (the CLI's JSON) against `text`. Returns how many
// tokens covered non-ASCII text, so callers can make sure the interesting case was exercised.
int CheckOffsets(const json& tokens, const std::string& text, bool sentencepiece) {
  const size_t n = tokens["tokens"].size();
  EXPECT_GT(n, 0u);
  EXPECT_EQ(tokens["offsets"].size(), n);
  EXPECT_EQ(tokens["byte_offsets"].size(), n);
  int non_ascii = 0;
  int64_t previous_start = 0;
  std::string joined;
  static const std::regex kByteToken("<0x([0-9A-Fa-f]{2})>");
  for (size_t i = 0; i < n; ++i) {
    if (tokens["special_tokens_mask"][i] == 1) continue;
    const std::string token = tokens["tokens"][i];
    const int64_t start = tokens["offsets"][i][0];
    const int64_t end = tokens["offsets"][i][1];
    const int64_t byte_start = tokens["byte_offsets"][i][0];
    const int64_t byte_end = tokens["byte_offsets"][i][1];
    SCOPED_TRACE(absl::StrCat("token ", i, " '", token, "' [", start, ", ", end, ") bytes [",
                              byte_start, ", ", byte_end, ")"));
    // Empty spans are legitimate for SentencePiece: the dummy-prefix U+2581 stands for no
    // character, and a character split into byte-fallback tokens gives its span to the last byte.
    const bool empty_ok = sentencepiece;
    if (byte_start < 0 || byte_start > byte_end || (byte_start == byte_end && !empty_ok) ||
        byte_end > static_cast<int64_t>(text.size())) {
      ADD_FAILURE() << "bad byte span for a text of " << text.size() << " bytes";
      continue;
    }
    if (sentencepiece) joined += text.substr(byte_start, byte_end - byte_start);
    EXPECT_GE(byte_start, previous_start) << "tokens go forward through the text";
    previous_start = byte_start;
    // Byte spans fall on character boundaries, and code-point spans are the same characters.
    if (byte_start < static_cast<int64_t>(text.size())) {
      EXPECT_FALSE(IsContinuationByte(text[byte_start]));
    }
    if (byte_end < static_cast<int64_t>(text.size())) {
      EXPECT_FALSE(IsContinuationByte(text[byte_end]));
    }
    EXPECT_EQ(start, CodePointsIn(text, byte_start));
    EXPECT_EQ(end, CodePointsIn(text, byte_end));
    const std::string slice = text.substr(byte_start, byte_end - byte_start);
    bool ascii = true;
    for (char c : slice) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (!ascii) ++non_ascii;
    std::smatch match;
    if (sentencepiece && std::regex_match(token, match, kByteToken)) {
      // Byte fallback: the token's byte is one of the bytes of the character at byte_start.
      const char byte = static_cast<char>(std::stoi(match[1].str(), nullptr, 16));
      size_t char_end = byte_start + 1;
      while (char_end < text.size() && IsContinuationByte(text[char_end])) ++char_end;
      EXPECT_NE(text.substr(byte_start, char_end - byte_start).find(byte), std::string::npos);
      if (!slice.empty()) {
        EXPECT_EQ(slice, text.substr(byte_start, char_end - byte_start));
      }
    } else if (sentencepiece) {
      // A piece is its text with spaces written as U+2581; the first piece's marker is the added
      // dummy prefix, which covers no character.
      const std::string piece = absl::StrReplaceAll(token, {{"\xE2\x96\x81", " "}});
      EXPECT_TRUE(slice == piece ||
                  (piece[0] == ' ' && slice == piece.substr(1) && byte_start == 0))
          << "slice '" << slice << "'";
    } else if (token == "[UNK]") {
      // An unknown word is one whole whitespace-separated word.
      EXPECT_EQ(slice.find(' '), std::string::npos);
      EXPECT_TRUE(byte_start == 0 || text[byte_start - 1] == ' ');
      EXPECT_TRUE(byte_end == static_cast<int64_t>(text.size()) || text[byte_end] == ' ');
    } else {
      // WordPiece lower-cases and strips accents: one token character per text character, the
      // ASCII ones equal after lower-casing.
      const std::string piece = token.rfind("##", 0) == 0 ? token.substr(2) : token;
      EXPECT_EQ(end - start, static_cast<int64_t>(piece.size()));
      size_t char_index = 0;
      for (size_t b = 0; b < slice.size(); ++b) {
        if (IsContinuationByte(slice[b])) continue;
        if (static_cast<unsigned char>(slice[b]) < 0x80 && char_index < piece.size()) {
          EXPECT_EQ(absl::ascii_tolower(slice[b]), piece[char_index]);
        }
        ++char_index;
      }
    }
  }
  // SentencePiece keeps every character, spaces included, so the slices in order are the text.
  if (sentencepiece) {
    EXPECT_EQ(joined, text);
  }
  return non_ascii;
}

void CheckRowsSumToOne(const json& attentions) {
  ASSERT_EQ(attentions["dim_names"], json({"layer", "head", "query_token", "key_token"}));
  int rows = 0;
  for (const json& layer : attentions["values"]) {
    for (const json& head : layer) {
      for (const json& row : head) {
        double sum = 0;
        for (const json& value : row) sum += value.get<double>();
        EXPECT_NEAR(sum, 1.0, 1e-5);
        ++rows;
      }
    }
  }
  const std::vector<int64_t> shape = attentions["shape"];
  EXPECT_EQ(rows, shape[0] * shape[1] * shape[2]);
}

TEST_F(CliTest, VietnameseAndKoreanOffsetsSliceTheText) {
  for (const std::string model : {"llama", "bert"}) {
    for (const std::string text : {kVietnamese, kKorean}) {
      SCOPED_TRACE(model + ": " + text);
      const json tokenized = Run({"tokenize", "--model=" + model, "--text", text});
      ASSERT_FALSE(tokenized.is_discarded());
      EXPECT_GT(CheckOffsets(tokenized["tokens"], text, model == "llama"), 0);

      const json attention = Run({"attention", "--model", model, "--text=" + text});
      ASSERT_FALSE(attention.is_discarded());
      EXPECT_EQ(attention["tokens"], tokenized["tokens"]);
      CheckRowsSumToOne(attention["attentions"]);
      const json streamed = Run({"stream", "--model", model, "--text=" + text});
      EXPECT_EQ(streamed["attentions"], attention["attentions"]);
    }
  }
}

TEST_F(CliTest, NpyFilesHoldTheSameTensors) {
  TempDir dir;
  const json inline_json = Run({"attention", "--model=llama", "--text", kVietnamese,
                                "--layers=-1,0", "--heads=1", "--top_k=2", "--rollout"});
  const json files = Run({"attention", "--model=llama", "--text", kVietnamese, "--layers=-1,0",
                          "--heads=1", "--top_k=2", "--rollout", "--npy_dir", dir.path()});
  ASSERT_FALSE(files.is_discarded());
  for (const std::string name : {"attentions", "top_k_indices", "rollout"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(files[name].contains("npy"));
    EXPECT_EQ(files[name]["shape"], inline_json[name]["shape"]);
    std::ifstream file(files[name]["npy"].get<std::string>(), std::ios::binary);
    std::stringstream buffer;
    buffer << file.rdbuf();
    const std::string npy = buffer.str();
    ASSERT_GT(npy.size(), 10u);
    ASSERT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const size_t header_size =
        static_cast<unsigned char>(npy[8]) | (static_cast<unsigned char>(npy[9]) << 8);
    const std::string header = npy.substr(10, header_size);
    const bool is_int = name == "top_k_indices";
    EXPECT_THAT(header, HasSubstr(is_int ? "'descr': '<i4'" : "'descr': '<f4'"));
    EXPECT_THAT(header, HasSubstr("'fortran_order': False"));
    std::vector<int64_t> shape = inline_json[name]["shape"];
    std::string shape_text = "(";
    for (size_t i = 0; i < shape.size(); ++i) absl::StrAppend(&shape_text, i ? ", " : "", shape[i]);
    absl::StrAppend(&shape_text, shape.size() == 1 ? ",)" : ")");
    EXPECT_THAT(header, HasSubstr("'shape': " + shape_text));
    // Flatten the inline values and compare with the file's elements bit for bit.
    std::vector<double> flat;
    std::function<void(const json&)> walk = [&](const json& node) {
      if (node.is_array()) {
        for (const json& child : node) walk(child);
      } else {
        flat.push_back(node.get<double>());
      }
    };
    walk(inline_json[name]["values"]);
    ASSERT_EQ(npy.size(), 10 + header_size + 4 * flat.size());
    for (size_t i = 0; i < flat.size(); ++i) {
      const char* element = npy.data() + 10 + header_size + 4 * i;
      if (is_int) {
        int32_t value;
        std::memcpy(&value, element, 4);
        EXPECT_EQ(value, flat[i]);
      } else {
        float value;
        std::memcpy(&value, element, 4);
        EXPECT_EQ(value, static_cast<float>(flat[i]));
      }
    }
  }
}

TEST_F(CliTest, OtherCommands) {
  const json models = Run({"models"});
  ASSERT_EQ(models["models"].size(), 2u);
  EXPECT_EQ(models["models"][1]["name"], "bert");
  EXPECT_EQ(Run({"info", "--model=bert"})["num_hidden_layers"], 3);
  EXPECT_EQ(Run({"health"})["status"], "SERVING");

  const json cross = Run({"cross", "--model=bert", "--query=capital of france", "--document",
                          "paris is the capital", "--document", "the river", "--doc_to_query"});
  ASSERT_EQ(cross["documents"].size(), 2u);
  for (const json& document : cross["documents"]) {
    EXPECT_TRUE(document.contains("relevance_score"));
    EXPECT_EQ(document["query_to_document"]["shape"][0], 3);
    EXPECT_TRUE(document.contains("document_to_query"));
  }
  const json encode = Run({"encode", "--model=bert", "--text=paris", "--text=the river",
                           "--pooling=mean", "--normalize"});
  ASSERT_EQ(encode["results"].size(), 2u);
  double norm = 0;
  for (const json& value : encode["results"][1]["pooled"]["values"]) {
    norm += value.get<double>() * value.get<double>();
  }
  EXPECT_NEAR(norm, 1.0, 1e-5);
  EXPECT_EQ(encode["results"][1]["last_hidden_state"]["shape"], json({4, 32}));
}

TEST_F(CliTest, BenchCountsEveryCallByRpcAndReportsLatencyAndErrors) {
  const json mixed = Run({"bench", "--model=bert", "--text=the capital of france is paris",
                          "--query=capital", "--clients=4", "--requests=12"});
  EXPECT_EQ(mixed["calls"], 12);
  EXPECT_EQ(mixed["calls_by_rpc"],
            json({{"CrossAttention", 4}, {"Encode", 4}, {"GetAttention", 4}}));
  EXPECT_EQ(mixed["errors"], json::object());
  const json& latency = mixed["latency_ms"];
  EXPECT_GT(latency["p50"].get<double>(), 0);
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>());
  EXPECT_LE(latency["p90"].get<double>(), latency["p99"].get<double>());
  EXPECT_LE(latency["p99"].get<double>(), latency["max"].get<double>());
  EXPECT_GT(mixed["calls_per_second"].get<double>(), 0);

  // Failed calls are counted by code, not dropped.
  const json missing =
      Run({"bench", "--model=missing", "--rpc=encode", "--clients=2", "--requests=3"});
  EXPECT_EQ(missing["calls"], 3);
  EXPECT_EQ(missing["errors"], json({{"NOT_FOUND", 3}}));

  // A duration bounds the run instead of a count.
  const json timed =
      Run({"bench", "--model=bert", "--rpc=attention", "--clients=2", "--duration=1s"});
  EXPECT_GT(timed["calls"].get<int>(), 0);
  EXPECT_GE(timed["seconds"].get<double>(), 1.0);

  const CommandResult bad =
      RunCommand({CliBinary(), "bench", "--rpc=stream", "--server", server_->address()});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.stderr_text.find("--rpc"), std::string::npos) << bad.stderr_text;
}

TEST_F(CliTest, ErrorsPrintTheServersCodeAndMessageAndExitNonZero) {
  CommandResult result = RunCommand({CliBinary(), "attention", "--server=" + server_->address(),
                                     "--model=no-such-model", "--text=hello"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(result.stderr_text, HasSubstr("no-such-model"));
  EXPECT_TRUE(result.stdout_text.empty());

  // The server's message quotes the name: its control characters reach the terminal visibly, not
  // as an escape sequence it would act on (here: clear the screen, ring the bell), and a C1
  // control (U+009B, CSI) too.
  result = RunCommand({CliBinary(), "info", "--server=" + server_->address(),
                       "--model=\x1b[2J\x07no\xc2\x9bmodel\xe2\x80\xaetxt.exe"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("'\\x1b[2J\\x07no\\u009bmodel\\u202etxt.exe'"));
  EXPECT_EQ(result.stderr_text.find('\x1b'), std::string::npos) << result.stderr_text;
  EXPECT_EQ(result.stderr_text.find("\xc2\x9b"), std::string::npos) << result.stderr_text;

  result = RunCommand({CliBinary(), "attention", "--server=" + server_->address(), "--model=bert",
                       "--text=paris", "--layers=7"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("INVALID_ARGUMENT"));

  // Mistakes in the command line exit 2 whether the flag parser or a command finds them; calls the
  // server refuses exit 1.
  const std::string server = "--server=" + server_->address();
  const std::vector<std::string> paris = {server, "--model=bert", "--text=paris"};
  auto attention = [&](const std::string& flag) {
    std::vector<std::string> args = {"attention"};
    args.insert(args.end(), paris.begin(), paris.end());
    args.push_back(flag);
    return args;
  };
  struct Mistake {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Mistake> mistakes = {
      {{"attention", "--no_such_flag"}, "unknown flag --no_such_flag"},
      // A value that does not fit the int32 field is refused, not wrapped.
      {attention("--top_k=99999999999"), "--top_k: '99999999999' is not an integer in"},
      // A second --text outside 'encode' would silently replace the first.
      {attention("--text=london"), "'attention' takes one --text, got 2"},
      {{"tokenize", server, "--model=bert", "--text=paris", "--text_pair=a", "--text_pair=b"},
       "'tokenize' takes one --text_pair, got 2"},
      {attention("--window=1,2"), "--window: got 2 values; pass four integers"},
      {attention("--window=a,1,2,3"), "QUERY_START,QUERY_END,KEY_START,KEY_END"},
      // Empty list items and flags that belong to another command are refused, not ignored.
      {attention("--layers=0,,1"), "--layers: "},
      {attention("--layers="), "--layers: "},
      {attention("--query=q"),
       "--query does not apply to 'attention'; it is read by: bench, cross"},
      {{"models", server, "--max_response_bytes=-1"},
       "--max_response_bytes: expected a positive size in bytes, got -1"},
      // A deadline must lie in the future.
      {attention("--timeout=0"), "--timeout: expected a positive duration, got '0'"},
      {attention("--timeout=-1"), "--timeout: expected a positive duration, got '-1'"},
      {attention("--timeout=-5s"), "--timeout: expected a positive duration, got '-5s'"},
  };
  for (const Mistake& mistake : mistakes) {
    std::vector<std::string> args = {CliBinary()};
    args.insert(args.end(), mistake.args.begin(), mistake.args.end());
    result = RunCommand(args);
    EXPECT_EQ(result.exit_code, 2) << mistake.message;
    EXPECT_THAT(result.stderr_text, HasSubstr(mistake.message));
  }
  // One line, not the whole usage; but an unknown command shows the commands.
  result = RunCommand({CliBinary(), "models", server, "--text=paris"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.stderr_text, HasSubstr("--text does not apply to 'models'"));
  EXPECT_THAT(result.stderr_text, Not(HasSubstr("usage:"))) << "one line, not the whole usage";
  result = RunCommand({CliBinary(), "attend", "--text=paris"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.stderr_text, HasSubstr("unknown command 'attend'"));
  EXPECT_THAT(result.stderr_text, HasSubstr("usage:")) << "an unknown command shows the commands";
  // A connection flag before the command: one line saying the command comes first.
  result = RunCommand({CliBinary(), server, "attention", "--text=paris"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.stderr_text, HasSubstr("before the command: write the command first"));
  EXPECT_THAT(result.stderr_text, Not(HasSubstr("usage:")));

  // The client's own receive limit names the flag that raises it.
  // (stories260K, 5 layers x 8 heads over about 200 tokens: several MB of float32.)
  std::string story;
  for (int i = 0; i < 40; ++i) story += "Once upon a time there was a cat. ";
  result = RunCommand({CliBinary(), "attention", server, "--model=llama", "--text=" + story,
                       "--max_response_bytes=100"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.stderr_text, HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_THAT(result.stderr_text, HasSubstr("--max_response_bytes"));

  // --help after a command prints the usage, as it does first.
  result = RunCommand({CliBinary(), "attention", "--text=paris", "--help"});
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_THAT(result.stdout_text, HasSubstr("usage: attnscope COMMAND"));
}

}  // namespace
}  // namespace attnscope::testing
