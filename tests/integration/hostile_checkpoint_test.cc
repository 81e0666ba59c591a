// The real attnscope-server on broken and hostile checkpoints (hand-made hostile ones and every
// input the fuzzers found, fuzz/regressions, as the file it stands for): each is refused within 5
// s, with a peak resident memory under 1 GB, exit code 2 (never a signal) and one readable
// line on stderr naming the file and what is wrong with it. And a served model is not disturbed
// when its folder or files are replaced by rename while it runs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "tests/integration/integration_util.h"

namespace attnscope::testing {
namespace {

using Json = nlohmann::json;

// Processor time (user + system) of the refusing server, which the load of other processes on the
// machine does not inflate as it does the wall time.
constexpr double kMaxCpuSeconds = 5;
constexpr int64_t kMaxPeakMb = 1024;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Copies the files of tests/data/<name> into `dir`.
void CopyModel(const std::string& name, const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& entry : std::filesystem::directory_iterator(TestDataDir() + "/" + name)) {
    if (entry.is_regular_file()) {
      std::filesystem::copy_file(entry.path(), std::filesystem::path(dir) / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

void PatchConfig(const std::string& dir, const Json& patch) {
  Json config = Json::parse(ReadAll(dir + "/config.json"));
  config.update(patch);
  WriteAll(dir + "/config.json", config.dump(2));
}

// A safetensors file taken apart: its JSON header and data area.
struct Safetensors {
  Json header;
  std::string data;

  static Safetensors Read(const std::string& path) {
    const std::string bytes = ReadAll(path);
    uint64_t size = 0;
    for (int i = 7; i >= 0; --i) size = (size << 8) | static_cast<uint8_t>(bytes[i]);
    return {Json::parse(bytes.substr(8, size)), bytes.substr(8 + size)};
  }

  // Writes the file; `extra_bytes` of zeros after the data area are a hole (no disk used).
  void Write(const std::string& path, uint64_t extra_bytes = 0) const {
    const std::string text = header.dump();
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    WriteAll(path, bytes + text + data);
    ASSERT_EQ(
        truncate(path.c_str(), static_cast<off_t>(8 + text.size() + data.size() + extra_bytes)), 0);
  }

  // Overwrites float32 element `index` of tensor `name`.
  void SetFloat(const std::string& name, int64_t index, float value) {
    const uint64_t at = header.at(name).at("data_offsets")[0].get<uint64_t>() + 4 * index;
    std::memcpy(data.data() + at, &value, sizeof(value));
  }
};

struct Outcome {
  int wait_status = 0;
  bool finished = false;
  double seconds = 0;
  double cpu_seconds = 0;
  int64_t peak_mb = 0;
  std::string stderr_text;
};

// Runs attnscope-server on the checkpoint in `dir` until it exits (killed after 20 s) and measures
// its wall time, processor time and peak resident memory (wait4's ru_utime, ru_stime, ru_maxrss).
// The child's address space is capped at 16 GB so that a regression fails this test rather than the
// machine.
Outcome ServeAndWait(const std::string& dir) {
  TempDir logs;
  const std::string stderr_path = logs.path() + "/stderr";
  const std::vector<std::string> argv = {ServerBinary(), "--model=m=" + dir, "--listen=127.0.0.1:0",
                                         "--http_listen=127.0.0.1:0", "--metrics_port=0"};
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    const rlimit address_space = {16ull << 30, 16ull << 30};
    setrlimit(RLIMIT_AS, &address_space);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = open("/dev/null", O_WRONLY);
    if (err < 0 || null < 0) _exit(126);
    dup2(null, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  Outcome outcome;
  struct rusage usage = {};
  while (true) {
    const pid_t done = wait4(pid, &outcome.wait_status, WNOHANG, &usage);
    outcome.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == pid) {
      outcome.finished = true;
      break;
    }
    if (outcome.seconds > 20) {
      kill(-pid, SIGKILL);
      wait4(pid, &outcome.wait_status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  outcome.peak_mb = usage.ru_maxrss / 1024;
  outcome.cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                        static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  outcome.stderr_text = ReadAll(stderr_path);
  return outcome;
}

// The lines of stderr other than the start-up report of the BLAS speed, which the server measures
// (models/kernels/blas_check.cc) and logs (server/server.cc) before it reads any model.
std::vector<std::string> ErrorLines(const std::string& text) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const bool blas = absl::StartsWith(line, "attnscope: float32 matmul (768x768) at ") ||
                      absl::StartsWith(line, "WARNING: float32 matmul ") ||
                      absl::StartsWith(line, "attnscope-server: BLAS float32 GEMM at ");
    if (!blas) lines.emplace_back(line);
  }
  return lines;
}

// No control characters (a terminal shows them as garbage or acts on them) and no byte that cannot
// start or continue UTF-8.
bool IsReadable(absl::string_view line) {
  for (const char c : line) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f || byte == 0xc0 || byte == 0xc1 || byte > 0xf4) return false;
  }
  return true;
}

struct HostileCase {
  std::string name;
  // Makes the checkpoint in the given directory.
  std::function<void(const std::string& dir)> make;
  // What the refusal must name: the file, then the field or tensor (or what is wrong).
  std::string file;
  std::string key;
};

// Test names stay readable (and stable, for CTest) instead of the bytes of the struct.
void PrintTo(const HostileCase& c, std::ostream* out) { *out << c.name; }

// Where each fuzz target's input goes in a checkpoint folder (tiny-bert's, whose other files stay).
// tokenizer_config inputs are tokenizer_config.json, then optionally a NUL byte and config.json.
const std::vector<std::pair<std::string, std::string>>& FuzzTargetFiles() {
  static const auto* const files = new std::vector<std::pair<std::string, std::string>>{
      {"model_config", "config.json"},
      {"safetensors", "model.safetensors"},
      {"tokenizer_config", "tokenizer_config.json"},
      {"tokenizer_json", "tokenizer.json"},
  };
  return *files;
}

// Every input of fuzz/regressions/<target>/ for the targets that read checkpoint files.
std::vector<HostileCase> FuzzRegressionCases() {
  std::vector<HostileCase> cases;
  for (const auto& [target, file] : FuzzTargetFiles()) {
    const std::filesystem::path folder =
        std::filesystem::path(ATTNSCOPE_FUZZ_REGRESSIONS_DIR) / target;
    std::vector<std::filesystem::path> inputs;
    for (const auto& entry : std::filesystem::directory_iterator(folder)) {
      inputs.push_back(entry.path());
    }
    std::sort(inputs.begin(), inputs.end());
    for (const std::filesystem::path& input : inputs) {
      std::string name = absl::StrCat("fuzz_", target, "_", input.filename().string());
      for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      cases.push_back({name,
                       [input, file = file](const std::string& dir) {
                         CopyModel("tiny-bert", dir);
                         const std::string bytes = ReadAll(input.string());
                         const size_t nul =
                             file == "tokenizer_config.json" ? bytes.find('\0') : std::string::npos;
                         WriteAll(dir + "/" + file, bytes.substr(0, nul));
                         if (nul != std::string::npos) {
                           WriteAll(dir + "/config.json", bytes.substr(nul + 1));
                         }
                       },
                       file, "expected"});
    }
  }
  return cases;
}

std::vector<HostileCase> Cases() {
  auto patched = [](const std::string& model, Json patch) {
    return [model, patch](const std::string& dir) {
      CopyModel(model, dir);
      PatchConfig(dir, patch);
    };
  };
  auto bert_then = [](std::function<void(const std::string& dir)> spoil) {
    return [spoil](const std::string& dir) {
      CopyModel("tiny-bert", dir);
      spoil(dir);
    };
  };
  return {
      {"marian_positions_1e12",
       patched("tiny-marian", {{"max_position_embeddings", 1000000000000}}), "config.json",
       "'max_position_embeddings'"},
      {"marian_positions_1e8", patched("tiny-marian", {{"max_position_embeddings", 100000000}}),
       "config.json", "'max_position_embeddings'"},
      {"bert_layers_1e9", patched("tiny-bert", {{"num_hidden_layers", 1000000000}}), "config.json",
       "'num_hidden_layers'"},
      {"bert_layers_1e5", patched("tiny-bert", {{"num_hidden_layers", 100000}}), "config.json",
       "'num_hidden_layers'"},
      {"bert_layers_beyond_the_weights", patched("tiny-bert", {{"num_hidden_layers", 1000}}),
       "config.json", "'num_hidden_layers'"},
      {"bert_positions_1e10", patched("tiny-bert", {{"max_position_embeddings", 10000000000}}),
       "config.json", "'max_position_embeddings'"},
      {"pad_token_id_beyond_the_vocabulary", patched("tiny-bert", {{"pad_token_id", 5000}}),
       "config.json", "'pad_token_id'"},
      {"rope_theta_0", patched("tiny-llama", {{"rope_theta", 0}}), "config.json", "'rope_theta'"},
      {"config_symlink_to_dev_zero", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/config.json");
         ASSERT_EQ(symlink("/dev/zero", (dir + "/config.json").c_str()), 0);
       }),
       "config.json", "character device"},
      {"config_fifo", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/config.json");
         ASSERT_EQ(mkfifo((dir + "/config.json").c_str(), 0600), 0);
       }),
       "config.json", "FIFO"},
      {"tokenizer_config_symlink_to_dev_zero", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/tokenizer_config.json");
         ASSERT_EQ(symlink("/dev/zero", (dir + "/tokenizer_config.json").c_str()), 0);
       }),
       "tokenizer_config.json", "character device"},
      {"vocab_fifo", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/vocab.txt");
         ASSERT_EQ(mkfifo((dir + "/vocab.txt").c_str(), 0600), 0);
       }),
       "vocab.txt", "FIFO"},
      {"weights_fifo", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/model.safetensors");
         ASSERT_EQ(mkfifo((dir + "/model.safetensors").c_str(), 0600), 0);
       }),
       "model.safetensors", "FIFO"},
      {"unused_1gb_float16_tensor", bert_then([](const std::string& dir) {
         Safetensors file = Safetensors::Read(dir + "/model.safetensors");
         constexpr uint64_t kElements = 1ull << 29;
         file.header["unused.big"] = {
             {"dtype", "F16"},
             {"shape", {kElements}},
             {"data_offsets", {file.data.size(), file.data.size() + 2 * kElements}}};
         file.Write(dir + "/model.safetensors", /*extra_bytes=*/2 * kElements);
       }),
       "model.safetensors", "'unused.big'"},
      {"nan_weight", bert_then([](const std::string& dir) {
         Safetensors file = Safetensors::Read(dir + "/model.safetensors");
         file.SetFloat("bert.encoder.layer.2.output.dense.weight", 7, NAN);
         file.Write(dir + "/model.safetensors");
       }),
       "model.safetensors", "'bert.encoder.layer.2.output.dense.weight'"},
      {"inf_weight", bert_then([](const std::string& dir) {
         Safetensors file = Safetensors::Read(dir + "/model.safetensors");
         file.SetFloat("bert.embeddings.LayerNorm.weight", 0, -INFINITY);
         file.Write(dir + "/model.safetensors");
       }),
       "model.safetensors", "'bert.embeddings.LayerNorm.weight'"},
      {"config_symlink_loop", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/config.json");
         ASSERT_EQ(symlink((dir + "/config.json").c_str(), (dir + "/config.json").c_str()), 0);
       }),
       "config.json", "symbolic links"},
      {"config_proc_self_mem", bert_then([](const std::string& dir) {
         std::filesystem::remove(dir + "/config.json");
         ASSERT_EQ(symlink("/proc/self/mem", (dir + "/config.json").c_str()), 0);
       }),
       "config.json", "cannot be read"},
      {"overlapping_tensors", bert_then([](const std::string& dir) {
         Safetensors file = Safetensors::Read(dir + "/model.safetensors");
         file.header["bert.encoder.layer.0.attention.self.key.weight"]["data_offsets"] =
             file.header["bert.encoder.layer.0.attention.self.query.weight"]["data_offsets"];
         file.Write(dir + "/model.safetensors");
       }),
       "model.safetensors", "without overlaps or gaps"},
      // Far beyond: a few added tokens past the embeddings load (engine.cc).
      {"tokenizer_beyond_vocab_size", bert_then([](const std::string& dir) {
         std::ofstream vocab(dir + "/vocab.txt", std::ios::app);
         for (int i = 0; i < 300; ++i) vocab << "beyond" << i << "\n";
       }),
       "tokenizer files in '", "'vocab_size'"},
  };
}

