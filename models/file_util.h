// Small file helpers returning absl::Status.
#ifndef ATTNSCOPE_MODELS_FILE_UTIL_H_
#define ATTNSCOPE_MODELS_FILE_UTIL_H_

#include <string>

#include "absl/status/statusor.h"

namespace attnscope {

// The whole file as bytes. NotFound when it does not exist, PermissionDenied or Internal when it
// cannot be read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// True when `path` names an existing regular file.
bool FileExists(const std::string& path);

// `dir` + "/" + `name`, without doubling the slash.
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_FILE_UTIL_H_
