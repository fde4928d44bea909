// JSON output of relaxps-ctl --json: protobuf messages in the proto3 JSON
// mapping (field names as in proto/relaxps.proto, every field printed,
// 64-bit integers as strings), and the few plain values around them.
#ifndef RELAXPS_APPS_INTERNAL_JSON_OUT_H_
#define RELAXPS_APPS_INTERNAL_JSON_OUT_H_

#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/message.h>

#include "common/events.h"  // JsonQuote: a JSON string literal (quoted, escaped).

namespace relaxps {

// `m` as one line of JSON.
std::string ProtoToJson(const google::protobuf::Message& m);
// {"k1":v1,"k2":v2,...} from (key, JSON value) pairs.
std::string JsonObject(const std::vector<std::pair<std::string, std::string>>& fields);
// [v1,v2,...] from JSON values.
std::string JsonArray(const std::vector<std::string>& values);

}  // namespace relaxps

#endif  // RELAXPS_APPS_INTERNAL_JSON_OUT_H_
