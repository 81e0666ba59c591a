// Small file helpers returning absl::Status. Every file of a checkpoint folder is read through
// them: only regular files, never more bytes than a bound, so that a config.json that is a FIFO, a
// symlink to /dev/zero or a directory gives an error instead of a read without end.
#ifndef ATTNSCOPE_MODELS_FILE_UTIL_H_
#define ATTNSCOPE_MODELS_FILE_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnscope {

// The largest JSON settings file read whole: config.json, tokenizer_config.json and
// model.safetensors.index.json. Real ones are a few KB (an id2label of 20,000 classes, the largest
// seen, is under 1 MB); nlohmann's document takes about ten times the text.
inline constexpr uint64_t kMaxSettingsFileBytes = 16ull << 20;
// The largest tokenizer file read whole: tokenizer.json, vocab.txt, vocab.json, merges.txt and the
// SentencePiece models. The largest real ones are under 20 MB (a 256,000-token tokenizer.json).
inline constexpr uint64_t kMaxTokenizerFileBytes = 64ull << 20;

// UTF-8's byte-order mark (U+FEFF), which some editors write at the start of a text file; the
// line-based tokenizer files read it as part of their first entry.
inline constexpr char kByteOrderMark[] = "\xEF\xBB\xBF";

// OK when `path` is a regular file (symlinks followed) of at most `max_bytes` bytes.
// NotFound: nothing there. InvalidArgument: something else there (a FIFO, a device, a directory, a
// socket: reading those blocks or never ends) or a larger file; the message names the path, what
// was expected and what was found.
absl::Status CheckRegularFile(const std::string& path, uint64_t max_bytes);

// The whole file as bytes, after the checks of CheckRegularFile; the file is opened without
// blocking and checked again once open, so that a file swapped for a FIFO in between cannot hang
// the read, and at most `max_bytes` are read even when the file grows meanwhile.
// The bound defaults to a settings file's. NotFound and InvalidArgument as CheckRegularFile;
// PermissionDenied or Internal when it cannot be opened or read.
absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             uint64_t max_bytes = kMaxSettingsFileBytes);

// True when `path` names an existing regular file.
bool FileExists(const std::string& path);

// Whether an optional file is there: false when nothing is at `path`, true for a regular file.
// InvalidArgument when something else is there (see CheckRegularFile) or a symbolic link to
// nothing (naming its target), which must not be taken for an absent file.
absl::StatusOr<bool> OptionalFileExists(const std::string& path);

// `dir` + "/" + `name`, without doubling the slash.
std::string JoinPath(const std::string& dir, const std::string& name);

}  // namespace attnscope

#endif  // ATTNSCOPE_MODELS_FILE_UTIL_H_
