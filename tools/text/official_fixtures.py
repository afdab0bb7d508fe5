#!/usr/bin/env python3
"""Write test/golden/text/dsv4_official_cases.json: DeepSeek's published encoder fixtures.

Source: deepseek-ai/DeepSeek-V4-Flash (and -Pro) `encoding/tests/test_input_{1,3}.json` and
`test_output_{1,3}.txt`, produced by DeepSeek's `encoding/encoding_dsv4.py`, as transcribed
character for character in osaurus-ai's Swift port (DeepSeekV4ToolEncodingTests.swift,
"hand transcription of the published golden files"). The further cases there were rendered by
running encoding_dsv4.py itself. The Python encoder is not on PyPI, so these expectations are
transcriptions, not regenerated. The published files themselves (all four fixtures) are kept
verbatim in test/golden/text/dsv4_official/; tools/text/check_official_encoder.py runs the real
encoder on random conversations when you have it.

Each case: messages in OpenAI shape with the encoder's message-level keys (tools,
response_format, task, wo_eos), the encode_messages options, and the exact expected prompt.

    python3 tools/text/official_fixtures.py
"""
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

TOOLS_HEAD = ("## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n")
TOOLS_TAIL = "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"


def fn(obj):
    return {"type": "function", "function": obj}


WEATHER = {"name": "get_weather", "description": "Get the weather for a specific location", "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "The city name"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}
SEARCH = {"name": "search", "description": "Search the web for information", "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Search query"}, "num_results": {"type": "integer", "description": "Number of results to return"}}, "required": ["query"]}}
CITED_SEARCH = {"name": "search", "description": "Web search. Split multiple queries with '||'.", "parameters": {"type": "object", "properties": {"queries": {"type": "string", "description": "query1||query2"}}, "required": ["queries"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}}
OPEN = {"name": "open", "description": "Batch open IDs (format 【{id}†...】) or URLs.", "parameters": {"type": "object", "properties": {"open_list": {"type": "array", "items": {"type": "object", "properties": {"id": {"description": "ID or URL", "anyOf": [{"type": "integer"}, {"type": "string"}], "default": -1}, "cursor": {"type": "integer", "description": "", "default": -1}, "loc": {"type": "integer", "description": "Start line", "default": -1}, "num_lines": {"type": "integer", "description": "", "default": -1}, "view_source": {"type": "boolean", "description": "", "default": False}}, "additionalProperties": False}, "description": ""}}, "required": ["open_list"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}}
FIND = {"name": "find", "description": "Find exact text pattern in pages.", "parameters": {"type": "object", "properties": {"find_list": {"type": "array", "items": {"type": "object", "properties": {"pattern": {"type": "string", "description": ""}, "cursor": {"type": "integer", "description": "", "default": -1}}, "required": ["pattern"], "additionalProperties": False}, "description": ""}}, "required": ["find_list"], "additionalProperties": False, "$schema": "http://json-schema.org/draft-07/schema#"}}
ECHO = {"name": "echo", "description": "Echo the text back.", "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "The text"}}, "required": ["text"]}}


def call(name, args, cid=None):
    c = {"type": "function", "function": {"name": name, "arguments": args}}
    if cid:
        c["id"] = cid
    return c


# test_output_1.txt (2281 characters), verbatim.
OUT1 = (BOS + "You are a helpful assistant.\n\n" + TOOLS_HEAD
        + "{\"name\": \"get_weather\", \"description\": \"Get the weather for a specific location\", \"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\", \"description\": \"The city name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"], \"description\": \"Temperature unit\"}}, \"required\": [\"location\"]}}\n{\"name\": \"search\", \"description\": \"Search the web for information\", \"parameters\": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\", \"description\": \"Search query\"}, \"num_results\": {\"type\": \"integer\", \"description\": \"Number of results to return\"}}, \"required\": [\"query\"]}}"
        + TOOLS_TAIL
        + "<｜User｜>What's the weather in Beijing?<｜Assistant｜><think>The user wants to know the weather in Beijing. I should use the get_weather tool.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>{\"temperature\": 22, \"condition\": \"sunny\", \"humidity\": 45}</tool_result><｜Assistant｜><think>Got the weather data. Let me format a nice response.</think>The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.<｜end▁of▁sentence｜>")

# test_output_3.txt (3021 characters), verbatim.
OUT3 = (BOS + "该助手为DeepSeek，由深度求索公司创造。<｜latest_reminder｜>2026-02-21,星期六,广州,App,中文<｜User｜>小柴胡冲剂和布洛芬能一起吃吗？\n\nCITATION FORMAT: 【{cursor_id}†L{start_line_id}(-L{end_line_id})?】\n\n" + TOOLS_HEAD
        + "{\"name\": \"search\", \"description\": \"Web search. Split multiple queries with '||'.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"queries\": {\"type\": \"string\", \"description\": \"query1||query2\"}}, \"required\": [\"queries\"], \"additionalProperties\": false, \"$schema\": \"http://json-schema.org/draft-07/schema#\"}}\n{\"name\": \"open\", \"description\": \"Batch open IDs (format 【{id}†...】) or URLs.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"open_list\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {\"id\": {\"description\": \"ID or URL\", \"anyOf\": [{\"type\": \"integer\"}, {\"type\": \"string\"}], \"default\": -1}, \"cursor\": {\"type\": \"integer\", \"description\": \"\", \"default\": -1}, \"loc\": {\"type\": \"integer\", \"description\": \"Start line\", \"default\": -1}, \"num_lines\": {\"type\": \"integer\", \"description\": \"\", \"default\": -1}, \"view_source\": {\"type\": \"boolean\", \"description\": \"\", \"default\": false}}, \"additionalProperties\": false}, \"description\": \"\"}}, \"required\": [\"open_list\"], \"additionalProperties\": false, \"$schema\": \"http://json-schema.org/draft-07/schema#\"}}\n{\"name\": \"find\", \"description\": \"Find exact text pattern in pages.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"find_list\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {\"pattern\": {\"type\": \"string\", \"description\": \"\"}, \"cursor\": {\"type\": \"integer\", \"description\": \"\", \"default\": -1}}, \"required\": [\"pattern\"], \"additionalProperties\": false}, \"description\": \"\"}}, \"required\": [\"find_list\"], \"additionalProperties\": false, \"$schema\": \"http://json-schema.org/draft-07/schema#\"}}"
        + TOOLS_TAIL
        + "<｜Assistant｜><think>用户想知道小柴胡冲剂和布洛芬能否一起服用。</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"search\">\n<｜DSML｜parameter name=\"queries\" string=\"true\">小柴胡冲剂 布洛芬 相互作用 一起吃</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜><｜User｜><tool_result>[0]</tool_result><｜Assistant｜><think>现在开始组织回答。</think>请及时就医。<｜end▁of▁sentence｜>")

ALPHA_BETA = ("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"alpha\">\n<｜DSML｜parameter name=\"n\" string=\"true\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"beta\">\n<｜DSML｜parameter name=\"n\" string=\"true\">2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>")

CASES = [
    {"name": "test_output_1", "options": {"thinking": True},
     "messages": [{"role": "system", "content": "You are a helpful assistant.", "tools": [fn(WEATHER), fn(SEARCH)]},
                  {"role": "user", "content": "What's the weather in Beijing?"},
                  {"role": "assistant", "content": "", "reasoning_content": "The user wants to know the weather in Beijing. I should use the get_weather tool.", "tool_calls": [call("get_weather", "{\"location\": \"Beijing\", \"unit\": \"celsius\"}", "call_001")]},
                  {"role": "tool", "tool_call_id": "call_001", "content": "{\"temperature\": 22, \"condition\": \"sunny\", \"humidity\": 45}"},
                  {"role": "assistant", "content": "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.", "reasoning_content": "Got the weather data. Let me format a nice response."}],
     "expected": OUT1},
    {"name": "test_output_3", "options": {"thinking": True},
     "messages": [{"role": "system", "content": "该助手为DeepSeek，由深度求索公司创造。"},
                  {"role": "latest_reminder", "content": "2026-02-21,星期六,广州,App,中文"},
                  {"role": "developer", "content": "小柴胡冲剂和布洛芬能一起吃吗？\n\nCITATION FORMAT: 【{cursor_id}†L{start_line_id}(-L{end_line_id})?】", "tools": [fn(CITED_SEARCH), fn(OPEN), fn(FIND)]},
                  {"role": "assistant", "content": "", "reasoning_content": "用户想知道小柴胡冲剂和布洛芬能否一起服用。", "tool_calls": [call("search", "{\"queries\": \"小柴胡冲剂 布洛芬 相互作用 一起吃\"}")]},
                  {"role": "tool", "content": "[0]"},
                  {"role": "assistant", "content": "请及时就医。", "reasoning_content": "现在开始组织回答。"}],
     "expected": OUT3},
    {"name": "tool_results_sort_by_call_order", "options": {"thinking": True},
     "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"},
                  {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call("alpha", "{\"n\": \"1\"}", "call_A"), call("beta", "{\"n\": \"2\"}", "call_B")]},
                  {"role": "tool", "tool_call_id": "call_B", "content": "B result"}, {"role": "tool", "tool_call_id": "call_A", "content": "A result"}],
     "expected": BOS + "S<｜User｜>Q<｜Assistant｜></think>" + ALPHA_BETA + EOS + "<｜User｜><tool_result>A result</tool_result>\n\n<tool_result>B result</tool_result><｜Assistant｜><think>"},
    {"name": "tools_keep_earlier_reasoning", "options": {"thinking": True, "drop_thinking": True},
     "messages": [{"role": "system", "content": "S", "tools": [fn(ECHO)]}, {"role": "user", "content": "One"},
                  {"role": "assistant", "content": "First answer.", "reasoning_content": "First reasoning."}, {"role": "user", "content": "Two"}],
     "expected": BOS + "S\n\n" + TOOLS_HEAD + "{\"name\": \"echo\", \"description\": \"Echo the text back.\", \"parameters\": {\"type\": \"object\", \"properties\": {\"text\": {\"type\": \"string\", \"description\": \"The text\"}}, \"required\": [\"text\"]}}" + TOOLS_TAIL + "<｜User｜>One<｜Assistant｜><think>First reasoning.</think>First answer.<｜end▁of▁sentence｜><｜User｜>Two<｜Assistant｜><think>"},
    {"name": "no_tools_drop_earlier_reasoning", "options": {"thinking": True, "drop_thinking": True},
     "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "One"},
                  {"role": "assistant", "content": "First answer.", "reasoning_content": "First reasoning."}, {"role": "user", "content": "Two"}],
     "expected": BOS + "S<｜User｜>One<｜Assistant｜></think>First answer.<｜end▁of▁sentence｜><｜User｜>Two<｜Assistant｜><think>"},
    {"name": "non_string_arguments", "options": {"thinking": True},
     "messages": [{"role": "user", "content": "Q"},
                  {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call("mixed", "{\"name\": \"a/b\", \"count\": 7, \"flag\": false, \"list\": [1, \"two\"], \"nested\": {\"k\": -1}, \"nothing\": null}", "call_1")]}],
     "expected": BOS + "<｜User｜>Q<｜Assistant｜><think>R</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"mixed\">\n<｜DSML｜parameter name=\"name\" string=\"true\">a/b</｜DSML｜parameter>\n<｜DSML｜parameter name=\"count\" string=\"false\">7</｜DSML｜parameter>\n<｜DSML｜parameter name=\"flag\" string=\"false\">false</｜DSML｜parameter>\n<｜DSML｜parameter name=\"list\" string=\"false\">[1, \"two\"]</｜DSML｜parameter>\n<｜DSML｜parameter name=\"nested\" string=\"false\">{\"k\": -1}</｜DSML｜parameter>\n<｜DSML｜parameter name=\"nothing\" string=\"false\">null</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS},
    {"name": "arguments_not_json", "options": {"thinking": True},
     "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call("broken", "not json", "call_1")]}],
     "expected": BOS + "<｜User｜>Q<｜Assistant｜><think>R</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"broken\">\n<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS},
    {"name": "two_calls_in_order", "options": {"thinking": True},
     "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call("alpha", "{\"n\": \"1\"}", "call_1"), call("beta", "{\"n\": \"2\"}", "call_2")]}],
     "expected": BOS + "<｜User｜>Q<｜Assistant｜><think>R</think>" + ALPHA_BETA + EOS},
    {"name": "response_format_after_system", "options": {"thinking": False},
     "messages": [{"role": "system", "content": "S", "response_format": {"type": "json_object", "path": "a/b"}}, {"role": "user", "content": "Q"}],
     "expected": BOS + "S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{\"type\": \"json_object\", \"path\": \"a/b\"}<｜User｜>Q<｜Assistant｜></think>"},
    {"name": "text_block_after_tool_result", "options": {"thinking": True},
     "messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "", "reasoning_content": "R", "tool_calls": [call("alpha", "{\"n\": \"1\"}", "call_1")]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "result"}, {"role": "user", "content": "And now this."}],
     "expected": BOS + "<｜User｜>Q<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"alpha\">\n<｜DSML｜parameter name=\"n\" string=\"true\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + EOS + "<｜User｜><tool_result>result</tool_result>\n\nAnd now this.<｜Assistant｜><think>"},
]


def main():
    assert len(OUT1) == 2281, len(OUT1)
    assert len(OUT3) == 3021, len(OUT3)
    out = REPO / "test" / "golden" / "text" / "dsv4_official_cases.json"
    out.write_text(json.dumps({"cases": CASES}, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(CASES)} cases to {out}")


if __name__ == "__main__":
    main()
