// RETURN_IF_ERROR / ASSIGN_OR_RETURN: the Abseil that Debian 12 ships predates its own.
#ifndef CONV2D_CONV_STATUS_MACROS_H_
#define CONV2D_CONV_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CONV2D_CONCAT_INNER(a, b) a##b
#define CONV2D_CONCAT(a, b) CONV2D_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status conv2d_status_ = (expr);        \
    if (!conv2d_status_.ok()) return conv2d_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(CONV2D_CONCAT(conv2d_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                          \
  if (!statusor.ok()) return statusor.status();    \
  lhs = std::move(statusor).value()

#endif  // CONV2D_CONV_STATUS_MACROS_H_
