// No flag of the benchmarks or the trainer is silently ignored: every flag a tool's --help lists
// has a value here that the tool refuses, exiting 2 with a message that names the flag, before it
// measures or trains anything. The lists are read from --help, so a new flag without a case here
// fails the test. (attnscope-server: server_flags_test; the CLI: cli_test.)
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

// A value (with the arguments it needs) that cannot work, and what the refusal must say.
struct Refusal {
  std::vector<std::string> args;
  std::string message;
};

void ExpectEveryFlagRefused(const std::string& binary, const std::vector<std::string>& leading,
                            const std::map<std::string, Refusal>& refusals) {
  const std::set<std::string> documented = FlagsInHelp(binary);
  ASSERT_FALSE(documented.empty()) << binary << " --help lists no flags; did its format change?";
  std::set<std::string> covered;
  for (const auto& [flag, refusal] : refusals) covered.insert(flag);
  EXPECT_EQ(documented, covered) << binary << "\ndocumented: " << absl::StrJoin(documented, " ")
                                 << "\ncovered: " << absl::StrJoin(covered, " ");
  for (const auto& [flag, refusal] : refusals) {
    std::vector<std::string> argv = {binary};
    argv.insert(argv.end(), leading.begin(), leading.end());
    argv.insert(argv.end(), refusal.args.begin(), refusal.args.end());
    const CommandResult result = RunCommand(argv, absl::Seconds(60));
    EXPECT_EQ(result.exit_code, 2) << absl::StrJoin(argv, " ") << "\n" << result.stderr_text;
    EXPECT_NE(result.stderr_text.find(refusal.message), std::string::npos)
        << absl::StrJoin(argv, " ") << ": the refusal does not say '" << refusal.message << "':\n"
        << result.stderr_text;
  }
}

TEST(ToolFlagsTest, EngineBenchRefusesWhatItCannotMeasure) {
  ExpectEveryFlagRefused(
      ATTNSCOPE_ENGINE_BENCH_PATH, {},
      {{"dir", {{"--dir", "/proc/attnscope-bench"}, "--dir '/proc/attnscope-bench': expected"}},
       {"family", {{"--family", "xlnet"}, "--family 'xlnet': expected bert, roberta or gpt2"}},
       // The case of the earlier fault: a length the reference cannot make is refused, not read
       // as another.
       {"tokens", {{"--tokens", "513"}, "--tokens '513': expected an integer from 1 to 512"}},
       {"repeats", {{"--repeats=3x"}, "--repeats '3x': expected an integer"}},
       {"threads", {{"--threads", "-1"}, "--threads '-1': expected an integer from 0"}},
       {"python",
        {{"--python", "/nonexistent/python3"}, "--python '/nonexistent/python3': expected"}},
       {"onnxruntime",
        {{"--onnxruntime", "/nonexistent/onnxruntime"},
         "--onnxruntime '/nonexistent/onnxruntime': expected node_modules/onnxruntime-node"}},
       {"compute_dtype",
        {{"--compute_dtype", "fp16"},
         "--compute_dtype: expected float32 or bfloat16, got 'fp16'"}}});
}

TEST(ToolFlagsTest, ServiceBenchRefusesWhatItCannotMeasure) {
  ExpectEveryFlagRefused(
      ATTNSCOPE_SERVICE_BENCH_PATH, {},
      {{"dir", {{"--dir=/proc/attnscope-bench"}, "--dir '/proc/attnscope-bench': expected"}},
       {"repeats", {{"--repeats", "0"}, "--repeats '0': expected an integer from 1"}},
       {"python", {{"--python=/bin/false"}, "--python '/bin/false': expected"}}});
}

TEST(ToolFlagsTest, GenerationBenchRefusesWhatItCannotMeasure) {
  ExpectEveryFlagRefused(
      ATTNSCOPE_GENERATION_BENCH_PATH, {},
      {{"model_dir",
        {{"--model_dir", "/nonexistent/llama"}, "--model_dir '/nonexistent/llama': expected"}},
       {"max_new_tokens",
        {{"--max_new_tokens", "8"}, "--max_new_tokens '8': expected an integer from 32"}},
       {"repeats", {{"--repeats=0"}, "--repeats '0': expected an integer from 1"}},
       {"threads", {{"--threads", "-1"}, "--threads '-1': expected an integer from 0"}},
       {"recompute", {{"--recompute", "2"}, "--recompute '2': expected an integer from 0 to 1"}}});
}

