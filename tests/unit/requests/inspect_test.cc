// ListParameters, GetParameter and GetTrainingRecord (models/requests/inspect.cc) in process,
// against the checkpoint read independently (test_util's safetensors reader).
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/requests/request_test_util.h"
#include "tests/unit/test_util.h"

namespace attnscope {
namespace {

using ::testing::HasSubstr;
using testing::NewRunner;
using ::testing::Not;

TEST(RequestInspectTest, ParametersAreTheCheckpointsTensors) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  const std::map<std::string, torch::Tensor> tensors =
      testing::ReadCheckpointTensors(testing::TestDataDir() + "/tiny-bert");
  absl::StatusOr<ParameterListAnswer> list = runner->ListParameters("bert");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->parameters.size(), tensors.size());
  for (const ParameterInfo& parameter : list->parameters) {
    ASSERT_EQ(tensors.count(parameter.name), 1u) << parameter.name;
    EXPECT_EQ(parameter.shape, tensors.at(parameter.name).sizes().vec()) << parameter.name;
  }

  const std::string name = list->parameters.front().name;
  const torch::Tensor expected = tensors.at(name).to(torch::kFloat32);
  ASSERT_GE(expected.size(0), 3);
  ParameterQuery query;
  query.model = "bert";
  query.name = name;
  query.row_start = 1;
  query.row_end = 3;
  absl::StatusOr<ParameterAnswer> rows = runner->GetParameter(query);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_TRUE(torch::equal(rows->tensor, expected.narrow(0, 1, 2)));

  query.row_end = expected.size(0) + 1;
  EXPECT_EQ(runner->GetParameter(query).status().code(), absl::StatusCode::kInvalidArgument);
  query.name = "no.such.weight";
  absl::StatusOr<ParameterAnswer> missing = runner->GetParameter(query);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("'no.such.weight'"));
}

TEST(RequestInspectTest, TrainingRecordOfTheBuiltInModel) {
  std::unique_ptr<RequestRunner> runner = NewRunner();
  EXPECT_EQ(runner->GetTrainingRecord("bert").status().code(), absl::StatusCode::kNotFound);

  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(
      testing::LoadModel("default", testing::TestDataDir() + "/../../checkpoints/default"));
  RequestRunner with_record({}, std::move(models), nullptr);
  absl::StatusOr<TrainingRecordAnswer> record = with_record.GetTrainingRecord("default");
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_FALSE(record->points.empty());
  for (size_t i = 1; i < record->points.size(); ++i) {
    EXPECT_LT(record->points[i - 1].step, record->points[i].step);
  }
  EXPECT_THAT(record->record_json, HasSubstr("\"loss\""));
}

// The record is the one the folder held at load, as the weights are: a folder changed under a
// running server changes nothing the model answers. The refusal names no path of the server's.
TEST(RequestInspectTest, TrainingRecordIsTheOneReadAtLoad) {
  const std::string dir =
      testing::CopyToTempDir(testing::TestDataDir() + "/../../checkpoints/default");
  const std::string original = testing::ReadFileBytes(dir + "/training_record.json");
  std::vector<std::unique_ptr<LoadedModel>> models;
  models.push_back(testing::LoadModel("default", dir));
  models.push_back(testing::LoadModel("bert", testing::TestDataDir() + "/tiny-bert"));
  RequestRunner runner({}, std::move(models), nullptr);
  testing::WriteFileBytes(dir + "/training_record.json", R"({"history": []})");
  absl::StatusOr<TrainingRecordAnswer> record = runner.GetTrainingRecord("default");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->record_json, original);
  EXPECT_FALSE(record->points.empty());

  absl::StatusOr<TrainingRecordAnswer> none = runner.GetTrainingRecord("bert");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), Not(HasSubstr(testing::TestDataDir())));
}

}  // namespace
}  // namespace attnscope
