// core/config_schema.h — The declaration of every config key (internal to core/config*.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/config.h"

namespace tandem::config_schema {

enum class field_type { integer, real, boolean, string, choice, string_list };

struct field {
    std::string_view section;
    std::string_view key;
    field_type type;
    std::string_view help;
    void* (*ref)(config&);              // where the value lives in a config
    int64_t min_int = 0, max_int = 0;   // integer range, inclusive
    int64_t multiple_of = 0;            // integer must be a multiple of this (0: any)
    double min_real = 0, max_real = 0;  // real range, inclusive
    std::vector<std::string_view> choices;  // choice: allowed values
};

std::span<const field> fields();
const field* find(std::string_view section, std::string_view key);
bool is_section(std::string_view section);
std::string_view type_name(field_type type);

}  // namespace tandem::config_schema
