// text/tokenizer_load.cpp — Reading tokenizer.json (HF `tokenizers` format) with simdjson.
//
// Only what DeepSeek's byte-level BPE files use is accepted; anything else (a normalizer that
// does something, byte_fallback, dropout, another model type) is refused with an error naming
// the key, rather than silently tokenizing differently from the reference.
#include <simdjson.h>

#include <fstream>
#include <sstream>

#include "text/tokenizer_impl.h"

namespace tandem::text {

namespace {

using simdjson::dom::element;

status bad(const std::string& origin, const std::string& what) {
    return make_error(error_code::invalid_argument, origin + ": " + what);
}

// GPT-2 bytes_to_unicode, inverted: printable Latin-1 bytes map to themselves, the other 68
// bytes to U+0100.. in byte order.
std::array<int, 324> make_char_to_byte() {
    std::array<int, 324> table{};
    table.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) ||
                               (b >= 0xAE && b <= 0xFF);
        if (printable) table[b] = b;
        else table[256 + extra++] = b;
    }
    return table;
}

uint32_t next_code_point(std::string_view s, size_t* i) {
    const auto b0 = static_cast<uint8_t>(s[*i]);
    int len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len && *i + k < s.size(); ++k) {
        cp = (cp << 6) | (static_cast<uint8_t>(s[*i + k]) & 0x3F);
    }
    *i += len;
    return cp;
}

}  // namespace

int byte_level_char_to_byte(uint32_t code_point) {
    static const std::array<int, 324> table = make_char_to_byte();
    return code_point < table.size() ? table[code_point] : -1;
}

bool byte_level_to_bytes(std::string_view token, std::string* out) {
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
        int b = byte_level_char_to_byte(next_code_point(token, &i));
        if (b < 0) {
            *out = std::string(token);
            return false;
        }
        bytes.push_back(static_cast<char>(b));
    }
    *out = std::move(bytes);
    return true;
}