TEST(ToolFlagsTest, DashboardBenchRefusesWhatItCannotMeasure) {
  ExpectEveryFlagRefused(
      ATTNSCOPE_DASHBOARD_BENCH_PATH, {},
      {{"tokens", {{"--tokens", "513"}, "--tokens '513': expected an integer from 3 to 512"}},
       {"runs", {{"--runs=0"}, "--runs '0': expected an integer from 1"}}});
}

TEST(ToolFlagsTest, TrainerRefusesBadValuesAndFlagsOfTheOtherCommand) {
  TempDir model_dir;
  std::ofstream(model_dir.path() + "/vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\na\n";
  TempDir data_dir;
  const std::string data = data_dir.path() + "/train.jsonl";
  std::ofstream(data) << R"({"a": "a a", "b": "", "label": 0})"
                      << "\n";
  const std::string binary = ATTNSCOPE_TRAIN_PATH;
  const std::vector<std::string> train = {"train", "--model_dir=" + model_dir.path(),
                                          "--data=" + data};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), train.begin(), train.end());
    return args;
  };
  TempDir marian_dir;
  for (const char* name : {"source.spm", "target.spm", "vocab.json"}) {
    std::ifstream in(TestDataDir() + "/tiny-marian/" + name, std::ios::binary);
    std::ofstream(marian_dir.path() + "/" + name, std::ios::binary) << in.rdbuf();
  }
  const std::string pairs = data_dir.path() + "/pairs.jsonl";
  std::ofstream(pairs) << R"({"lang": "vi", "source": "Inserting Tables", "target": "Chèn bảng"})"
                       << "\n";
  auto translate = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"translate", "--model_dir=" + marian_dir.path(), "--data=" + pairs,
                               "--steps=10", "--warmup_steps=1"});
    return args;
  };
  // model_dir and the vocab flags through 'vocab', the rest through 'train' with valid data.
  const std::string corpus = data;
  ExpectEveryFlagRefused(
      binary, {},
      {{"model_dir",
        {{"train", "--model_dir=/nonexistent/model", "--data=" + data},
         "--model_dir '/nonexistent/model': expected an existing directory"}},
       {"corpus",
        {{"vocab", "--model_dir=" + model_dir.path(), "--corpus=/nonexistent/corpus.txt"},
         "--corpus '/nonexistent/corpus.txt': expected a readable file"}},
       {"heldout",
        {{"vocab", "--model_dir=" + model_dir.path(), "--corpus=" + corpus,
          "--heldout=/nonexistent/heldout.jsonl"},
         "--heldout '/nonexistent/heldout.jsonl'"}},
       {"vocab_size",
        {{"vocab", "--model_dir=" + model_dir.path(), "--corpus=" + corpus, "--vocab_size=3"},
         "--vocab_size 3: expected at least 6"}},
       {"required_tokens",
        {{"vocab", "--model_dir=" + model_dir.path(), "--corpus=" + corpus,
          "--required_tokens=/nonexistent/tokens.txt"},
         "--required_tokens '/nonexistent/tokens.txt': expected a readable file"}},
       {"data", {{"train", "--model_dir=" + model_dir.path()}, "--data '': expected"}},
       {"steps", {with({"--steps=0"}), "--steps 0: expected at least 1"}},
       {"warmup_steps", {with({"--warmup_steps=-1"}), "--warmup_steps -1"}},
       {"linear_decay",
        {with({"--linear_decay", "--steps=100", "--warmup_steps=400"}),
         "--linear_decay: expected --steps (100) above --warmup_steps (400)"}},
       {"peak_lr", {with({"--peak_lr=0"}), "--peak_lr 0: expected more than 0"}},
       {"batch_size", {with({"--batch_size=0"}), "--batch_size 0"}},
       {"single_every", {with({"--single_every=0"}), "--single_every 0"}},
       {"length_bucket_batches",
        {with({"--length_bucket_batches=0"}), "--length_bucket_batches 0"}},
       {"threads", {with({"--threads=0"}), "--threads 0"}},
       {"tied_query_key_init", {with({"--tied_query_key_init=-1"}), "--tied_query_key_init -1"}},
       {"query_mask_prob", {with({"--query_mask_prob=1.5"}), "--query_mask_prob 1.5"}},
       {"relevance_weight", {with({"--relevance_weight=-2"}), "--relevance_weight -2"}},
       {"dropout", {with({"--dropout=1"}), "--dropout 1: expected 0 <= value < 1"}},
       {"init_from", {with({"--init_from=/nonexistent/ckpt"}), "--init_from '/nonexistent/ckpt"}},
       {"record_name", {with({"--record_name=a/b.json"}), "--record_name 'a/b.json'"}},
       {"log_every", {with({"--log_every=0"}), "--log_every 0"}},
       {"history_every", {with({"--history_every=0"}), "--history_every 0"}},
       {"save_every", {with({"--save_every=0"}), "--save_every 0"}},
       {"record_steps", {with({"--record_steps=-1"}), "--record_steps -1"}},
       {"record_examples",
        {with({"--record_examples=/nonexistent/dir/x.jsonl"}),
         "--record_examples '/nonexistent/dir/x.jsonl'"}},
       // The translation model's flags through 'translate', on tiny-marian's tokenizer files.
       {"d_model", {translate({"--d_model=1"}), "--d_model 1: expected at least 2"}},
       {"encoder_layers", {translate({"--encoder_layers=0"}), "--encoder_layers 0"}},
       {"decoder_layers", {translate({"--decoder_layers=0"}), "--decoder_layers 0"}},
       {"attention_heads",
        {translate({"--attention_heads=3"}), "expected an even multiple of --attention_heads (3)"}},
       {"ffn_dim", {translate({"--ffn_dim=0"}), "--ffn_dim 0"}},
       {"max_length", {translate({"--max_length=2"}), "--max_length 2: expected at least 3"}},
       {"label_smoothing", {translate({"--label_smoothing=1"}), "--label_smoothing 1"}},
       {"max_new_tokens", {translate({"--max_new_tokens=0"}), "--max_new_tokens 0"}},
       {"evaluation_name",
        {translate({"--evaluation_name=a/b.json"}), "--evaluation_name 'a/b.json'"}}});

  // A flag of the other command is refused, not ignored.
  CommandResult result = RunCommand(
      {binary, "train", "--model_dir=" + model_dir.path(), "--data=" + data, "--vocab_size=100"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.stderr_text.find("--vocab_size: 'attnscope-train train' does not read it"),
            std::string::npos)
      << result.stderr_text;
  result = RunCommand(
      {binary, "vocab", "--model_dir=" + model_dir.path(), "--corpus=" + corpus, "--steps=10"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.stderr_text.find("--steps: 'attnscope-train vocab' does not read it"),
            std::string::npos)
      << result.stderr_text;
  // 'tokens' reads only model_dir and heldout.
  result = RunCommand({binary, "tokens", "--model_dir=" + model_dir.path(), "--heldout=" + data,
                       "--corpus=" + corpus});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.stderr_text.find("--corpus: 'attnscope-train tokens' does not read it"),
            std::string::npos)
      << result.stderr_text;
  result = RunCommand({binary, "tokens", "--model_dir=" + model_dir.path()});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.stderr_text.find("--heldout '': expected a readable file"), std::string::npos)
      << result.stderr_text;
}

TEST(ToolFlagsTest, SoakScriptRefusesValuesItCannotUse) {
  const std::string script = std::string(ATTNSCOPE_SOURCE_DIR) + "/bench/soak.sh";
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--clients", "0"}, "--clients '0': expected a whole number"},
           {{"--duration", "10m"}, "--duration '10m': expected a whole number"},
           {{"--every", "-3"}, "--every '-3': expected a whole number"},
           {{"--model", "/nonexistent/model"}, "--model '/nonexistent/model': expected"},
           {{"--rate", "5"}, "unknown flag --rate"}}) {
    std::vector<std::string> argv = {"/bin/bash", script};
    argv.insert(argv.end(), args.begin(), args.end());
    const CommandResult result = RunCommand(argv);
    EXPECT_EQ(result.exit_code, 2) << absl::StrJoin(args, " ");
    EXPECT_NE(result.stderr_text.find(message), std::string::npos) << result.stderr_text;
  }
}

}  // namespace
}  // namespace attnscope::testing
