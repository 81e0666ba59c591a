// Tokenize served end to end: one real attnscope-server loads a tiny random checkpoint around each
// tokenizer.json layout (Llama 3, Qwen3, Gemma 3, GPT-2, RoBERTa, Llama 2's SentencePiece BPE,
// XLM-R's and T5's Unigram and bert-base-uncased's WordPiece;
// tests/tokenizer_reference/make_checkpoints.py), and its Tokenize answers over gRPC (the client
// library) and HTTP/JSON must be what Hugging Face tokenizers gives on the same files
// (tests/tokenizer_reference/make_goldens.js): ids, tokens, offsets in code points and bytes,
// special-token masks, type, word and sequence ids, for single texts and pairs. Both are made in
// the build tree by the CTest fixture tokenizer_reference_goldens. Generate on the Llama 2 layout
// streams each character whole, as the library's decoder writes it, however many byte tokens
// spell it.
//
// The unit tests (tests/unit/tokenizers/tokenizer_json_*_test.cc) compare the readers in process on
// every corpus line; this checks what serving adds: a checkpoint folder as published
// (tokenizer.json beside tokenizer_config.json, config.json and the slow tokenizer's files) loaded
// by the server, the request checks, and how each transport carries texts and offsets. A text the
// library gives no token for must be refused as the contract says (INVALID_ARGUMENT naming the
// field), never skipped.
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "attnscope/v1/attnscope.pb.h"
#include "gtest/gtest.h"
#include "models/tokenizers/unicode.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using google::protobuf::util::MessageDifferencer;
using json = nlohmann::json;

constexpr char kTokenizePath[] = "/attnscope.v1.AttentionService/Tokenize";
constexpr size_t kCorpusLines = 3405;
// Every kStride-th corpus line is served, and every kUnevenStride-th line in the scripts the
// tokenizers split most unevenly (IsInTheSample): the unit tests compare every line in process,
// so this sample checks what serving adds (offsets as code points and bytes on both transports,
// pairs, refusals) on a third of the corpus.
constexpr size_t kStride = 7;
constexpr size_t kUnevenStride = 3;
// Differences reported per model and transport; the count covers them all.
constexpr size_t kMaxReports = 8;

// A served checkpoint: its name (also its folder in REFERENCE/checkpoints and its goldens'
// name) and the tokenizer kind GetModelInfo must report, that of the reader the unit tests check.
struct ServedTokenizer {
  const char* name;
  const char* kind;
};
constexpr ServedTokenizer kServed[] = {{"llama3", "bpe"},
                                       {"qwen3", "bpe"},
                                       {"gemma3", "bpe"},
                                       {"gpt2", "bpe"},
                                       {"roberta", "bpe"},
                                       {"llama2-spm-bpe", "bpe"},
                                       {"xlmr", "sentencepiece"},
                                       {"t5-unigram", "sentencepiece"},
                                       {"bert-base-uncased", "wordpiece"}};

constexpr char kMake[] =
    "bash tests/tokenizer_reference/make_all.sh build/tokenizer-reference "
    "(ctest's fixture tokenizer_reference_goldens does it)";

// make_all.sh's output folder: ATTNSCOPE_TOKENIZER_REFERENCE, else the build tree's.
std::string ReferenceDir() {
  const char* dir = std::getenv("ATTNSCOPE_TOKENIZER_REFERENCE");
  return dir != nullptr && *dir != '\0' ? dir : ATTNSCOPE_DEFAULT_TOKENIZER_REFERENCE;
}

