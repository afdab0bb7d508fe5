#include "core/config.h"

#include <toml++/toml.h>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <variant>

#include "core/config_schema.h"

namespace tandem {
namespace {

using config_schema::field;
using config_schema::field_type;
using value = std::variant<int64_t, double, bool, std::string, std::vector<std::string>>;

// Where a value came from, for messages: "etc/tandem.toml:12" or "--set".
std::string where(std::string_view origin, const toml::node* node) {
    if (node && node->source().begin.line > 0) {
        return fmt::format("{}:{}", origin, node->source().begin.line);
    }
    return std::string(origin);
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); ++j) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

std::string suggestion(std::string_view section, std::string_view key) {
    std::string best;
    size_t best_distance = 3;  // only near misses are worth suggesting
    for (const field& f : config_schema::fields()) {
        std::string candidate = fmt::format("{}.{}", f.section, f.key);
        size_t d = edit_distance(fmt::format("{}.{}", section, key), candidate);
        if (d < best_distance) {
            best_distance = d;
            best = candidate;
        }
    }
    return best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
}

std::string join_choices(const field& f, std::string_view before, std::string_view separator) {
    std::string out(before);
    for (size_t i = 0; i < f.choices.size(); ++i) {
        if (i > 0) out += separator;
        out += f.choices[i];
    }
    return out;
}

std::string full_name(const field& f) { return fmt::format("{}.{}", f.section, f.key); }

status type_error(const field& f, std::string_view at, std::string_view got) {
    return make_error(error_code::invalid_argument,
                      fmt::format("{}: '{}' must be {}, got {}", at, full_name(f),
                                  config_schema::type_name(f.type), got));
}

// Checks ranges and choices, then stores the value. The only place a config field is written.
status assign(config& cfg, const field& f, value v, std::string_view at) {
    void* slot = f.ref(cfg);
    switch (f.type) {
        case field_type::integer: {
            if (!std::holds_alternative<int64_t>(v)) return type_error(f, at, "another type");
            int64_t x = std::get<int64_t>(v);
            if (x < f.min_int || x > f.max_int) {
                return make_error(error_code::out_of_range,
                                  fmt::format("{}: '{}' = {} is out of range [{}, {}]", at,
                                              full_name(f), x, f.min_int, f.max_int));
            }
            if (f.multiple_of > 0 && x % f.multiple_of != 0) {
                return make_error(error_code::out_of_range,
                                  fmt::format("{}: '{}' = {} must be a multiple of {}", at,
                                              full_name(f), x, f.multiple_of));
            }
            *static_cast<int64_t*>(slot) = x;
            return status::ok();
        }
        case field_type::real: {
            double x;
            if (auto* i = std::get_if<int64_t>(&v)) {
                x = static_cast<double>(*i);
            } else if (auto* d = std::get_if<double>(&v)) {
                x = *d;
            } else {
                return type_error(f, at, "another type");
            }
            if (!std::isfinite(x) || x < f.min_real || x > f.max_real) {
                return make_error(error_code::out_of_range,
                                  fmt::format("{}: '{}' = {} is out of range [{}, {}]", at,
                                              full_name(f), x, f.min_real, f.max_real));
            }
            *static_cast<double*>(slot) = x;
            return status::ok();
        }
        case field_type::boolean:
            if (!std::holds_alternative<bool>(v)) return type_error(f, at, "another type");
            *static_cast<bool*>(slot) = std::get<bool>(v);
            return status::ok();
        case field_type::string:
        case field_type::choice: {
            if (!std::holds_alternative<std::string>(v)) return type_error(f, at, "another type");
            const std::string& s = std::get<std::string>(v);
            if (f.type == field_type::choice &&
                std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end()) {
                std::string allowed = join_choices(f, "\"", "\", \"") + "\"";
                return make_error(error_code::invalid_argument,
                                  fmt::format("{}: '{}' = \"{}\" is not one of {}", at,
                                              full_name(f), s, allowed));
            }
            *static_cast<std::string*>(slot) = s;
            return status::ok();
        }
        case field_type::string_list:
            if (!std::holds_alternative<std::vector<std::string>>(v)) {
                return type_error(f, at, "another type");
            }
            *static_cast<std::vector<std::string>*>(slot) = std::get<std::vector<std::string>>(v);
            return status::ok();
    }
    return make_error(error_code::internal, "unhandled config field type");
}

std::string_view toml_type_name(const toml::node& node) {
    switch (node.type()) {
        case toml::node_type::string: return "a string";
        case toml::node_type::integer: return "an integer";
        case toml::node_type::floating_point: return "a float";
        case toml::node_type::boolean: return "a boolean";
        case toml::node_type::array: return "an array";
        case toml::node_type::table: return "a table";
        default: return "a date/time";
    }
}

result<value> value_from_toml(const field& f, const toml::node& node, std::string_view at) {
    if (auto i = node.value_exact<int64_t>()) return value{*i};
    if (auto d = node.value_exact<double>()) return value{*d};
    if (auto b = node.value_exact<bool>()) return value{*b};
    if (auto s = node.value_exact<std::string>()) return value{*s};
    if (const toml::array* arr = node.as_array()) {
        std::vector<std::string> items;
        for (const toml::node& item : *arr) {
            auto s = item.value_exact<std::string>();
            if (!s) return type_error(f, at, "an array holding " + std::string(toml_type_name(item)));
            items.push_back(*s);
        }
        return value{std::move(items)};
    }
    return type_error(f, at, std::string(toml_type_name(node)));
}

result<value> value_from_text(const field& f, std::string_view text, std::string_view at) {
    auto bad = [&] { return type_error(f, at, fmt::format("\"{}\"", text)); };
    switch (f.type) {
        case field_type::integer: {
            int64_t x = 0;
            auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
            if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return bad();
            return value{x};
        }
        case field_type::real: {
            std::string s(text);
            char* end = nullptr;
            double x = std::strtod(s.c_str(), &end);
            if (s.empty() || end != s.c_str() + s.size()) return bad();
            return value{x};
        }
        case field_type::boolean:
            if (text == "true") return value{true};
            if (text == "false") return value{false};
            return bad();
        case field_type::string:
        case field_type::choice: {
            if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
                text = text.substr(1, text.size() - 2);
            }
            return value{std::string(text)};
        }
        case field_type::string_list: {
            // "a,b" or the TOML spelling '["a", "b"]': items are trimmed and unquoted.
            if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
                text = text.substr(1, text.size() - 2);
            }
            std::vector<std::string> items;
            size_t start = 0;
            while (start <= text.size() && !text.empty()) {
                size_t comma = text.find(',', start);
                if (comma == std::string_view::npos) comma = text.size();
                std::string_view item = text.substr(start, comma - start);
                while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
                while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
                if (item.size() >= 2 && item.front() == '"' && item.back() == '"') {
                    item = item.substr(1, item.size() - 2);
                }
                if (!item.empty()) items.emplace_back(item);
                start = comma + 1;
            }
            return value{std::move(items)};
        }
    }
    return bad();
}

