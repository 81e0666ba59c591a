// ListParameters, GetParameter and GetTrainingRecord: the checkpoint's tensors and the model
// folder's training record.

#include "models/requests/inspect.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "models/requests/checks.h"
#include "models/requests/requests.h"
#include "nlohmann/json.hpp"

namespace attnscope {

using requests_internal::TooLarge;

absl::StatusOr<ParameterListAnswer> RequestRunner::ListParameters(const std::string& model) const {
  ParameterListAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(model));
  const Checkpoint* checkpoint = answer.model->model().checkpoint();
  if (checkpoint == nullptr) return answer;
  for (const std::string& name : checkpoint->Names()) {
    answer.parameters.push_back({name, checkpoint->Get(name).sizes().vec()});
  }
  return answer;
}

absl::StatusOr<ParameterAnswer> RequestRunner::GetParameter(const ParameterQuery& query) const {
  ParameterAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(query.model));
  const Checkpoint* checkpoint = answer.model->model().checkpoint();
  if (checkpoint == nullptr || !checkpoint->Contains(query.name)) {
    // Names that share the last part of the requested one, e.g. "position_embeddings.weight"
    // finds "bert.embeddings.position_embeddings.weight".
    std::vector<std::string> similar;
    const std::string tail = query.name.substr(query.name.find('.') + 1);
    if (checkpoint != nullptr) {
      for (const std::string& name : checkpoint->Names()) {
        if (!tail.empty() && name.find(tail) != std::string::npos) similar.push_back(name);
      }
    }
    return absl::NotFoundError(absl::StrCat(
        "parameter '", query.name.substr(0, 200), "' of model '", answer.model->name(),
        "': not in its checkpoint; ",
        similar.empty() ? "ListParameters lists the names"
                        : absl::StrCat("did you mean ", absl::StrJoin(similar, ", "), "?")));
  }
  answer.name = query.name;
  answer.dtype = query.dtype;
  const torch::Tensor tensor = checkpoint->Get(query.name);
  const int64_t rows = tensor.dim() == 0 ? 1 : tensor.size(0);
  const int64_t row_end = query.row_end == 0 ? rows : query.row_end;
  if (query.row_start < 0 || query.row_start >= row_end || row_end > rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("rows [", query.row_start, ", ", query.row_end, ") of parameter '", query.name,
                     "': expected 0 <= row_start < row_end <= ", rows,
                     " (its first dimension; an end of 0 means the last row); fix `row_start` / "
                     "`row_end`"));
  }
  answer.row_start = query.row_start;
  answer.tensor =
      tensor.dim() == 0 ? tensor : tensor.narrow(0, query.row_start, row_end - query.row_start);
  const int64_t bytes = answer.tensor.numel() * BytesPerElement(answer.dtype);
  if (bytes > options_.max_response_bytes) {
    std::string fixes = "ask for fewer rows (`row_start`, `row_end`)";
    if (answer.dtype == OutputDType::kFloat32) absl::StrAppend(&fixes, " or dtype DTYPE_FLOAT16");
    return TooLarge("GetParameter", bytes, options_.max_response_bytes, fixes);
  }
  return answer;
}

absl::StatusOr<TrainingRecordAnswer> RequestRunner::GetTrainingRecord(
    const std::string& model_name) const {
  TrainingRecordAnswer answer;
  ATTNSCOPE_ASSIGN_OR_RETURN(answer.model, FindModel(model_name));
  if (!answer.model->training_record().has_value()) {
    return absl::NotFoundError(absl::StrCat(
        "model '", answer.model->name(),
        "' has no training record (training_record.json in its folder when it was loaded); only "
        "models trained by attnscope-train keep one"));
  }
  answer.record_json = *answer.model->training_record();
  const nlohmann::json json =
      nlohmann::json::parse(answer.record_json, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training record of model '", answer.model->name(),
                     "': expected a JSON object as attnscope-train writes it"));
  }
  std::vector<const nlohmann::json*> steps;
  auto add = [&steps](const nlohmann::json& entry) {
    if (entry.is_object() && entry.contains("step") && entry["step"].is_number()) {
      steps.push_back(&entry);
    }
  };
  if (json.contains("history") && json["history"].is_array()) {
    for (const nlohmann::json& entry : json["history"]) add(entry);
  } else {
    if (json.contains("first_steps") && json["first_steps"].is_array()) {
      for (const nlohmann::json& entry : json["first_steps"]) add(entry);
    }
    if (json.contains("last_window")) add(json["last_window"]);
  }
  for (const nlohmann::json* entry : steps) {
    TrainingPoint& point = answer.points.emplace_back();
    point.step = (*entry)["step"].get<int64_t>();
    for (const auto& item : entry->items()) {
      if (item.key() != "step" && item.value().is_number()) {
        point.values.emplace_back(item.key(), item.value().get<double>());
      }
    }
  }
  return answer;
}

}  // namespace attnscope