// Korean (Hangul syllables and jamo), Vietnamese (its letters, precomposed or decomposed into the
// combining marks they are written with in NFD) and emoji (pictographs, flags, dingbats, ZWJ
// sequences, variation selector 16, keycaps): where byte-level BPE, Unigram and WordPiece split
// characters into pieces whose offsets must still land on the text's code points and bytes.
bool IsInTheSample(size_t line, const std::string& text) {
  if (line % kStride == 0) return true;
  absl::StatusOr<unicode::DecodedText> decoded = unicode::DecodeUtf8(text);
  if (!decoded.ok()) return false;
  for (const char32_t c : decoded->code_points) {
    const bool korean = (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x1100 && c <= 0x11FF) ||
                        (c >= 0x3130 && c <= 0x318F);
    const bool vietnamese =
        (c >= 0x1EA0 && c <= 0x1EF9) ||
        std::u32string_view(U"ăâđêôơưĂÂĐÊÔƠƯ\u0302\u0306\u0309\u031B\u0323").find(c) !=
            std::u32string_view::npos;
    const bool emoji =
        c >= 0x1F000 || (c >= 0x2600 && c <= 0x27BF) || c == 0x200D || c == 0xFE0F || c == 0x20E3;
    // Emoji lines are few (23) and the hardest to split: all of them.
    if (emoji || ((korean || vietnamese) && line % kUnevenStride == 0)) return true;
  }
  return false;
}

// What a call must answer: the golden encoding, or INVALID_ARGUMENT naming `refused_field`.
struct Expected {
  const json* golden = nullptr;
  std::string refused_field;
};

// One Tokenize call of the sample; `what` names it in a report.
struct Call {
  v1::TokenizeRequest request;
  Expected expected;
  std::string what;
};