// The hostile pytorch_model.bin files of tests/data/make_hostile_pickles.py (written by Python's
// zipfile, not by attnscope) as tiny-bert's weights. `key` is what the refusal names.
std::vector<HostileCase> PickleCases() {
  const std::pair<const char*, const char*> kCases[] = {
      {"nested_tuples", "nested more than 32 deep"},
      {"open_marks", "open MARKs"},
      {"string_4gb", "BINUNICODE of 4294967295 bytes"},
      {"memo_id_4e9", "memo id 4000000000"},
      {"deflated_1500mb", "inflating to more than"},
      {"storage_beyond_record", "expected at most the record's 24 bytes"},
      {"tensor_beyond_storage", "expected at most its storage's 24"},
      {"global_os_system", "GLOBAL 'os.system'"},
      {"odd_setitems", "in pairs"},
      {"list_nested_by_memo", "inside another already"},
  };
  std::vector<HostileCase> cases;
  for (const auto& [name, key] : kCases) {
    cases.push_back(
        {absl::StrCat("pickle_", name),
         [name = std::string(name)](const std::string& dir) {
           CopyModel("tiny-bert", dir);
           std::filesystem::remove(dir + "/model.safetensors");
           const std::string made = dir + "/made";
           const CommandResult result =
               RunCommand({"/usr/bin/python3", ATTNSCOPE_MAKE_HOSTILE_PICKLES, made, name});
           ASSERT_EQ(result.exit_code, 0) << result.stderr_text;
           std::filesystem::rename(made + "/" + name + ".bin", dir + "/pytorch_model.bin");
           std::filesystem::remove_all(made);
         },
         "pytorch_model.bin", key});
  }
  return cases;
}

