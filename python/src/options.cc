#include "options.h"

#include <string>

#include "errors.h"
#include "relaxps/lr_schedule.h"

namespace py = pybind11;

namespace relaxps {
namespace python {
namespace {

InitKind ParseKind(const std::string& kind) {
  if (kind == "zeros") return InitKind::kZeros;
  if (kind == "constant") return InitKind::kConstant;
  if (kind == "uniform") return InitKind::kUniform;
  if (kind == "normal") return InitKind::kNormal;
  ThrowStatus(InvalidArgumentError("init kind must be zeros, constant, uniform or normal, not '" +
                                   kind + "'"),
              "create_table");
}

const char* KindName(InitKind kind) {
  switch (kind) {
    case InitKind::kZeros: return "zeros";
    case InitKind::kConstant: return "constant";
    case InitKind::kUniform: return "uniform";
    case InitKind::kNormal: return "normal";
  }
  return "?";
}

// (kind[, a[, b]]) over [begin, end).
InitSegment SegmentOf(uint64_t begin, uint64_t end, const py::sequence& rest) {
  InitSegment s;
  s.begin = begin;
  s.end = end;
  s.kind = ParseKind(rest[0].cast<std::string>());
  if (rest.size() > 1) s.a = rest[1].cast<float>();
  if (rest.size() > 2) s.b = rest[2].cast<float>();
  if (rest.size() > 3) throw py::type_error("init: a segment has at most kind, a and b");
  return s;
}

InitSegment ParseSegment(py::handle item) {
  if (py::isinstance<py::dict>(item)) {
    py::dict d = py::reinterpret_borrow<py::dict>(item);
    py::list rest;
    rest.append(d.contains("kind") ? d["kind"] : py::str("zeros"));
    rest.append(d.contains("a") ? d["a"] : py::float_(0.0));
    rest.append(d.contains("b") ? d["b"] : py::float_(0.0));
    if (!d.contains("begin") || !d.contains("end")) {
      throw py::type_error("init: a segment dict needs 'begin' and 'end'");
    }
    return SegmentOf(d["begin"].cast<uint64_t>(), d["end"].cast<uint64_t>(), rest);
  }
  if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) ||
      py::len(item) < 3) {
    throw py::type_error("init: each segment is (begin, end, kind[, a[, b]]) or a dict");
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(item);
  py::list rest;
  for (size_t i = 2; i < seq.size(); ++i) rest.append(seq[i]);
  return SegmentOf(seq[0].cast<uint64_t>(), seq[1].cast<uint64_t>(), rest);
}

Initializer ParseInit(const py::object& init, uint64_t extent, uint64_t seed) {
  Initializer out;
  out.seed = seed;
  if (init.is_none()) return out;
  // A whole-table segment: "uniform" or ("uniform", a, b).
  if (py::isinstance<py::str>(init)) {
    out.segments.push_back(SegmentOf(0, extent, py::make_tuple(init)));
    return out;
  }
  if (!py::isinstance<py::sequence>(init)) {
    throw py::type_error("init must be None, a kind, (kind, a, b) or a list of segments");
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(init);
  if (seq.size() > 0 && py::isinstance<py::str>(seq[0])) {
    out.segments.push_back(SegmentOf(0, extent, seq));
    return out;
  }
  for (py::handle item : seq) out.segments.push_back(ParseSegment(item));
  return out;
}

}  // namespace

TableOptions MakeTableOptions(const TableArgs& args) {
  TableOptions t;
  t.name = args.name;
  t.type = args.sparse ? TableType::kSparse : TableType::kDense;
  t.size = args.size;
  t.row_width = args.row_width;
  t.optimizer = args.optimizer;
  t.init = ParseInit(args.init, args.sparse ? args.row_width : args.size, args.init_seed);
  StatusOr<LrSchedule> schedule = ParseLrSchedule(args.lr_schedule);
  if (!schedule.ok()) ThrowStatus(schedule.status(), "create_table: lr_schedule");
  t.lr_schedule = *schedule;
  Check(t.Validate(), "create_table '" + args.name + "'");
  return t;
}

py::dict TableDict(const TableOptions& t) {
  py::dict d;
  d["name"] = t.name;
  d["sparse"] = t.type == TableType::kSparse;
  d["size"] = t.size;
  d["row_width"] = t.row_width;
  d["optimizer"] = t.optimizer.name;
  d["lr"] = t.optimizer.lr;
  d["momentum"] = t.optimizer.momentum;
  d["beta1"] = t.optimizer.beta1;
  d["beta2"] = t.optimizer.beta2;
  d["eps"] = t.optimizer.eps;
  py::list segments;
  for (const InitSegment& s : t.init.segments) {
    segments.append(py::make_tuple(s.begin, s.end, KindName(s.kind), s.a, s.b));
  }
  d["init"] = segments;
  d["init_seed"] = t.init.seed;
  py::list changes;
  for (const auto& [clock, lr] : t.lr_changes) changes.append(py::make_tuple(clock, lr));
  d["lr_changes"] = changes;
  return d;
}

}  // namespace python
}  // namespace relaxps
