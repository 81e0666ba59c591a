// ValidateServerOptions: each flag value that cannot work is refused before anything starts, with
// a message naming the flag, and the defaults and the documented special values pass.
#include <cmath>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/unit/test_util.h"

namespace attnscope::server {
namespace {

using ::testing::HasSubstr;

ServerOptions Valid() {
  ServerOptions options;
  LoadedModel::Options model;
  model.name = "bert";
  model.model_dir = "/models/bert";
  options.models.push_back(model);
  return options;
}

TEST(ValidateServerOptionsTest, DefaultsAndSpecialValuesPass) {
  EXPECT_TRUE(ValidateServerOptions(Valid()).ok());
  ServerOptions options = Valid();
  options.listen = "127.0.0.1:0";  // a free port
  options.metrics_port = 0;        // no /metrics
  options.worker_threads = 0;
  options.service.max_concurrent_requests = 0;
  options.shutdown_grace_seconds = 0;
  options.models[0].max_tokens = 0;
  EXPECT_TRUE(ValidateServerOptions(options).ok());
  options.listen = "[::1]:65535";
  EXPECT_TRUE(ValidateServerOptions(options).ok());
}

TEST(ValidateServerOptionsTest, RefusesEachBadValueNamingItsFlag) {
  struct Row {
    const char* name;
    void (*change)(ServerOptions&);
    const char* flag;
  };
  const Row rows[] = {
      {"port above 65535", [](ServerOptions& o) { o.listen = "127.0.0.1:99999"; }, "--listen"},
      {"negative port", [](ServerOptions& o) { o.listen = "127.0.0.1:-1"; }, "--listen"},
      {"no port", [](ServerOptions& o) { o.listen = "127.0.0.1"; }, "--listen"},
      {"no host", [](ServerOptions& o) { o.listen = ":50051"; }, "--listen"},
      {"port not a number", [](ServerOptions& o) { o.listen = "localhost:http"; }, "--listen"},
      {"metrics port", [](ServerOptions& o) { o.metrics_port = 70000; }, "--metrics_port"},
      {"zero response cap", [](ServerOptions& o) { o.service.max_response_bytes = 0; },
       "--max_response_bytes"},
      {"negative response cap", [](ServerOptions& o) { o.service.max_response_bytes = -5; },
       "--max_response_bytes"},
      {"negative max_tokens", [](ServerOptions& o) { o.models[0].max_tokens = -1; },
       "--max_tokens"},
      {"negative worker threads", [](ServerOptions& o) { o.worker_threads = -2; },
       "--worker_threads"},
      {"negative concurrency", [](ServerOptions& o) { o.service.max_concurrent_requests = -3; },
       "--max_concurrent_requests"},
      {"negative grace", [](ServerOptions& o) { o.shutdown_grace_seconds = -1; },
       "--shutdown_grace_seconds"},
      {"NaN grace", [](ServerOptions& o) { o.shutdown_grace_seconds = std::nan(""); },
       "--shutdown_grace_seconds"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    ServerOptions options = Valid();
    row.change(options);
    const absl::Status status = ValidateServerOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(row.flag));
  }
}

TEST(ResolveModelsTest, NamesArePlainNeverPaths) {
  ModelSources sources;
  sources.specs = {"bert-base_v1.2=/models/bert"};
  absl::StatusOr<std::vector<LoadedModel::Options>> models = ResolveModels(sources);
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name, "bert-base_v1.2");
  EXPECT_EQ((*models)[0].model_dir, "/models/bert");
  for (const std::string name : {"../x", "a/b", ".hidden", "..", "b e r t", "m\\n"}) {
    SCOPED_TRACE(name);
    sources.specs = {name + "=/models/bert"};
    const absl::Status status = ResolveModels(sources).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr("never a path"));
  }
  sources.specs = {"bert=/a", "bert=/b"};
  EXPECT_THAT(std::string(ResolveModels(sources).status().message()), HasSubstr("twice"));
}

// A notebook's .ipynb_checkpoints copy of a checkpoint (or any hidden folder) stopped the whole
// server from starting: its name is no model name.
TEST(ResolveModelsTest, ARepositorySkipsHiddenFolders) {
  const std::string repository = testing::MakeTempDir();
  for (const std::string dir : {"bert", ".ipynb_checkpoints", ".git"}) {
    std::filesystem::create_directory(repository + "/" + dir);
    testing::WriteFileBytes(repository + "/" + dir + "/config.json", "{}");
  }
  ModelSources sources;
  sources.repository = repository;
  absl::StatusOr<std::vector<LoadedModel::Options>> models = ResolveModels(sources);
  ASSERT_TRUE(models.ok()) << models.status();
  ASSERT_EQ(models->size(), 1u);
  EXPECT_EQ((*models)[0].name, "bert");
  EXPECT_EQ((*models)[0].model_dir, repository + "/bert");
}

}  // namespace
}  // namespace attnscope::server
