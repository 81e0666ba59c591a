#include "client/cli/command.h"

#include <utility>

#include "absl/strings/cord.h"

namespace attnscope::cli {
namespace {

// The payload that marks a status as a mistake in the command line.
constexpr char kUsagePayload[] = "type.attnscope.dev/cli.usage";

}  // namespace

Output JsonOutput(json value) { return {std::move(value), std::nullopt}; }

Output TextOutput(std::string text) { return {json(), std::move(text)}; }

absl::Status UsageError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kUsagePayload, absl::Cord());
  return status;
}

bool IsUsageError(const absl::Status& status) {
  return status.GetPayload(kUsagePayload).has_value();
}

}  // namespace attnscope::cli