template <typename Repeated>
std::vector<int64_t> AsInts(const Repeated& values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

// Golden ids where null (a special token's word or sequence) is -1, as Tokens has it.
std::vector<int64_t> GoldenInts(const json& values) {
  std::vector<int64_t> out;
  for (const json& value : values) out.push_back(value.is_null() ? -1 : value.get<int64_t>());
  return out;
}

using Spans = std::vector<std::pair<int64_t, int64_t>>;

Spans AsSpans(const google::protobuf::RepeatedPtrField<v1::Offset>& offsets) {
  Spans out;
  for (const v1::Offset& offset : offsets) out.emplace_back(offset.start(), offset.end());
  return out;
}

Spans GoldenSpans(const json& offsets) {
  Spans out;
  for (const json& span : offsets) out.emplace_back(span[0].get<int64_t>(), span[1].get<int64_t>());
  return out;
}

// The fields of `tokens` that differ from the golden encoding, with both values.
std::vector<std::string> Differences(const v1::Tokens& tokens, const json& golden) {
  std::vector<std::string> out;
  const auto check = [&](const char* field, const auto& served, const auto& library) {
    if (served == library) return;
    out.push_back(absl::StrCat(field, ": served ", absl::StrJoin(served, " "), " | library ",
                               absl::StrJoin(library, " ")));
  };
  const auto check_spans = [&](const char* field, const Spans& served, const Spans& library) {
    if (served == library) return;
    const auto dash = absl::PairFormatter("-");
    out.push_back(absl::StrCat(field, ": served ", absl::StrJoin(served, " ", dash), " | library ",
                               absl::StrJoin(library, " ", dash)));
  };
  check("tokens", std::vector<std::string>(tokens.tokens().begin(), tokens.tokens().end()),
        golden["tokens"].get<std::vector<std::string>>());
  check("input_ids", AsInts(tokens.input_ids()), GoldenInts(golden["ids"]));
  check("token_type_ids", AsInts(tokens.token_type_ids()), GoldenInts(golden["type_ids"]));
  check("special_tokens_mask", AsInts(tokens.special_tokens_mask()),
        GoldenInts(golden["special_tokens_mask"]));
  check_spans("offsets", AsSpans(tokens.offsets()), GoldenSpans(golden["offsets_cp"]));
  check_spans("byte_offsets", AsSpans(tokens.byte_offsets()), GoldenSpans(golden["offsets_utf8"]));
  check("word_ids", AsInts(tokens.word_ids()), GoldenInts(golden["word_ids"]));
  check("sequence_ids", AsInts(tokens.sequence_ids()), GoldenInts(golden["sequence_ids"]));
  return out;
}

// Tokenize over HTTP/JSON, as curl and the dashboard call it (docs/api.md): the answer, or the
// error as the status its JSON body names.
absl::StatusOr<v1::TokenizeResponse> TokenizeOverHttp(httplib::Client& http,
                                                      const v1::TokenizeRequest& request) {
  json body = {{"model", request.model()}, {"text", request.text()}};
  if (request.has_text_pair()) body["textPair"] = request.text_pair();
  httplib::Result result = http.Post(kTokenizePath, body.dump(), "application/json");
  if (!result) return absl::UnavailableError(httplib::to_string(result.error()));
  if (result->status == 200) {
    v1::TokenizeResponse response;
    if (const auto parsed = google::protobuf::util::JsonStringToMessage(result->body, &response);
        !parsed.ok()) {
      return absl::InternalError(
          absl::StrCat("unparsable answer: ", parsed.ToString(), ": ", result->body));
    }
    return response;
  }
  const json error = json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  if (result->status == 400 && error.is_object() && error.value("code", "") == "invalid_argument") {
    return absl::InvalidArgumentError(error.value("message", ""));
  }
  return absl::UnknownError(absl::StrCat("HTTP ", result->status, ": ", result->body));
}

// What was compared for one model over one transport.
struct Tally {
  int64_t calls = 0;
  int64_t refusals = 0;
  int64_t different = 0;
  std::vector<std::string> reports;

  void Report(std::string report) {
    ++different;
    if (reports.size() < kMaxReports) reports.push_back(std::move(report));
  }
};

// Checks one answer against `expected`; `what` names the call in a report.
void Check(const absl::StatusOr<v1::TokenizeResponse>& answer, const Expected& expected,
           const std::string& what, Tally* tally) {
  ++tally->calls;
  if (!expected.refused_field.empty()) {
    ++tally->refusals;
    const std::string prefix = absl::StrCat(expected.refused_field, ": expected ");
    if (answer.ok() || !absl::IsInvalidArgument(answer.status()) ||
        !absl::StartsWith(answer.status().message(), prefix)) {
      tally->Report(absl::StrCat(what, ": expected INVALID_ARGUMENT starting '", prefix, "', got ",
                                 answer.ok() ? "an answer" : answer.status().ToString()));
    }
    return;
  }
  if (!answer.ok()) {
    tally->Report(absl::StrCat(what, ": ", answer.status().ToString()));
    return;
  }
  const std::vector<std::string> differences = Differences(answer->tokens(), *expected.golden);
  if (!differences.empty())
    tally->Report(absl::StrCat(what, "\n    ", absl::StrJoin(differences, "\n    ")));
}

TEST(TokenizerServedTest, GrpcAndHttpAnswerTheLibrarysTokensForEveryLayout) {
  const auto started = std::chrono::steady_clock::now();
  const std::string reference = ReferenceDir();
  ServerProcess::Options options;
  for (const ServedTokenizer& served : kServed) {
    const std::string dir = absl::StrCat(reference, "/checkpoints/", served.name);
    ASSERT_TRUE(std::filesystem::exists(dir + "/config.json"))
        << dir << " is missing; make it with: " << kMake;
    options.models.push_back(absl::StrCat(served.name, "=", dir));
  }
  options.extra_flags = {"--dashboard_dir="};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();
  httplib::Client http("127.0.0.1", (*server)->http_port());
  // One connection for the thousands of calls, as a browser keeps one.
  http.set_keep_alive(true);
  // httplib writes a request's headers and body apart: on a kept connection Nagle's algorithm then
  // holds the body until the server's delayed ACK, 40 ms a call.
  http.set_tcp_nodelay(true);
  http.set_read_timeout(60);

  std::vector<std::string> texts;
  for (const json& line : ReadJsonLines(TestDataDir() + "/multilingual_corpus.jsonl")) {
    texts.push_back(line.get<std::string>());
  }
  ASSERT_EQ(texts.size(), kCorpusLines);

  for (const ServedTokenizer& served : kServed) {
    SCOPED_TRACE(served.name);
    absl::StatusOr<v1::ModelInfo> info = client->GetModelInfo(served.name);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->tokenizer_kind(), served.kind);

    const std::string golden_path = absl::StrCat(reference, "/goldens/", served.name, ".jsonl");
    ASSERT_TRUE(std::filesystem::exists(golden_path))
        << golden_path << " is missing; make it with: " << kMake;
    const std::vector<json> rows = ReadJsonLines(golden_path);
    ASSERT_EQ(rows.size(), kCorpusLines);
    const auto has_tokens = [&](size_t line) { return !rows[line]["plain"]["ids"].empty(); };

    // Each line of the sample alone and paired with the next one, as the goldens have them.
    std::vector<Call> calls;
    int64_t lines = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      ASSERT_EQ(rows[i]["text"], texts[i]) << "line " << i << ": goldens of another corpus";
      // A line the library gives no token for is always served, to see it refused.
      if (!IsInTheSample(i, texts[i]) && has_tokens(i)) continue;
      ++lines;
      const size_t next = (i + 1) % rows.size();
      const std::string what = absl::StrCat("line ", i, " ", json(texts[i]).dump().substr(0, 100));
      Call single{
          {}, has_tokens(i) ? Expected{&rows[i]["single"], ""} : Expected{nullptr, "text"}, what};
      single.request.set_model(served.name);
      single.request.set_text(texts[i]);
      Call pair{single.request,
                !has_tokens(i)      ? Expected{nullptr, "text"}
                : !has_tokens(next) ? Expected{nullptr, "text_pair"}
                                    : Expected{&rows[i]["pair"], ""},
                what + " paired with the next line"};
      pair.request.set_text_pair(texts[next]);
      calls.push_back(std::move(single));
      calls.push_back(std::move(pair));
    }

    // The transports on a thread each, as two clients call side by side, so that this process and
    // the server work at once rather than in turn.
    std::vector<absl::StatusOr<v1::TokenizeResponse>> by_grpc(calls.size());
    std::vector<absl::StatusOr<v1::TokenizeResponse>> by_http(calls.size());
    std::thread grpc_calls([&] {
      for (size_t k = 0; k < calls.size(); ++k) by_grpc[k] = client->Tokenize(calls[k].request);
    });
    for (size_t k = 0; k < calls.size(); ++k) by_http[k] = TokenizeOverHttp(http, calls[k].request);
    grpc_calls.join();

    Tally grpc;
    Tally over_http;
    for (size_t k = 0; k < calls.size(); ++k) {
      Check(by_grpc[k], calls[k].expected, calls[k].what, &grpc);
      Check(by_http[k], calls[k].expected, calls[k].what, &over_http);
      // Also the fields no golden has (original_texts): one answer on both transports.
      if (by_grpc[k].ok() && by_http[k].ok() &&
          !MessageDifferencer::Equals(*by_grpc[k], *by_http[k])) {
        over_http.Report(absl::StrCat(calls[k].what, ": the HTTP answer differs from gRPC's: ",
                                      by_http[k]->ShortDebugString().substr(0, 300)));
      }
    }
    std::cout << served.name << ": " << lines << " corpus lines";
    for (const auto& [transport, tally] :
         {std::pair<const char*, const Tally*>{"gRPC", &grpc}, {"HTTP", &over_http}}) {
      std::cout << "; " << transport << " " << tally->calls << " calls (single and pair), "
                << tally->refusals << " of them refusals, " << tally->different << " different";
      EXPECT_EQ(tally->different, 0)
          << transport << ":\n  " << absl::StrJoin(tally->reports, "\n  ");
    }
    std::cout << "\n";
  }
  std::cout << "served and compared in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
            << " s\n";
}

