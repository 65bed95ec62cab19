// Per-algorithm calibration of the "auto" choice: auto picks the smallest
// EstimateSeconds(shape) * CalibrationFactor(name). The factors are fitted to H200 benchmark runs
// by tools/fit_auto.py (data in docs/data/); an algorithm not in the table gets 1.
#ifndef CONV2D_CONV_CALIBRATION_H_
#define CONV2D_CONV_CALIBRATION_H_

#include "absl/strings/string_view.h"

namespace conv2d {
double CalibrationFactor(absl::string_view algorithm);
}  // namespace conv2d

#endif  // CONV2D_CONV_CALIBRATION_H_
