#include "models/file_util.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace attnscope {

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    std::string reason = std::strerror(error);
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat("file '", path, "': does not exist"));
    }
    if (error == EACCES) {
      return absl::PermissionDeniedError(absl::StrCat("file '", path, "': ", reason));
    }
    return absl::InternalError(absl::StrCat("file '", path, "': cannot open: ", reason));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("file '", path, "': read failed"));
  return bytes.str();
}

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace attnscope
