#include "relaxps/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace relaxps {

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

double LrSchedule::Factor(int64_t clock) const {
  if (clock < 0) clock = 0;
  if (warmup_clocks > 0 && clock < warmup_clocks) {
    return static_cast<double>(clock + 1) / static_cast<double>(warmup_clocks);
  }
  const int64_t t = clock - warmup_clocks;
  switch (kind) {
    case Kind::kConstant:
      return 1.0;
    case Kind::kStep:
      return std::pow(static_cast<double>(step_gamma),
                      static_cast<double>(t / step_every_clocks));
    case Kind::kCosine: {
      const double x = std::min(1.0, static_cast<double>(t) / static_cast<double>(decay_clocks));
      return min_factor + (1.0 - min_factor) * 0.5 * (1.0 + std::cos(kPi * x));
    }
  }
  return 1.0;
}

Status LrSchedule::Validate() const {
  if (warmup_clocks < 0) return InvalidArgumentError("lr schedule: warmup must be >= 0");
  switch (kind) {
    case Kind::kConstant:
      return Status::OK();
    case Kind::kStep:
      if (step_every_clocks <= 0) {
        return InvalidArgumentError("lr schedule step: every must be > 0 clocks");
      }
      if (!(step_gamma > 0.0f && step_gamma <= 1.0f)) {
        return InvalidArgumentError("lr schedule step: gamma must be in (0, 1]");
      }
      return Status::OK();
    case Kind::kCosine:
      if (decay_clocks <= 0) return InvalidArgumentError("lr schedule cosine: clocks must be > 0");
      if (!(min_factor >= 0.0f && min_factor <= 1.0f)) {
        return InvalidArgumentError("lr schedule cosine: min must be in [0, 1]");
      }
      return Status::OK();
  }
  return InvalidArgumentError("lr schedule: unknown kind");
}

namespace {

// Parses a non-negative integer or a float; false if `text` is not one.
bool ParseNumber(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(*out);
}

}  // namespace

StatusOr<LrSchedule> ParseLrSchedule(const std::string& spec) {
  LrSchedule s;
  std::string kind = spec;
  std::string params;
  const size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    kind = spec.substr(0, colon);
    params = spec.substr(colon + 1);
  } else if (spec.rfind("warmup=", 0) == 0) {
    kind = "constant";
    params = spec;
  }
  if (kind == "constant") {
    s.kind = LrSchedule::Kind::kConstant;
  } else if (kind == "step") {
    s.kind = LrSchedule::Kind::kStep;
  } else if (kind == "cosine") {
    s.kind = LrSchedule::Kind::kCosine;
  } else {
    return InvalidArgumentError("lr schedule '" + spec +
                                "': expected constant, step:every=N,gamma=G or "
                                "cosine:clocks=N[,min=M], each with an optional ,warmup=W");
  }
  std::stringstream items(params);
  std::string item;
  while (std::getline(items, item, ',')) {
    const size_t eq = item.find('=');
    double v = 0;
    const std::string key = item.substr(0, eq);
    if (eq == std::string::npos || !ParseNumber(item.substr(eq + 1), &v) || v < 0) {
      return InvalidArgumentError("lr schedule '" + spec + "': bad parameter '" + item + "'");
    }
    const bool is_int = v == std::floor(v) && v < 1e15;
    if (key == "warmup" && is_int) {
      s.warmup_clocks = static_cast<int64_t>(v);
    } else if (key == "every" && is_int && s.kind == LrSchedule::Kind::kStep) {
      s.step_every_clocks = static_cast<int64_t>(v);
    } else if (key == "gamma" && s.kind == LrSchedule::Kind::kStep) {
      s.step_gamma = static_cast<float>(v);
    } else if (key == "clocks" && is_int && s.kind == LrSchedule::Kind::kCosine) {
      s.decay_clocks = static_cast<int64_t>(v);
    } else if (key == "min" && s.kind == LrSchedule::Kind::kCosine) {
      s.min_factor = static_cast<float>(v);
    } else {
      return InvalidArgumentError("lr schedule '" + spec + "': unknown or misplaced parameter '" +
                                  item + "'");
    }
  }
  RETURN_IF_ERROR(s.Validate());
  return s;
}

}  // namespace relaxps
