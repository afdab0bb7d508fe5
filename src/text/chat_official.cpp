// text/chat_official.cpp — DeepSeek's encoding_dsv4.py encode_messages(), byte for byte.
//
// Kept separate from the API renderer because the two differ in where system messages go,
// where "<｜Assistant｜>" is written, which reasoning is dropped and how a call without
// arguments is laid out. This one is checked against the published golden fixtures.
#include "text/chat_internal.h"

namespace tandem::text {

namespace {

using namespace chat_detail;

// A message after merge_tool_messages: user turns carry blocks, others point at the source.
struct merged_message {
    const chat_message* src = nullptr;
    chat_role role = chat_role::user;
    std::vector<user_block> blocks;  // user turns only
    std::optional<std::string> task;
    bool wo_eos = false;
    bool drop_reasoning = false;
};

std::vector<merged_message> merge_tool_messages(const std::vector<chat_message>& messages) {
    std::vector<merged_message> merged;
    for (const chat_message& m : messages) {
        const bool can_join = !merged.empty() && merged.back().role == chat_role::user;
        if (m.role == chat_role::tool) {
            if (!can_join) merged.push_back({nullptr, chat_role::user, {}, std::nullopt, false, false});
            merged.back().blocks.push_back({&m, {}});
        } else if (m.role == chat_role::user) {
            if (can_join && !merged.back().task) {
                merged.back().blocks.push_back({nullptr, m.content});
            } else {
                merged.push_back({&m, chat_role::user, {{nullptr, m.content}}, m.task, m.wo_eos, false});
            }
        } else {
            merged.push_back({&m, m.role, {}, m.task, m.wo_eos, false});
        }
    }
    const chat_message* last_caller = nullptr;
    for (merged_message& mm : merged) {
        if (mm.role == chat_role::assistant && !mm.src->tool_calls.empty()) last_caller = mm.src;
        if (mm.role == chat_role::user) sort_turn_blocks(&mm.blocks, last_caller);
    }
    return merged;
}

int64_t last_user_index(const std::vector<merged_message>& msgs) {
    for (int64_t i = static_cast<int64_t>(msgs.size()) - 1; i >= 0; --i) {
        if (msgs[i].role == chat_role::user || msgs[i].role == chat_role::developer) return i;
    }
    return -1;
}

// _drop_thinking_messages: earlier assistants lose reasoning, earlier developers vanish.
std::vector<merged_message> drop_thinking(std::vector<merged_message> msgs) {
    const int64_t last_user = last_user_index(msgs);
    std::vector<merged_message> out;
    for (int64_t i = 0; i < static_cast<int64_t>(msgs.size()); ++i) {
        merged_message& m = msgs[i];
        if (m.role == chat_role::assistant && i < last_user) {
            m.drop_reasoning = true;
        } else if (m.role == chat_role::developer && i < last_user) {
            continue;
        }
        out.push_back(std::move(m));
    }
    return out;
}

status append_tools_and_format(const chat_message& m, rendered_prompt* p) {
    if (!m.tools.empty()) {
        std::vector<std::string> lines;
        for (size_t i = 0; i < m.tools.size(); ++i) {
            auto tool = json_parse(m.tools[i]);
            const json_value* fn = tool ? tool->find("function") : nullptr;
            if (fn == nullptr) {
                return make_error(error_code::invalid_argument,
                                  "tools[" + std::to_string(i) + "]: expected {\"type\": \"function\", \"function\": {...}}");
            }
            lines.push_back(json_dump(*fn, json_number_style::python));
        }
        p->append_text("\n\n");
        append_tools_block(p, lines);
    }
    if (m.response_format) {
        auto rf = json_parse(*m.response_format);
        if (!rf) return rf.error().with_context("response_format");
        p->append_text("\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n");
        p->append_text(json_dump(*rf, json_number_style::python));
    }
    return status::ok();
}

std::string_view task_token(const std::string& task) {
    if (task == "action") return "<｜action｜>";
    if (task == "query") return "<｜query｜>";
    if (task == "authority") return "<｜authority｜>";
    if (task == "domain") return "<｜domain｜>";
    if (task == "title") return "<｜title｜>";
    if (task == "read_url") return "<｜read_url｜>";
    return {};
}

struct render_state {
    const std::vector<merged_message>& msgs;
    const official_options& opt;
    bool drop;
    int64_t last_user;
};

void append_assistant(const render_state& st, int64_t index, rendered_prompt* p) {
    const merged_message& mm = st.msgs[index];
    const chat_message& m = *mm.src;
    const bool prev_has_task = index > 0 && st.msgs[index - 1].task.has_value();
    if (st.opt.thinking && !prev_has_task && (!st.drop || index > st.last_user)) {
        p->append_text(mm.drop_reasoning ? "" : m.reasoning_content.value_or(""));
        p->append_special(think_close);
    }
    p->append_text(m.content);
    if (!m.tool_calls.empty()) append_tool_calls(p, m.tool_calls, json_number_style::python, false);
    if (!mm.wo_eos) p->append_special(eos);
}

status render_one(const render_state& st, int64_t index, rendered_prompt* p) {
    const merged_message& mm = st.msgs[index];
    if (index == 0 && st.opt.thinking) p->append_text(effort_prefix(st.opt.effort));
    switch (mm.role) {
        case chat_role::system:
            p->append_text(mm.src->content);
            TANDEM_RETURN_IF_ERROR(append_tools_and_format(*mm.src, p));
            break;
        case chat_role::developer:
            if (mm.src->content.empty()) {
                return make_error(error_code::invalid_argument, "a developer message needs content");
            }
            p->append_special(user_token);
            p->append_text(mm.src->content);
            TANDEM_RETURN_IF_ERROR(append_tools_and_format(*mm.src, p));
            break;
        case chat_role::user:
            p->append_special(user_token);
            for (size_t i = 0; i < mm.blocks.size(); ++i) {
                if (i) p->append_text("\n\n");
                if (mm.blocks[i].tool) append_tool_result(p, mm.blocks[i].tool->content);
                else p->append_text(mm.blocks[i].text);
            }
            break;
        case chat_role::latest_reminder:
            p->append_special(latest_reminder_token);
            p->append_text(mm.src->content);
            break;
        case chat_role::assistant:
            append_assistant(st, index, p);
            break;
        case chat_role::tool:
            return make_error(error_code::internal, "tool message left after merging");
    }
    // The transition written after a message.
    const auto n = static_cast<int64_t>(st.msgs.size());
    if (index + 1 < n && st.msgs[index + 1].role != chat_role::assistant &&
        st.msgs[index + 1].role != chat_role::latest_reminder) {
        return status::ok();
    }
    const std::string_view think = st.opt.thinking ? think_open : think_close;
    if (mm.task) {
        const std::string_view token = task_token(*mm.task);
        if (token.empty()) return make_error(error_code::invalid_argument, "unknown task '" + *mm.task + "'");
        if (*mm.task == "action") {
            p->append_special(assistant_token);
            p->append_special(think);
        }
        p->append_special(token);
    } else if (mm.role == chat_role::user || mm.role == chat_role::developer) {
        p->append_special(assistant_token);
        const bool open = st.opt.thinking && (!st.drop || index >= st.last_user);
        p->append_special(open ? think_open : think_close);
    }
    return status::ok();
}

}  // namespace

result<rendered_prompt> render_messages_official(const std::vector<chat_message>& messages,
                                                 const official_options& options) {
    std::vector<merged_message> msgs = merge_tool_messages(messages);
    bool any_tools = false;
    for (const merged_message& m : msgs) {
        if (m.src && m.role != chat_role::user && !m.src->tools.empty()) any_tools = true;
    }
    const bool drop = options.drop_thinking && !any_tools;
    if (options.thinking && drop) msgs = drop_thinking(std::move(msgs));
    rendered_prompt p;
    if (options.add_bos) p.append_special(bos);
    const render_state st{msgs, options, drop, last_user_index(msgs)};
    for (int64_t i = 0; i < static_cast<int64_t>(msgs.size()); ++i) {
        TANDEM_RETURN_IF_ERROR(render_one(st, i, &p));
    }
    p.generation_starts_in_reasoning =
        !p.pieces.empty() && p.pieces.back().special &&
        std::string_view(p.text).substr(p.pieces.back().begin) == think_open;
    return p;
}

}  // namespace tandem::text
