#include "apps/internal/json_out.h"

#include <google/protobuf/util/json_util.h>

namespace relaxps {

std::string ProtoToJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, options).ok()) return "null";
  return out;
}

std::string JsonObject(const std::vector<std::pair<std::string, std::string>>& fields) {
  std::string out = "{";
  for (const auto& [k, v] : fields) {
    if (out.size() > 1) out += ',';
    out += JsonQuote(k) + ':' + v;
  }
  return out + "}";
}

std::string JsonArray(const std::vector<std::string>& values) {
  std::string out = "[";
  for (const std::string& v : values) {
    if (out.size() > 1) out += ',';
    out += v;
  }
  return out + "]";
}

}  // namespace relaxps
