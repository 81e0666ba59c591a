// Early-return helpers for absl::Status. This Abseil (20220623) ships no status macros.
#ifndef ATTNSCOPE_COMMON_STATUS_MACROS_H_
#define ATTNSCOPE_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ATTNSCOPE_CONCAT_INNER_(a, b) a##b
#define ATTNSCOPE_CONCAT_(a, b) ATTNSCOPE_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define ATTNSCOPE_RETURN_IF_ERROR(expr)                    \
  do {                                                     \
    const absl::Status attnscope_status_ = (expr);         \
    if (!attnscope_status_.ok()) return attnscope_status_; \
  } while (false)

// Declares or assigns `lhs` from the value of the StatusOr `expr`, or returns its status.
#define ATTNSCOPE_ASSIGN_OR_RETURN(lhs, expr) \
  ATTNSCOPE_ASSIGN_OR_RETURN_IMPL_(ATTNSCOPE_CONCAT_(attnscope_statusor_, __LINE__), lhs, expr)

#define ATTNSCOPE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                     \
  if (!statusor.ok()) return std::move(statusor).status();    \
  lhs = std::move(statusor).value()

#endif  // ATTNSCOPE_COMMON_STATUS_MACROS_H_