namespace {

status check_normalizer(element root, const std::string& origin) {
    element norm;
    if (root["normalizer"].get(norm) || norm.is_null()) return status::ok();
    std::string_view type;
    if (norm["type"].get(type)) return bad(origin, "normalizer.type missing");
    simdjson::dom::array list;
    if (type == "Sequence" && !norm["normalizers"].get(list) && list.size() == 0) {
        return status::ok();
    }
    return bad(origin, "normalizer of type '" + std::string(type) +
                           "' is not supported (only none or an empty Sequence)");
}

status add_split_stage(element pt, const std::string& origin, const std::string& key,
                       split_chain* chain) {
    std::string_view behavior;
    bool invert = false;
    std::string_view regex;
    if (pt["behavior"].get(behavior) || behavior != "Isolated") {
        return bad(origin, key + ".behavior must be \"Isolated\"");
    }
    if (!pt["invert"].get(invert) && invert) return bad(origin, key + ".invert must be false");
    if (pt["pattern"]["Regex"].get(regex)) {
        return bad(origin, key + ".pattern.Regex missing (String patterns are not supported)");
    }
    return chain->add_stage(regex).with_context(origin + ": " + key);
}

status load_pre_tokenizer(element root, const std::string& origin, split_chain* chain) {
    element pre;
    if (root["pre_tokenizer"].get(pre)) return bad(origin, "pre_tokenizer missing");
    std::string_view type;
    if (pre["type"].get(type)) return bad(origin, "pre_tokenizer.type missing");
    std::vector<element> stages;
    if (type == "Sequence") {
        simdjson::dom::array list;
        if (pre["pretokenizers"].get(list)) return bad(origin, "pre_tokenizer.pretokenizers missing");
        for (element e : list) stages.push_back(e);
    } else {
        stages.push_back(pre);
    }
    bool saw_byte_level = false;
    for (size_t i = 0; i < stages.size(); ++i) {
        const std::string key = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
        std::string_view st;
        if (stages[i]["type"].get(st)) return bad(origin, key + ".type missing");
        if (st == "Split") {
            if (saw_byte_level) return bad(origin, key + ": Split after ByteLevel is not supported");
            TANDEM_RETURN_IF_ERROR(add_split_stage(stages[i], origin, key, chain));
        } else if (st == "ByteLevel") {
            bool prefix = false;
            bool use_regex = false;
            if (!stages[i]["add_prefix_space"].get(prefix) && prefix) {
                return bad(origin, key + ".add_prefix_space=true is not supported");
            }
            if (!stages[i]["use_regex"].get(use_regex) && use_regex) {
                return bad(origin, key + ".use_regex=true is not supported");
            }
            saw_byte_level = true;
        } else {
            return bad(origin, key + ".type '" + std::string(st) + "' is not supported");
        }
    }
    if (!saw_byte_level) return bad(origin, "pre_tokenizer has no ByteLevel stage");
    return status::ok();
}

status load_model(element root, const std::string& origin, tokenizer::impl* t,
                  std::unordered_map<std::string_view, token_id>* vocab) {
    element model;
    std::string_view type;
    if (root["model"].get(model)) return bad(origin, "model missing");
    if (model["type"].get(type) || type != "BPE") return bad(origin, "model.type must be \"BPE\"");
    bool flag = false;
    if (!model["byte_fallback"].get(flag) && flag) return bad(origin, "model.byte_fallback=true is not supported");
    if (!model["ignore_merges"].get(flag) && flag) return bad(origin, "model.ignore_merges=true is not supported");
    element dropout;
    if (!model["dropout"].get(dropout) && !dropout.is_null()) return bad(origin, "model.dropout is not supported");
    simdjson::dom::object vocab_obj;
    if (model["vocab"].get(vocab_obj)) return bad(origin, "model.vocab missing");
    int64_t max_id = -1;
    for (auto field : vocab_obj) {
        int64_t id = 0;
        if (field.value.get(id) || id < 0 || id > (1 << 30)) {
            return bad(origin, "model.vocab[\"" + std::string(field.key) + "\"] is not a valid id");
        }
        (*vocab)[field.key] = static_cast<token_id>(id);
        max_id = std::max(max_id, id);
    }
    t->bytes_by_id.assign(max_id + 1, std::string());
    t->flags_by_id.assign(max_id + 1, 0);
    for (const auto& [text, id] : *vocab) {
        byte_level_to_bytes(text, &t->bytes_by_id[id]);
        t->flags_by_id[id] |= token_exists;
    }
    for (int b = 0; b < 256; ++b) {
        std::string key;
        uint32_t cp = 0;
        for (uint32_t c = 0; c < 324; ++c) {
            if (byte_level_char_to_byte(c) == b) cp = c;
        }
        if (cp < 0x80) key.push_back(static_cast<char>(cp));
        else key = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        auto it = vocab->find(key);
        if (it == vocab->end()) return bad(origin, "model.vocab lacks the byte symbol for byte " + std::to_string(b));
        t->byte_ids[b] = it->second;
    }
    return status::ok();
}

status load_merges(element root, const std::string& origin, tokenizer::impl* t,
                   const std::unordered_map<std::string_view, token_id>& vocab) {
    simdjson::dom::array merges;
    if (root["model"]["merges"].get(merges)) return bad(origin, "model.merges missing");
    t->merges.reserve(static_cast<int64_t>(merges.size()));
    int32_t rank = 0;
    std::string joined;
    for (element m : merges) {
        std::string_view left, right, line;
        if (!m.get(line)) {
            const size_t sp = line.find(' ');
            if (sp == std::string_view::npos) return bad(origin, "model.merges[" + std::to_string(rank) + "] has no space");
            left = line.substr(0, sp);
            right = line.substr(sp + 1);
        } else {
            simdjson::dom::array pair;
            if (m.get(pair) || pair.size() != 2 || pair.at(0).get(left) || pair.at(1).get(right)) {
                return bad(origin, "model.merges[" + std::to_string(rank) + "] is not a pair");
            }
        }
        joined.assign(left).append(right);
        auto l = vocab.find(left), r = vocab.find(right), j = vocab.find(joined);
        if (l == vocab.end() || r == vocab.end() || j == vocab.end()) {
            return bad(origin, "model.merges[" + std::to_string(rank) + "] refers to a token not in model.vocab");
        }
        t->merges.insert(l->second, r->second, rank, j->second);
        ++rank;
    }
    return status::ok();
}

status load_added_tokens(element root, const std::string& origin, tokenizer::impl* t) {
    simdjson::dom::array added;
    if (root["added_tokens"].get(added)) return status::ok();
    size_t index = 0;
    for (element a : added) {
        const std::string key = "added_tokens[" + std::to_string(index++) + "]";
        int64_t id = 0;
        std::string_view content;
        bool special = false, normalized = true, flag = false;
        if (a["id"].get(id) || id < 0 || id > (1 << 30)) return bad(origin, key + ".id invalid");
        if (a["content"].get(content) || content.empty()) return bad(origin, key + ".content invalid");
        if (a["special"].get(special)) special = false;
        if (a["normalized"].get(normalized)) normalized = true;
        for (const char* k : {"lstrip", "rstrip", "single_word"}) {
            if (!a[k].get(flag) && flag) return bad(origin, key + "." + k + "=true is not supported");
        }
        if (id >= static_cast<int64_t>(t->bytes_by_id.size())) {
            t->bytes_by_id.resize(id + 1);
            t->flags_by_id.resize(id + 1, 0);
        }
        byte_level_to_bytes(content, &t->bytes_by_id[id]);
        t->flags_by_id[id] |= token_exists | token_added | (special ? token_special : 0);
        t->added_by_content[std::string(content)] = static_cast<token_id>(id);
        (normalized ? t->normalized_added : t->unnormalized_added).insert(content, static_cast<token_id>(id));
    }
    return status::ok();
}

}  // namespace

result<std::shared_ptr<const tokenizer>> tokenizer::load_json(std::string_view json,
                                                              const std::string& origin) {
    simdjson::dom::parser parser;
    simdjson::padded_string padded(json);
    element root;
    if (auto err = parser.parse(padded).get(root)) {
        return bad(origin, std::string("not valid JSON: ") + simdjson::error_message(err));
    }
    auto t = std::make_unique<impl>();
    std::unordered_map<std::string_view, token_id> vocab;
    vocab.reserve(1 << 18);
    TANDEM_RETURN_IF_ERROR(check_normalizer(root, origin));
    TANDEM_RETURN_IF_ERROR(load_pre_tokenizer(root, origin, &t->splitter));
    TANDEM_RETURN_IF_ERROR(load_model(root, origin, t.get(), &vocab));
    TANDEM_RETURN_IF_ERROR(load_merges(root, origin, t.get(), vocab));
    TANDEM_RETURN_IF_ERROR(load_added_tokens(root, origin, t.get()));
    return std::shared_ptr<const tokenizer>(new tokenizer(std::move(t)));
}

result<std::shared_ptr<const tokenizer>> tokenizer::load_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return make_error(error_code::not_found, "cannot open tokenizer file '" + path + "'");
    }
    std::ostringstream buf;
    buf << in.rdbuf();
    return load_json(buf.str(), path);
}

}  // namespace tandem::text