result<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return make_error(error_code::not_found, fmt::format("cannot read config file '{}'", path));
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// Rules that span keys; checked once the final values are known (a file may set one key and
// --set the other, so a partial state in between is fine).
status check_relations(const config& cfg) {
    const transport_section& t = cfg.transport;
    if (t.reconnect_max_ms < t.reconnect_min_ms) {
        return make_error(error_code::invalid_argument,
                          fmt::format("'transport.reconnect_max_ms' = {} must be >= "
                                      "'transport.reconnect_min_ms' = {}",
                                      t.reconnect_max_ms, t.reconnect_min_ms));
    }
    if (t.peer_timeout_ms <= t.heartbeat_interval_ms) {
        return make_error(error_code::invalid_argument,
                          fmt::format("'transport.peer_timeout_ms' = {} must be > "
                                      "'transport.heartbeat_interval_ms' = {} (a peer gets at "
                                      "least one PING to answer)",
                                      t.peer_timeout_ms, t.heartbeat_interval_ms));
    }
    return status::ok();
}

}  // namespace

result<config> apply_toml(config base, std::string_view toml_text, std::string_view origin) {
    // Debian's toml++ is built with exceptions: catch them here so none escapes.
    toml::table root;
    try {
        root = toml::parse(toml_text, origin);
    } catch (const toml::parse_error& err) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{}:{}: invalid TOML: {}", origin, err.source().begin.line,
                                      err.description()));
    }
    for (const auto& [section_key, section_node] : root) {
        std::string_view section = section_key.str();
        const toml::table* table = section_node.as_table();
        if (!config_schema::is_section(section)) {
            return make_error(error_code::invalid_argument,
                              fmt::format("{}: unknown section '{}'{}", where(origin, &section_node),
                                          section, suggestion(section, "")));
        }
        if (!table) {
            return make_error(error_code::invalid_argument,
                              fmt::format("{}: '{}' must be a table ([{}])",
                                          where(origin, &section_node), section, section));
        }
        for (const auto& [key, node] : *table) {
            const field* f = config_schema::find(section, key.str());
            std::string at = where(origin, &node);
            if (!f) {
                return make_error(error_code::invalid_argument,
                                  fmt::format("{}: unknown key '{}.{}'{}", at, section, key.str(),
                                              suggestion(section, key.str())));
            }
            result<value> v = value_from_toml(*f, node, at);
            if (!v) return v.error();
            TANDEM_RETURN_IF_ERROR(assign(base, *f, std::move(v).value(), at));
        }
    }
    return base;
}