std::vector<HostileCase> AllCases() {
  std::vector<HostileCase> cases = Cases();
  for (HostileCase& c : PickleCases()) cases.push_back(std::move(c));
  for (HostileCase& c : FuzzRegressionCases()) cases.push_back(std::move(c));
  return cases;
}

class HostileCheckpointTest : public ::testing::TestWithParam<HostileCase> {};

TEST_P(HostileCheckpointTest, IsRefusedQuicklyOnOneLineWithoutASignal) {
  const HostileCase& c = GetParam();
  TempDir temp;
  const std::string dir = temp.path() + "/" + c.name;
  c.make(dir);
  const Outcome outcome = ServeAndWait(dir);
  EXPECT_TRUE(outcome.finished) << "still running after 20 s (the checkpoint was served?)";
  EXPECT_TRUE(WIFEXITED(outcome.wait_status))
      << "ended by signal " << WTERMSIG(outcome.wait_status) << "\n"
      << outcome.stderr_text.substr(0, 2000);
  if (WIFEXITED(outcome.wait_status)) {
    EXPECT_EQ(WEXITSTATUS(outcome.wait_status), 2);
  }
  EXPECT_LT(outcome.cpu_seconds, kMaxCpuSeconds) << outcome.seconds << " s of wall time";
  EXPECT_LT(outcome.peak_mb, kMaxPeakMb);
  const std::vector<std::string> lines = ErrorLines(outcome.stderr_text);
  ASSERT_EQ(lines.size(), 1u) << outcome.stderr_text.substr(0, 2000);
  const std::string& line = lines[0];
  EXPECT_LT(line.size(), 1000u) << line.substr(0, 1000);
  EXPECT_TRUE(IsReadable(line)) << line.substr(0, 1000);
  EXPECT_NE(line.find(c.file), std::string::npos) << line.substr(0, 1000);
  EXPECT_NE(line.find(c.key), std::string::npos) << line.substr(0, 1000);
  // A broken file is the checkpoint's fault, never the server's.
  EXPECT_EQ(line.find("INTERNAL"), std::string::npos) << line.substr(0, 1000);
  std::printf("%s: %.2f s (%.2f CPU-s), peak %lld MB: %s\n", c.name.c_str(), outcome.seconds,
              outcome.cpu_seconds, static_cast<long long>(outcome.peak_mb),
              line.substr(0, 1000).c_str());
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, HostileCheckpointTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<HostileCase>& info) {
                           return info.param.name;
                         });

