// ListParameters, GetParameter and GetTrainingRecord: queries and answers about a loaded model's
// checkpoint and training record.
#ifndef ATTNSCOPE_MODELS_REQUESTS_INSPECT_H_
#define ATTNSCOPE_MODELS_REQUESTS_INSPECT_H_

#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/requests/types.h"

namespace attnscope {

// A weight tensor by its checkpoint name (ListParameters, GetParameter).
struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
};

struct ParameterListAnswer {
  const LoadedModel* model = nullptr;
  // In name order.
  std::vector<ParameterInfo> parameters;
};

struct ParameterQuery {
  std::string model;
  // A checkpoint tensor name, e.g. "embeddings.position_embeddings.weight".
  std::string name;
  OutputDType dtype = OutputDType::kFloat32;
  // Rows [row_start, row_end) of the first dimension; an end of 0 means the last row.
  int64_t row_start = 0;
  int64_t row_end = 0;
};

struct ParameterAnswer {
  const LoadedModel* model = nullptr;
  std::string name;
  OutputDType dtype = OutputDType::kFloat32;
  // The first row returned (row_start).
  int64_t row_start = 0;
  // The tensor, cut to the rows; float32, a view of the checkpoint's.
  torch::Tensor tensor;
};

// One recorded training step: "loss", "learning_rate" and whatever else the record holds.
struct TrainingPoint {
  int64_t step = 0;
  std::vector<std::pair<std::string, double>> values;
};

struct TrainingRecordAnswer {
  const LoadedModel* model = nullptr;
  // In step order.
  std::vector<TrainingPoint> points;
  // training_record.json as written by the trainer.
  std::string record_json;
};

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_REQUESTS_INSPECT_H_
