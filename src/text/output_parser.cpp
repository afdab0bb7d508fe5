// text/output_parser.cpp — The DSML / reasoning state machine.
//
// Each step looks at the front of buf_ in the current state and either consumes a decided
// prefix (returning true) or needs more bytes (false). Block text that is consumed goes to
// raw_ until the invoke it belongs to is emitted as a call, so a failure can hand back every
// byte as content.
#include "text/output_parser.h"

#include <algorithm>
#include <span>

#include "text/json_value.h"
#include "text/utf8.h"

namespace tandem::text {

namespace {

constexpr std::string_view think_end = "</think>";
constexpr std::string_view block_v4 = "<｜DSML｜tool_calls>";
constexpr std::string_view block_v32 = "<｜DSML｜function_calls>";
constexpr std::string_view close_v4 = "</｜DSML｜tool_calls>";
constexpr std::string_view close_v32 = "</｜DSML｜function_calls>";
constexpr std::string_view invoke_open = "<｜DSML｜invoke";
constexpr std::string_view invoke_close = "</｜DSML｜invoke>";
constexpr std::string_view param_open = "<｜DSML｜parameter";
constexpr std::string_view param_close = "</｜DSML｜parameter>";
constexpr std::string_view dsml_open = "<｜DSML｜";  // any opening tag
constexpr size_t max_attribute_bytes = 4096;  // a name longer than this is not a name

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// True when `s` is a proper prefix of `tag` (more bytes could complete it).
bool could_become(std::string_view s, std::string_view tag) {
    return s.size() < tag.size() && tag.substr(0, s.size()) == s;
}

// Length of the longest suffix of `s` that is a proper prefix of one of `tags`.
size_t partial_tag_suffix(std::string_view s, std::span<const std::string_view> tags) {
    size_t best = 0;
    for (std::string_view tag : tags) {
        for (size_t n = std::min(s.size(), tag.size() - 1); n > best; --n) {
            if (s.substr(s.size() - n) == tag.substr(0, n)) {
                best = n;
                break;
            }
        }
    }
    return best;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t leading_space(std::string_view s) {
    size_t i = 0;
    while (i < s.size() && is_space(s[i])) ++i;
    return i;
}

// Reads `name="VALUE"` at the front of s (after optional spaces). Returns the bytes consumed
// (0 = need more input, npos = malformed) and the value.
size_t read_attribute(std::string_view s, std::string_view attr, std::string* value) {
    size_t i = leading_space(s);
    const std::string head = std::string(attr) + "=\"";
    if (s.size() - i < head.size()) return could_become(s.substr(i), head) ? 0 : std::string_view::npos;
    if (!starts_with(s.substr(i), head)) return std::string_view::npos;
    i += head.size();
    const size_t quote = s.find('"', i);
    if (quote == std::string_view::npos) {
        return s.size() - i > max_attribute_bytes ? std::string_view::npos : 0;
    }
    *value = std::string(s.substr(i, quote - i));
    if (value->find_first_of("<\n") != std::string::npos) return std::string_view::npos;
    return quote + 1;
}

}  // namespace

output_parser::output_parser(output_parser_options options)
    : options_(std::move(options)),
      state_(options_.starts_in_tool_calls ? state::block
             : options_.starts_in_reasoning ? state::reasoning
                                            : state::content) {
    if (options_.starts_in_tool_calls) block_close_ = close_v4;
}

void output_parser::push(std::string_view bytes, std::vector<output_event>* events) {
    buf_.append(bytes);
    while (step(false, events)) {
    }
}

void output_parser::finish(std::vector<output_event>* events) {
    while (step(true, events)) {
    }
    // Markup that never parsed (glyph variants, plain XML tags) still flags the response.
    if (malformed_count_ == 0 && markup_in_content_) ++malformed_count_;
}

bool output_parser::step(bool at_end, std::vector<output_event>* events) {
    if (buf_.empty() && !(at_end && state_ != state::content && state_ != state::reasoning &&
                          state_ != state::skip_block)) {
        return false;
    }
    switch (state_) {
        case state::reasoning:
        case state::content: return step_text(at_end, events);
        case state::block: return step_block(at_end, events);
        case state::invoke_header: return step_invoke_header(at_end, events);
        case state::invoke_body: return step_invoke_body(at_end, events);
        case state::param_header: return step_param_header(at_end, events);
        case state::param_value: return step_param_value(at_end, events);
        case state::skip_block: return step_skip_block(at_end, events);
    }
    return false;
}

// Looks for markup-like text in content (scanning across delta boundaries).
void output_parser::note_markup(std::string_view text) {
    if (after_block_ && text.find_first_not_of(" \t\r\n") != std::string_view::npos) {
        markup_in_content_ = true;
    }
    static constexpr std::string_view markers[] = {"DSML", "<tool_calls", "</tool_calls", "<invoke",
                                                   "</invoke", "<parameter ", "</parameter>",
                                                   "<function_calls"};
    constexpr size_t keep = 15;  // longest marker - 1
    content_tail_.append(text);
    for (std::string_view m : markers) {
        if (content_tail_.find(m) != std::string::npos) markup_in_content_ = true;
    }
    if (content_tail_.size() > keep) content_tail_.erase(0, content_tail_.size() - keep);
}

void output_parser::emit_text(output_event::kind kind, std::string_view text,
                              std::vector<output_event>* events) {
    if (text.empty()) return;
    segment_start_ = false;
    if (kind == output_event::kind::content) note_markup(text);
    if (!events->empty() && events->back().type == kind && kind != output_event::kind::tool_call) {
        events->back().text.append(text);
        return;
    }
    output_event e;
    e.type = kind;
    e.text = std::string(text);
    events->push_back(std::move(e));
}

void output_parser::consume_raw(size_t n) {
    raw_.append(buf_, 0, n);
    buf_.erase(0, n);
}

// Reasoning and content: stream text, stop at </think> or a block opener.
bool output_parser::step_text(bool at_end, std::vector<output_event>* events) {
    if (segment_start_) {  // leading newlines of reasoning / content are formatting
        size_t n = 0;
        while (n < buf_.size() && buf_[n] == '\n') ++n;
        buf_.erase(0, n);
        if (buf_.empty()) return false;
    }
    const bool reasoning = state_ == state::reasoning;
    const auto kind = reasoning ? output_event::kind::reasoning : output_event::kind::content;
    static constexpr std::string_view reasoning_tags[] = {think_end, block_v4, block_v32};
    static constexpr std::string_view content_tags[] = {think_end, block_v4, block_v32, invoke_open};
    const std::span<const std::string_view> tags =
        reasoning ? std::span<const std::string_view>(reasoning_tags) : std::span<const std::string_view>(content_tags);
    size_t pos = std::string::npos;
    std::string_view which;
    for (std::string_view tag : tags) {
        const size_t p = buf_.find(tag);
        if (p < pos) pos = p, which = tag;
    }
    if (pos == std::string::npos) {
        // Hold back a partial tag, the newlines that may precede a block, and a split character.
        size_t keep = buf_.size() - partial_tag_suffix(buf_, tags);
        while (keep > 0 && buf_[keep - 1] == '\n') --keep;
        keep -= utf8_incomplete_tail(std::string_view(buf_).substr(0, keep));
        if (at_end) keep = buf_.size();
        if (keep == 0) return false;
        emit_text(kind, utf8_sanitize(std::string_view(buf_).substr(0, keep)), events);
        buf_.erase(0, keep);
        return false;
    }
    if (which == think_end) {
        size_t text_end = pos;
        while (reasoning && text_end > 0 && buf_[text_end - 1] == '\n') --text_end;
        emit_text(kind, std::string_view(buf_).substr(0, text_end), events);
        buf_.erase(0, pos + think_end.size());  // in content a stray </think> is dropped
        if (reasoning) segment_start_ = true;
        state_ = state::content;
        return true;
    }
    // A block opener: the newlines right before it belong to the markup, unless it fails.
    size_t text_end = pos;
    while (text_end > 0 && buf_[text_end - 1] == '\n') --text_end;
    emit_text(kind, std::string_view(buf_).substr(0, text_end), events);
    buf_.erase(0, text_end);
    raw_.clear();
    consume_raw(pos - text_end + which.size());
    if (reasoning) call_in_reasoning_ = true;
    block_has_call_ = false;
    if (which == invoke_open) {
        block_close_.clear();
        state_ = state::invoke_header;
    } else {
        block_close_ = which == block_v4 ? close_v4 : close_v32;
        state_ = state::block;
    }
    return true;
}

void output_parser::fail(std::vector<output_event>* events) {
    ++malformed_count_;
    std::string text = std::move(raw_);
    raw_.clear();
    call_name_.clear();
    call_params_.clear();
    const bool block_open = !block_close_.empty() && state_ != state::content;
    emit_text(output_event::kind::content, utf8_sanitize(text), events);
    state_ = block_open ? state::skip_block : state::content;
}

bool output_parser::step_block(bool at_end, std::vector<output_event>* events) {
    consume_raw(leading_space(buf_));
    if (starts_with(buf_, invoke_open)) {
        consume_raw(invoke_open.size());
        state_ = state::invoke_header;
        return true;
    }
    if (starts_with(buf_, block_close_)) {
        consume_raw(block_close_.size());
        const bool had_call = block_has_call_;
        state_ = state::content;
        if (!had_call) {  // an empty block is markup without a call: hand it back
            fail(events);
        } else {
            after_block_ = true;
        }
        raw_.clear();
        return true;
    }
    const bool partial = could_become(buf_, invoke_open) || could_become(buf_, block_close_);
    if (partial && !at_end) return false;
    fail(events);
    return true;
}

bool output_parser::step_invoke_header(bool at_end, std::vector<output_event>* events) {
    std::string name;
    size_t n = read_attribute(buf_, "name", &name);
    if (n != 0 && n != std::string::npos) {
        if (n == buf_.size()) n = 0;  // need the '>'
        else if (buf_[n] != '>' || name.empty()) n = std::string::npos;
    }
    if (n == 0 && !at_end) return false;
    if (n == 0 || n == std::string::npos) {
        fail(events);
        return true;
    }
    consume_raw(n + 1);
    call_name_ = std::move(name);
    call_params_.clear();
    state_ = state::invoke_body;
    return true;
}

bool output_parser::step_invoke_body(bool at_end, std::vector<output_event>* events) {
    consume_raw(leading_space(buf_));
    if (starts_with(buf_, param_open)) {
        consume_raw(param_open.size());
        state_ = state::param_header;
        return true;
    }
    if (starts_with(buf_, invoke_close)) {
        consume_raw(invoke_close.size());
        finish_call(events);
        return true;
    }
    const bool partial = could_become(buf_, param_open) || could_become(buf_, invoke_close);
    if (partial && !at_end) return false;
    fail(events);
    return true;
}

bool output_parser::step_param_header(bool at_end, std::vector<output_event>* events) {
    std::string key;
    size_t n = read_attribute(buf_, "name", &key);
    std::string kind;
    if (n != 0 && n != std::string::npos) {
        const size_t m = read_attribute(std::string_view(buf_).substr(n), "string", &kind);
        n = (m == 0 || m == std::string::npos) ? m : n + m;
    }
    if (n != 0 && n != std::string::npos) {
        if (n == buf_.size()) n = 0;
        else if (buf_[n] != '>' || (kind != "true" && kind != "false")) n = std::string::npos;
    }
    for (const auto& [k, v] : call_params_) {
        if (n != std::string::npos && n != 0 && k == key) n = std::string::npos;  // duplicate key
    }
    if (n == 0 && !at_end) return false;
    if (n == 0 || n == std::string::npos) {
        fail(events);
        return true;
    }
    consume_raw(n + 1);
    param_key_ = std::move(key);
    param_is_string_ = kind == "true";
    scan_from_ = 0;
    state_ = state::param_value;
    return true;
}

// A value runs to its </｜DSML｜parameter>. An opening DSML tag before that means the value was
// cut off (by </｜DSML｜invoke>, or inside a half-written closing tag) and the next parameter or
// invoke began: searching on for a later </｜DSML｜parameter> would swallow them into this
// argument, so it is malformed. A closing tag alone is value text.
bool output_parser::step_param_value(bool at_end, std::vector<output_event>* events) {
    const size_t pos = buf_.find(param_close, scan_from_);
    const size_t opening = buf_.find(dsml_open, scan_from_);
    if (opening < pos) {
        fail(events);  // cut off: another tag began inside the value
        return true;
    }
    if (pos == std::string::npos) {
        const size_t longest = std::max(param_close.size(), dsml_open.size());
        scan_from_ = buf_.size() >= longest ? buf_.size() - longest + 1 : 0;
        if (!at_end) return false;
        fail(events);  // truncated inside a value
        return true;
    }
    const std::string_view value = std::string_view(buf_).substr(0, pos);
    std::string json;
    if (param_is_string_) {
        json_dump_string(utf8_sanitize(value), &json);
    } else if (json_parse(value).is_ok()) {
        json = std::string(value);  // pasted verbatim, as DeepSeek's parser does
    } else {
        fail(events);  // string="false" must carry JSON: never emit invalid arguments
        return true;
    }
    call_params_.emplace_back(std::move(param_key_), std::move(json));
    consume_raw(pos + param_close.size());
    state_ = state::invoke_body;
    return true;
}

void output_parser::finish_call(std::vector<output_event>* events) {
    if (options_.check_tool_names &&
        std::find(options_.tool_names.begin(), options_.tool_names.end(), call_name_) ==
            options_.tool_names.end()) {
        fail(events);
        return;
    }
    output_event e;
    e.type = output_event::kind::tool_call;
    e.tool_index = next_tool_index_++;
    e.tool_name = std::move(call_name_);
    std::string args(1, '{');
    for (size_t i = 0; i < call_params_.size(); ++i) {
        if (i) args.append(", ");
        json_dump_string(call_params_[i].first, &args);
        args.append(": ").append(call_params_[i].second);
    }
    args.push_back('}');
    e.arguments = std::move(args);
    events->push_back(std::move(e));
    call_name_.clear();
    call_params_.clear();
    raw_.clear();
    block_has_call_ = true;
    if (block_close_.empty()) after_block_ = true;
    state_ = block_close_.empty() ? state::content : state::block;
}

bool output_parser::step_skip_block(bool at_end, std::vector<output_event>* events) {
    const size_t pos = buf_.find(block_close_);
    if (pos != std::string::npos) {
        emit_text(output_event::kind::content, utf8_sanitize(std::string_view(buf_).substr(0, pos + block_close_.size())), events);
        buf_.erase(0, pos + block_close_.size());
        state_ = state::content;
        return true;
    }
    const std::string_view close[] = {block_close_};
    size_t keep = buf_.size() - partial_tag_suffix(buf_, close);
    keep -= utf8_incomplete_tail(std::string_view(buf_).substr(0, keep));
    if (at_end) keep = buf_.size();
    emit_text(output_event::kind::content, utf8_sanitize(std::string_view(buf_).substr(0, keep)), events);
    buf_.erase(0, keep);
    if (at_end) state_ = state::content;
    return false;
}

}  // namespace tandem::text