// The text of each new token over HTTP/JSON (one JSON line per message; protobuf's JSON mapping
// leaves an empty text out), or the error.
absl::StatusOr<std::vector<std::string>> GeneratedTextsOverHttp(
    httplib::Client& http, const v1::GenerateRequest& request) {
  const json body = {{"model", request.model()},
                     {"prompt", request.prompt()},
                     {"maxNewTokens", request.max_new_tokens()}};
  httplib::Result result =
      http.Post("/attnscope.v1.AttentionService/Generate", body.dump(), "application/json");
  if (!result) return absl::UnavailableError(httplib::to_string(result.error()));
  if (result->status != 200) {
    return absl::UnknownError(absl::StrCat("HTTP ", result->status, ": ", result->body));
  }
  std::vector<std::string> texts;
  for (absl::string_view line : absl::StrSplit(result->body, '\n', absl::SkipEmpty())) {
    const json message = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (message.contains("error")) return absl::UnknownError(message.dump());
    if (message.contains("token")) texts.push_back(message["token"].value("text", ""));
  }
  return texts;
}

// Generate on a layout whose checkpoint writes a fixed run of new tokens after any prompt
// (make_checkpoints.py): on the Llama 2 layout emoji, CJK and Arabic characters the vocabulary
// lacks, spelled as 4, 3 and 2 "<0xXX>" tokens, between pieces with and without the space mark,
// then </s>; on Qwen3's (model_type qwen3, the real Qwen3 tokenizer) Vietnamese, then Korean
// syllables that byte-level BPE splits between tokens, then <|im_end|>. Each token's text must be
// what the contract says (GeneratedToken.text), taken from the library's decodes of the prompt and
// the first k new tokens: nothing while the decode ends in an incomplete character (U+FFFD), the
// whole character with the token that completes it, a piece's leading space as the decoders leave
// it.
void ExpectGenerateStreamsWholeCharacters(const std::string& name, int min_empty_pieces,
                                          int min_held_back_cuts) {
  const std::string reference = ReferenceDir();
  const std::string golden_path = absl::StrCat(reference, "/goldens/", name, ".generate.json");
  ASSERT_TRUE(std::filesystem::exists(golden_path))
      << golden_path << " is missing; make it with: " << kMake;
  std::ifstream file(golden_path);
  const json golden = json::parse(file, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(golden.is_object()) << golden_path << " is not a JSON object";
  const auto ids = golden["ids"].get<std::vector<int64_t>>();
  const auto decodes = golden["decodes"].get<std::vector<std::string>>();
  ASSERT_EQ(decodes.size(), ids.size() + 1);

  // The text streamed through each new token: the last decode so far without an incomplete
  // character, less the prompt's.
  constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";
  std::vector<std::string> expected;
  std::string streamed;
  for (size_t k = 1; k < decodes.size(); ++k) {
    ASSERT_TRUE(absl::StartsWith(decodes[k], decodes[0])) << decodes[k];
    const std::string so_far =
        absl::EndsWith(decodes[k], kReplacement) ? streamed : decodes[k].substr(decodes[0].size());
    ASSERT_TRUE(absl::StartsWith(so_far, streamed)) << so_far;
    expected.push_back(so_far.substr(streamed.size()));
    streamed = so_far;
  }
  // The run holds characters spelled by several tokens, so some tokens stream nothing.
  ASSERT_GE(std::count(expected.begin(), expected.end(), ""), min_empty_pieces);

  ServerProcess::Options options;
  options.models = {absl::StrCat(name, "=", reference, "/checkpoints/", name)};
  options.extra_flags = {"--dashboard_dir="};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  v1::GenerateRequest request;
  request.set_model(name);
  request.set_prompt(golden["prompt"].get<std::string>());
  request.set_max_new_tokens(static_cast<int32_t>(ids.size()) + 4);
  request.set_output_attentions(true);

  absl::StatusOr<GenerateResult> result = (*server)->NewClient()->Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<int64_t> prompt_ids(result->header.prompt_tokens().input_ids().begin(),
                                        result->header.prompt_tokens().input_ids().end());
  EXPECT_EQ(prompt_ids, golden["prompt_ids"].get<std::vector<int64_t>>());
  EXPECT_EQ(std::vector<int64_t>(result->done.ids().begin(), result->done.ids().end()), ids);
  EXPECT_EQ(result->done.finish_reason(), v1::FINISH_REASON_EOS);
  std::vector<std::string> texts;
  for (const GeneratedTokenResult& token : result->tokens) texts.push_back(token.token.text());
  EXPECT_EQ(texts, expected);
  EXPECT_EQ(result->done.text(), streamed);
  // Each token comes with its attention: [layer, head, key] over the prompt and the tokens before
  // it, float32 rows of one head summing to 1.
  for (size_t k = 0; k < result->tokens.size(); ++k) {
    SCOPED_TRACE(absl::StrCat("new token ", k));
    const std::optional<DecodedTensor>& attention = result->tokens[k].attention;
    ASSERT_TRUE(attention.has_value());
    ASSERT_EQ(attention->shape.size(), 3u);
    const int64_t keys = attention->shape[2];
    EXPECT_EQ(keys, static_cast<int64_t>(prompt_ids.size() + k));
    EXPECT_EQ(attention->wire_dtype, v1::DTYPE_FLOAT32);
    ASSERT_EQ(static_cast<int64_t>(attention->values.size()), attention->num_elements());
    double first_row = 0;
    for (int64_t key = 0; key < keys; ++key) first_row += attention->values[key];
    EXPECT_NEAR(first_row, 1.0, 1e-5);
  }

  httplib::Client http("127.0.0.1", (*server)->http_port());
  absl::StatusOr<std::vector<std::string>> over_http = GeneratedTextsOverHttp(http, request);
  ASSERT_TRUE(over_http.ok()) << over_http.status();
  EXPECT_EQ(*over_http, expected);

  // Stopped where the new tokens leave a character incomplete, the final text is the library's
  // decode without that character: the complete ones before it in the last tokens (which streamed
  // nothing) included.
  int held_back_cuts = 0;
  for (size_t k = 1; k < decodes.size(); ++k) {
    if (!absl::EndsWith(decodes[k], kReplacement)) continue;
    SCOPED_TRACE(absl::StrCat("stopped after ", k, " new tokens"));
    std::string complete = decodes[k];
    while (absl::EndsWith(complete, kReplacement)) {
      complete.resize(complete.size() - kReplacement.size());
    }
    complete = complete.substr(decodes[0].size());
    std::string streamed_through_k;
    for (size_t i = 0; i < k; ++i) streamed_through_k += expected[i];
    if (complete != streamed_through_k) ++held_back_cuts;
    request.set_max_new_tokens(static_cast<int32_t>(k));
    absl::StatusOr<GenerateResult> stopped = (*server)->NewClient()->Generate(request);
    ASSERT_TRUE(stopped.ok()) << stopped.status();
    EXPECT_EQ(stopped->done.finish_reason(), v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(stopped->done.text(), complete);
  }
  EXPECT_GE(held_back_cuts, min_held_back_cuts);
}

TEST(TokenizerServedTest, GenerateStreamsWholeCharactersOfTheLlama2Layout) {
  ExpectGenerateStreamsWholeCharacters("llama2-spm-bpe", /*min_empty_pieces=*/5,
                                       /*min_held_back_cuts=*/0);
}

TEST(TokenizerServedTest, GenerateStreamsWholeVietnameseAndKoreanCharactersOfQwen3) {
  ExpectGenerateStreamsWholeCharacters("qwen3", /*min_empty_pieces=*/3, /*min_held_back_cuts=*/1);
}

}  // namespace
}  // namespace attnscope::testing
