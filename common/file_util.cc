#include "common/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnscope {
namespace {

const char* KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status OpenError(const std::string& path, int error) {
  if (error == ENOENT) {
    return absl::NotFoundError(absl::StrCat("file '", path, "': does not exist"));
  }
  if (error == EACCES) {
    return absl::PermissionDeniedError(
        absl::StrCat("file '", path, "': ", std::strerror(error), "; make it readable"));
  }
  // A link loop, a name too long, a component that is not a folder: the path's fault.
  return absl::InvalidArgumentError(absl::StrCat("file '", path,
                                                 "': cannot open: ", std::strerror(error),
                                                 "; point it at a readable regular file"));
}

absl::Status CheckStat(const std::string& path, const struct stat& info, uint64_t max_bytes) {
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("file '", path, "': expected a regular file, got ", KindOf(info.st_mode),
                     "; put the file itself there"));
  }
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("file '", path, "': expected at most ",
                                                   max_bytes, " bytes, got ", info.st_size,
                                                   "; check that it is the right file"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRegularFile(const std::string& path, uint64_t max_bytes) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return OpenError(path, errno);
  return CheckStat(path, info, max_bytes);
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  if (absl::Status status = CheckRegularFile(path, max_bytes); !status.ok()) return status;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return OpenError(path, errno);
  struct stat info;
  absl::Status checked =
      fstat(fd, &info) == 0 ? CheckStat(path, info, max_bytes) : OpenError(path, errno);
  if (!checked.ok()) {
    close(fd);
    return checked;
  }
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t filled = 0;
  absl::Status failed = absl::OkStatus();
  // Up to the size fstat gave, then on in chunks while the file keeps growing, never past the
  // bound.
  char chunk[1 << 16];
  while (true) {
    const bool growing = filled == bytes.size();
    char* into = growing ? chunk : bytes.data() + filled;
    const size_t room = growing ? sizeof(chunk) : bytes.size() - filled;
    const ssize_t got = read(fd, into, room);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      // A regular file that cannot be read (/proc/self/mem gives EIO): the file's fault.
      failed = absl::InvalidArgumentError(absl::StrCat("file '", path,
                                                       "': cannot be read: ", std::strerror(errno),
                                                       "; point it at a readable regular file"));
      break;
    }
    if (got == 0) break;
    if (growing) {
      if (static_cast<uint64_t>(got) > max_bytes - bytes.size()) {
        failed = absl::InvalidArgumentError(
            absl::StrCat("file '", path, "': expected at most ", max_bytes,
                         " bytes, got more while reading it; check that nothing writes to it"));
        break;
      }
      bytes.append(chunk, static_cast<size_t>(got));
    }
    filled += static_cast<size_t>(got);
  }
  close(fd);
  if (!failed.ok()) return failed;
  bytes.resize(filled);
  return bytes;
}

bool FileExists(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

absl::StatusOr<bool> OptionalFileExists(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    const int error = errno;
    // A symbolic link to nothing (a folder copied without the files its links name) is there,
    // only broken: "no such file" would hide where the file went.
    char target[4096];
    const ssize_t length = readlink(path.c_str(), target, sizeof(target) - 1);
    if (error == ENOENT && length >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "file '", path, "': expected a regular file, got a broken symbolic link to '",
          absl::string_view(target, static_cast<size_t>(length)),
          "'; copy the folder with cp -rL, or make the link point at the file"));
    }
    if (error == ENOENT) return false;
    return OpenError(path, error);
  }
  if (!S_ISREG(info.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("file '", path, "': expected a regular file, got ", KindOf(info.st_mode),
                     "; put the file itself there or remove it"));
  }
  return true;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

}  // namespace attnscope
