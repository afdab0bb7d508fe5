// text/schema_rules.h — DeepSeek's API rules for the JSON schemas of a chat request, as
// deepseek-recipe 0.2.0 applies them (probed request by request; messages are the API's own):
//
//   strict tools (strict: true)  The parameters go through the API's typed schema model and
//       come out normalized: each node is a typed schema (type wins over anyOf, anyOf over
//       $ref), only the model's keywords survive, in the model's order —
//         object  type, properties, additionalProperties (false), required, description
//         string  type, description, pattern, format (email|hostname|ipv4|ipv6|uuid), enum
//         integer type, description, default, minimum, maximum, exclusiveMinimum,
//                 exclusiveMaximum, multipleOf (all 64-bit integers)
//         number  the same keywords, any JSON numbers
//         array   type, items (required), description
//         boolean, null, a list of scalar types: type, description
//         anyOf   anyOf (of schemas with one type), description;   $ref: $ref
//       — and object rules hold: additionalProperties never true, required (if given) lists
//       every property exactly once, nested objects have properties; the top is an object.
//   other schemas (non-strict tool parameters, response_format json_schema)  Validated as JSON
//       Schema: subschemas are objects or booleans, keyword values have their meta-schema types
//       (the common keywords), and every $ref reached from the root resolves to a JSON pointer
//       in the document; tool parameters must also be of type "object".
#pragma once

#include <string>

#include "core/status.h"
#include "text/json_value.h"

namespace tandem::text {

// `params`: the tool's parameters, null when absent (an empty object schema).
result<json_value> normalize_strict_parameters(const json_value* params);

// `context` prefixes the message ("Invalid schema for function 'f'", "Invalid json schema").
status check_schema(const json_value& schema, const std::string& context, bool require_object_type);

}  // namespace tandem::text