// Deployments replace a model by rename (a new folder renamed over the old, or new files renamed
// over the old ones): the running server keeps the files it opened and answers as before.
TEST(ModelReplacementTest, ByRenameLeavesTheServedModelAlone) {
  TempDir temp;
  const std::string dir = temp.path() + "/model";
  CopyModel("tiny-bert", dir);
  ServerProcess::Options options;
  options.models = {"bert=" + dir};
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::unique_ptr<Client> client = (*server)->NewClient();
  v1::GetAttentionRequest request;
  request.set_model("bert");
  request.set_text("the capital of france is paris");
  const absl::StatusOr<AttentionResult> before = client->GetAttention(request);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_FALSE(before->attentions.values.empty());

  // Another checkpoint of other sizes and weights, renamed over model.safetensors and config.json.
  const std::string other = temp.path() + "/other";
  BertShape shape;
  shape.layers = 2;
  shape.hidden = 64;
  shape.heads = 2;
  shape.intermediate = 128;
  shape.max_positions = 64;
  std::filesystem::create_directories(other);
  const absl::Status written = WriteRandomBert(shape, other, /*seed=*/7);
  ASSERT_TRUE(written.ok()) << written;
  for (const char* file : {"model.safetensors", "config.json"}) {
    ASSERT_EQ(std::rename((other + "/" + file).c_str(), (dir + "/" + file).c_str()), 0) << file;
  }
  absl::StatusOr<AttentionResult> after = client->GetAttention(request);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->attentions.shape, before->attentions.shape);
  EXPECT_EQ(after->attentions.values, before->attentions.values);

  // The whole folder renamed away and another renamed in its place.
  ASSERT_EQ(std::rename(dir.c_str(), (temp.path() + "/old").c_str()), 0);
  CopyModel("tiny-bert", temp.path() + "/next");
  Safetensors next = Safetensors::Read(temp.path() + "/next/model.safetensors");
  next.SetFloat("bert.encoder.layer.0.attention.self.query.weight", 0, 3.0f);
  next.Write(temp.path() + "/next/model.safetensors");
  ASSERT_EQ(std::rename((temp.path() + "/next").c_str(), dir.c_str()), 0);
  after = client->GetAttention(request);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->attentions.values, before->attentions.values);
  absl::StatusOr<v1::ModelInfo> info = client->GetModelInfo("bert");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_hidden_layers(), 3);
  EXPECT_EQ(info->hidden_size(), 32);
}

}  // namespace
}  // namespace attnscope::testing