status apply_override(config& cfg, std::string_view assignment, std::string_view origin) {
    size_t eq = assignment.find('=');
    size_t dot = assignment.find('.');
    if (eq == std::string_view::npos || dot == std::string_view::npos || dot > eq) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{}: '{}' is not of the form section.key=value", origin,
                                      assignment));
    }
    std::string_view section = assignment.substr(0, dot);
    std::string_view key = assignment.substr(dot + 1, eq - dot - 1);
    const field* f = config_schema::find(section, key);
    if (!f) {
        return make_error(error_code::invalid_argument,
                          fmt::format("{}: unknown key '{}.{}'{}", origin, section, key,
                                      suggestion(section, key)));
    }
    result<value> v = value_from_text(*f, assignment.substr(eq + 1), origin);
    if (!v) return v.error();
    return assign(cfg, *f, std::move(v).value(), origin);
}

// "models/DeepSeek-V4-Flash/" → "DeepSeek-V4-Flash": a checkpoint is served under its own name.
std::string served_name_of(std::string_view model_path) {
    std::filesystem::path p = std::filesystem::path(model_path).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // a trailing '/'
    if (p.filename() == "." || p.filename() == ".." || p.empty()) {
        std::error_code ec;
        p = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
    }
    std::string name = p.filename().string();
    return name.empty() ? "model" : name;
}

result<config> load_config(const config_sources& sources) {
    result<config> cfg = apply_toml(config{}, default_config_toml(), "<built-in defaults>");
    if (!cfg) return cfg.error().with_context("the embedded etc/tandem.toml is invalid");
    if (!sources.file.empty()) {
        result<std::string> text = read_file(sources.file);
        if (!text) return text.error();
        cfg = apply_toml(std::move(cfg).value(), *text, sources.file);
        if (!cfg) return cfg;
    }
    for (const std::string& o : sources.flag_overrides) {
        TANDEM_RETURN_IF_ERROR(apply_override(*cfg, o, "command line"));
    }
    for (const std::string& o : sources.set_overrides) {
        TANDEM_RETURN_IF_ERROR(apply_override(*cfg, o, "--set"));
    }
    TANDEM_RETURN_IF_ERROR(check_relations(*cfg));
    if (cfg->model.served_name.empty()) cfg->model.served_name = served_name_of(cfg->model.path);
    return cfg;
}

std::string config_to_toml(const config& cfg) {
    config& mutable_cfg = const_cast<config&>(cfg);  // ref() is shared with the writers
    std::string out;
    std::string_view current;
    for (const field& f : config_schema::fields()) {
        if (f.section != current) {
            out += fmt::format("{}[{}]\n", out.empty() ? "" : "\n", f.section);
            current = f.section;
        }
        void* slot = f.ref(mutable_cfg);
        toml::table one;
        switch (f.type) {
            case field_type::integer: one.insert(f.key, *static_cast<int64_t*>(slot)); break;
            case field_type::real: one.insert(f.key, *static_cast<double*>(slot)); break;
            case field_type::boolean: one.insert(f.key, *static_cast<bool*>(slot)); break;
            case field_type::string:
            case field_type::choice: one.insert(f.key, *static_cast<std::string*>(slot)); break;
            case field_type::string_list: {
                toml::array arr;
                for (const auto& s : *static_cast<std::vector<std::string>*>(slot)) arr.push_back(s);
                one.insert(f.key, std::move(arr));
                break;
            }
        }
        std::ostringstream line;
        line << one;
        out += line.str();
        out += '\n';
    }
    return out;
}

std::string config_reference() {
    std::string out;
    std::string_view current;
    for (const field& f : config_schema::fields()) {
        if (f.section != current) {
            out += fmt::format("  [{}]\n", f.section);
            current = f.section;
        }
        std::string range;
        if (f.type == field_type::integer) range = fmt::format(" {}..{}", f.min_int, f.max_int);
        if (f.type == field_type::real) range = fmt::format(" {}..{}", f.min_real, f.max_real);
        if (f.type == field_type::choice) range = join_choices(f, " ", "|");
        std::string name(f.key);
        name.resize(std::max<size_t>(name.size(), 22), ' ');  // align the type column
        out += fmt::format("    {} {}{}\n        {}\n", name, config_schema::type_name(f.type), range,
                           f.help);
    }
    return out;
}

}  // namespace tandem
