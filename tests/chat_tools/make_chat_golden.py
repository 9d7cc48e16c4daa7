#!/usr/bin/env python3
"""Regenerates tests/data/chat/golden_v41.json and golden_v4.json by running the OFFICIAL DeepSeek
encoding modules on the conversations below.

The official files are not part of this repository (no vendored third-party code); pass local
copies of them:
  --v41  DeepSeek-V4.1-Flash encoding/encoding.py
         (read here through the vendored copy with lookup id 66942910326, "vendored from the
         official encoding/encoding.py of deepseek-ai/DeepSeek-V4.1-Flash, unmodified")
  --v4   DeepSeek-V4-Flash encoding/encoding_dsv4.py
         (read here through github supermy/ds4rs @2ecc534c encoding/encoding_dsv4.py, lookup id
         57062790214; it adds Chinese docstrings only)

Cases marked with `official_expected` also carry the expected prompt written in the official V4.1
test file encoding/test_encoding.py (github Lebhoryi/deepseek_v41_flash_learning @c0469cad,
lookup id 68852527808); the script checks the module reproduces it before writing.

Usage: python3 tests/chat_tools/make_chat_golden.py --v41 /tmp/official/encoding_v41.py \
           --v4 /tmp/official/encoding_v4.py [--check]
"""

import argparse
import copy
import importlib.util
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "tests" / "data" / "chat"

V41_SOURCE = ("official DeepSeek-V4.1-Flash encoding/encoding.py (vendored copy, lookup id "
              "66942910326), run by tests/chat_tools/make_chat_golden.py")
V41_TEST_SOURCE = ("official DeepSeek-V4.1-Flash encoding/test_encoding.py (github "
                   "Lebhoryi/deepseek_v41_flash_learning @c0469cad01b2, lookup id 68852527808)")
V41_README_SOURCE = ("official DeepSeek-V4.1-Flash encoding/README.md (github "
                     "Lebhoryi/deepseek_v41_flash_learning @c0469cad01b2, lookup id 69376690633)")
V4_SOURCE = ("official DeepSeek-V4-Flash encoding/encoding_dsv4.py (github supermy/ds4rs "
             "@2ecc534c2423 copy, lookup id 57062790214), run by tests/chat_tools/make_chat_golden.py")

BOS = "<｜begin▁of▁sentence｜>"
EFFORT = ("<｜System｜>Reasoning Effort: {budget} "
          "(range 1-100, the higher the value, the more thorough the reasoning)\n\n")
V41_TOOL_CALL_OUTPUT = (
    '  reason  </think>summary\n\n'
    '<｜DSML｜ calls>\n'
    '<｜DSML｜ invoke name="lookup">\n'
    '<｜DSML｜ parameter name="query" string="true">value</｜DSML｜ parameter>\n'
    '<｜DSML｜ parameter name="limit" string="false">2</｜DSML｜ parameter>\n'
    '</｜DSML｜ invoke>\n'
    '</｜DSML｜ calls><｜end▁of▁sentence｜>'
)


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weather_tools():
    return [
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "description": "City name, e.g. 北京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"}},
                "required": ["city"]}}},
        {"type": "function", "function": {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {
                "query": {"type": "string"}, "top_k": {"type": "number"},
                "filters": {"type": "object"}}}}},
    ]


def lookup_tool():
    return {"type": "function", "function": {
        "name": "lookup", "description": "Look up a value",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer"}}}}}


def tool_conversation():
    return [
        {"role": "system", "content": "You are a weather bot.", "tools": weather_tools()},
        {"role": "user", "content": "Weather in Beijing and Paris? Also search news."},
        {"role": "assistant", "reasoning_content": "Need three calls.", "content": "",
         "tool_calls": [
             {"id": "call_1", "type": "function", "function": {
                 "name": "get_weather", "arguments": '{"city": "北京", "unit": "celsius", "days": 3}'}},
             {"id": "call_2", "type": "function", "function": {
                 "name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "call_3", "type": "function", "function": {
                 "name": "search", "arguments":
                     '{"query": "news \\"today\\"\\nline2", "top_k": 2.5, '
                     '"filters": {"lang": ["en", "fr"], "safe": true, "since": null}}'}}]},
        # Results arrive out of call order: the encoder sorts them by call order.
        {"role": "tool", "tool_call_id": "call_3", "content": "headline A"},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 20}"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"},
                                                               {"type": "text", "text": "12C"}]},
        {"role": "assistant", "reasoning_content": "Summarise.", "content": "Beijing 20C, Paris rain."},
        {"role": "user", "content": "Thanks!"},
    ]


def v41_cases():
    c = []
    add = lambda name, messages, source=V41_SOURCE, **kw: c.append(
        dict(name=name, source=source, messages=messages, **kw))

    # --- expectations written in the official test file ---
    add("effort_default_thinking", [{"role": "user", "content": "question"}],
        thinking_mode="thinking", source=V41_TEST_SOURCE,
        official_expected=BOS + EFFORT.format(budget=75) + "<｜User｜>question<｜Assistant｜><think>")
    for effort, budget in [("low", 50), ("high", 75), ("max", 100), (1, 1), (42, 42), (100, 100)]:
        add(f"effort_{effort}", [{"role": "user", "content": "question"}], thinking_mode="thinking",
            reasoning_effort=effort, source=V41_TEST_SOURCE,
            official_expected=BOS + EFFORT.format(budget=budget)
            + "<｜User｜>question<｜Assistant｜><think>")
    add("chat_mode_ignores_effort", [{"role": "user", "content": "hello"}], thinking_mode="chat",
        reasoning_effort="max", source=V41_TEST_SOURCE,
        official_expected=BOS + "<｜User｜>hello<｜Assistant｜></think>")
    add("leading_system_token", [{"role": "system", "content": "You are a helpful assistant."},
                                 {"role": "user", "content": "hello"}],
        thinking_mode="chat", source=V41_TEST_SOURCE,
        official_expected=BOS + "<｜System｜>You are a helpful assistant.<｜User｜>hello<｜Assistant｜></think>")
    add("mid_conversation_system_last", [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "system", "content": "mid sys"}],
        thinking_mode="thinking", reasoning_effort=88, source=V41_TEST_SOURCE,
        official_expected=BOS + EFFORT.format(budget=88)
        + "sys<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜><｜System｜>mid sys<｜Assistant｜><think>")
    add("images_placeholder", [{"role": "user", "content": [
        {"type": "text", "text": "inspect"},
        {"type": "image_url", "image_url": {"url": "/unused/image.png"}}]}],
        thinking_mode="chat", source=V41_TEST_SOURCE, expected_images=["/unused/image.png"],
        official_expected=BOS + "<｜User｜>inspect\n\n<｜deepseek_image｜><｜Assistant｜></think>")
    add("readme_images_chinese", [{"role": "user", "content": [
        {"type": "text", "text": "第一张图"},
        {"type": "image_url", "image_url": {"url": "examples/images/image_1.jpeg"}},
        {"type": "text", "text": "有什么内容？"}]}],
        thinking_mode="chat", source=V41_README_SOURCE,
        expected_images=["examples/images/image_1.jpeg"],
        official_expected=BOS + "<｜User｜>第一张图\n\n<｜deepseek_image｜>\n\n有什么内容？<｜Assistant｜></think>")
    add("readme_quick_start", [{"role": "system", "content": "You are a helpful assistant."},
                               {"role": "user", "content": "What is 2+2?"}],
        thinking_mode="thinking", reasoning_effort=75, source=V41_README_SOURCE,
        official_expected=BOS + EFFORT.format(budget=75)
        + "You are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜><think>")
    add("task_query", [{"role": "user", "content": "classify me", "task": "query"}],
        thinking_mode="chat")
    # The official test checks `render_message(1, ...) == V41_TOOL_CALL_OUTPUT`; with the user
    # turn as context, encode_messages renders exactly that message.
    add("assistant_tool_call_render", [
        {"role": "assistant", "reasoning_content": "  reason  ", "content": "summary",
         "tool_calls": [{"type": "function", "function": {
             "name": "lookup", "arguments": '{"query":"value","limit":2}'}}]}],
        context=[{"role": "user", "content": "question"}], thinking_mode="thinking",
        source=V41_TEST_SOURCE, official_expected=V41_TOOL_CALL_OUTPUT)
    add("drop_thinking_multi_turn", [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"}], thinking_mode="thinking")

    # --- generated by running the official module ---
    add("chat_basic_multi_turn", [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "2+2?"}],
        thinking_mode="chat")
    add("thinking_keep_reasoning", [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"}], thinking_mode="thinking", drop_thinking=False,
        reasoning_effort="low")
    add("tools_full_conversation", tool_conversation(), thinking_mode="thinking")
    add("tools_full_conversation_chat", tool_conversation(), thinking_mode="chat")
    add("tools_pending_results", tool_conversation()[:6], thinking_mode="thinking",
        reasoning_effort=30)
    add("tool_call_non_object_arguments", [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": "lookup", "arguments": "not json"}},
            {"id": "y", "type": "function", "function": {"name": "lookup",
                                                         "arguments": json.dumps('{"query": "q"}')}}]},
        {"role": "tool", "tool_call_id": "x", "content": "r1"},
        {"role": "tool", "tool_call_id": "y", "content": "r2"}], thinking_mode="chat")
    add("mid_conversation_system_not_last", [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "system", "content": "new rules"}, {"role": "user", "content": "q2"}],
        thinking_mode="thinking", reasoning_effort=10)
    add("mid_system_with_tools_and_response_format", [
        {"role": "system", "content": "s0"}, {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "system", "content": "now answer in JSON", "tools": [lookup_tool()],
         "response_format": {"type": "json_schema", "json_schema": {
             "name": "answer", "schema": {"type": "object", "properties": {"x": {"type": "number"}}}}}}],
        thinking_mode="thinking")
    add("response_format_first_system", [
        {"role": "system", "content": "", "response_format": {"type": "json_object"}},
        {"role": "user", "content": "give json"}], thinking_mode="chat")
    add("empty_system_chat", [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}],
        thinking_mode="chat")
    add("images_interleaved_two", [{"role": "user", "content": [
        {"type": "text", "text": "inspect"},
        {"type": "image_url", "image_url": {"url": "/a.png"}},
        {"type": "text", "text": "and"},
        {"type": "image_url", "image_url": "/b.png"}]}], thinking_mode="thinking",
        expected_images=["/a.png", "/b.png"])
    add("images_multi_turn", [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "a.jpg"}},
                                     {"type": "text", "text": "what is this?"}]},
        {"role": "assistant", "content": "A cat.", "reasoning_content": "Looks like a cat."},
        {"role": "user", "content": [{"type": "text", "text": "and this?"},
                                     {"type": "image_url", "image_url": {"url": "b.jpg"}}]}],
        thinking_mode="thinking", expected_images=["a.jpg", "b.jpg"])
    add("task_action_thinking", [{"role": "user", "content": "Should I search?", "task": "action"}],
        thinking_mode="thinking")
    add("task_action_chat", [{"role": "user", "content": "Should I search?", "task": "action"}],
        thinking_mode="chat")
    add("task_authority_domain_read_url", [
        {"role": "user", "content": "u1", "task": "authority"},
        {"role": "assistant", "content": "high"},
        {"role": "user", "content": "u2", "task": "domain"},
        {"role": "assistant", "content": "finance"},
        {"role": "user", "content": "read https://x.y", "task": "read_url"}], thinking_mode="thinking")
    add("task_title_after_assistant", [
        {"role": "user", "content": "Tell me a joke"},
        {"role": "assistant", "content": "Why did the chicken...", "reasoning_content": "joke",
         "task": "title"}], thinking_mode="thinking")
    add("latest_reminder", [
        {"role": "system", "content": "sys"},
        {"role": "latest_reminder", "content": "Today is 2026-09-10."},
        {"role": "user", "content": "What day is it?"}], thinking_mode="thinking")
    add("latest_reminder_after_user", [
        {"role": "user", "content": "What day is it?"},
        {"role": "latest_reminder", "content": "Today is 2026-09-10."}], thinking_mode="chat")
    add("consecutive_users_merge", [
        {"role": "user", "content": "part one"}, {"role": "user", "content": "part two"}],
        thinking_mode="chat")
    add("assistant_prefill_wo_eos", [
        {"role": "user", "content": "Write a poem"},
        {"role": "assistant", "content": "Roses are", "wo_eos": True}], thinking_mode="chat")
    add("context_continuation", [{"role": "user", "content": "q2"}],
        context=[{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"},
                 {"role": "assistant", "content": "a1", "reasoning_content": "r1"}],
        thinking_mode="thinking")
    add("no_bos", [{"role": "user", "content": "hi"}], thinking_mode="chat", add_bos=False)
    add("unicode_and_escapes", [
        {"role": "system", "content": "Ünïcödé ✓ 日本語", "tools": [{"type": "function", "function": {
            "name": "echo", "description": "tab\there \"quoted\" back\\slash ctrl\u0001 ü",
            "parameters": {"type": "object", "properties": {"v": {"type": "number", "default": 1.0},
                                                             "w": {"type": "number", "default": 1e-05},
                                                             "big": {"type": "number", "default": 1e+16},
                                                             "neg": {"type": "integer", "default": -7}}}}}]},
        {"role": "user", "content": "emoji 😀 and\nnewline"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "e", "type": "function", "function": {
            "name": "echo", "arguments": '{"v": 0.1, "w": [1, 2.0, "三"], "s": "😀"}'}}]},
        {"role": "tool", "tool_call_id": "e", "content": "ok"}], thinking_mode="thinking")
    return c


def v4_cases():
    c = []
    add = lambda name, messages, **kw: c.append(dict(name=name, source=V4_SOURCE, messages=messages, **kw))
    add("chat_basic", [{"role": "system", "content": "You are a helpful assistant."},
                       {"role": "user", "content": "hello"}], thinking_mode="chat")
    add("think_high", [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
        thinking_mode="thinking", reasoning_effort="high")
    add("think_max", [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}],
        thinking_mode="thinking", reasoning_effort="max")
    add("think_max_no_system", [{"role": "user", "content": "hello"}], thinking_mode="thinking",
        reasoning_effort="max")
    add("chat_max_ignored", [{"role": "user", "content": "hello"}], thinking_mode="chat",
        reasoning_effort="max")
    add("drop_thinking_multi_turn", [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"}], thinking_mode="thinking")
    add("tools_full_conversation", tool_conversation(), thinking_mode="thinking")
    add("tools_full_conversation_chat", tool_conversation(), thinking_mode="chat")
    add("developer_with_tools", [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": "dev instructions", "tools": [lookup_tool()]},
        {"role": "user", "content": "question"}], thinking_mode="thinking")
    add("developer_last", [{"role": "developer", "content": "dev only"}], thinking_mode="chat")
    add("developer_dropped_before_last_user", [
        {"role": "developer", "content": "dev"}, {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"}], thinking_mode="thinking")
    add("task_action", [{"role": "user", "content": "Should I search?", "task": "action"}],
        thinking_mode="thinking")
    add("task_title", [{"role": "user", "content": "joke"},
                       {"role": "assistant", "content": "ha", "task": "title"}], thinking_mode="chat")
    add("latest_reminder", [{"role": "latest_reminder", "content": "Today is Monday."},
                            {"role": "user", "content": "day?"}], thinking_mode="thinking")
    add("context_continuation", [{"role": "user", "content": "q2"}],
        context=[{"role": "user", "content": "q1"},
                 {"role": "assistant", "content": "a1", "reasoning_content": "r1"}],
        thinking_mode="thinking")
    add("mid_system_is_plain_text", [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "system", "content": "mid"}], thinking_mode="chat")
    return c


V41_PARSE = [
    dict(name="official_tool_call_output", completion=V41_TOOL_CALL_OUTPUT, thinking_mode="thinking",
         source=V41_TEST_SOURCE),
    dict(name="readme_completion", completion="Simple arithmetic.</think>2 + 2 = 4.<｜end▁of▁sentence｜>",
         thinking_mode="thinking", source=V41_README_SOURCE),
    dict(name="chat_plain", completion="Just text.<｜end▁of▁sentence｜>", thinking_mode="chat"),
    dict(name="two_calls_chat", thinking_mode="chat", completion=(
        "Checking.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n"
        "<｜DSML｜ parameter name=\"city\" string=\"true\">北京</｜DSML｜ parameter>\n"
        "<｜DSML｜ parameter name=\"days\" string=\"false\">3</｜DSML｜ parameter>\n"
        "</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"search\">\n"
        "<｜DSML｜ parameter name=\"filters\" string=\"false\">{\"lang\": [\"en\"], \"safe\": true}</｜DSML｜ parameter>\n"
        "</｜DSML｜ invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>")),
]
V4_PARSE = [
    dict(name="tool_call_v4", thinking_mode="thinking", completion=(
        "  reason  </think>summary\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"lookup\">\n"
        "<｜DSML｜parameter name=\"query\" string=\"true\">value</｜DSML｜parameter>\n"
        "<｜DSML｜parameter name=\"limit\" string=\"false\">2</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>")),
]


def run_encode(module, case, version):
    kwargs = dict(thinking_mode=case["thinking_mode"])
    if "reasoning_effort" in case:
        kwargs["reasoning_effort"] = case["reasoning_effort"]
    if "drop_thinking" in case:
        kwargs["drop_thinking"] = case["drop_thinking"]
    if "context" in case:
        kwargs["context"] = copy.deepcopy(case["context"])
    if "add_bos" in case:
        kwargs["add_default_bos_token"] = case["add_bos"]
    messages = copy.deepcopy(case["messages"])
    if version == "v41":
        prompt, media = module.encode_messages(messages, return_multi_modal_data=True, **kwargs)
        images = [img["url"] for img in media["images"]]
        if images != case.get("expected_images", []):
            raise SystemExit(f"{case['name']}: images {images}")
    else:
        prompt = module.encode_messages(messages, **kwargs)
    return prompt


def run_parse(module, case):
    parsed = module.parse_message_from_completion_text(case["completion"], case["thinking_mode"])
    return {
        "reasoning_content": parsed["reasoning_content"],
        "content": parsed["content"],
        "tool_calls": [{"name": tc["function"]["name"],
                        "arguments": json.loads(tc["function"]["arguments"])}
                       for tc in parsed["tool_calls"]],
    }


def build(module, version, cases, parse_cases, source):
    out = {"generator": "tests/chat_tools/make_chat_golden.py", "module": source,
           "encode": [], "parse": []}
    for case in cases:
        prompt = run_encode(module, case, version)
        official = case.pop("official_expected", None)
        if official is not None and official != prompt:
            raise SystemExit(f"{case['name']}: official module output differs from the official "
                             f"test expectation:\n{prompt!r}\n{official!r}")
        case["expected"] = prompt
        out["encode"].append(case)
    for case in parse_cases:
        case = dict(case)
        case.setdefault("source", source)
        case["expected"] = run_parse(module, case)
        out["parse"].append(case)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--v41", required=True)
    ap.add_argument("--v4", required=True)
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args()
    v41 = load(args.v41, "official_encoding_v41")
    v4 = load(args.v4, "official_encoding_dsv4")
    outputs = {
        "golden_v41.json": build(v41, "v41", v41_cases(), V41_PARSE, V41_SOURCE),
        "golden_v4.json": build(v4, "v4", v4_cases(), V4_PARSE, V4_SOURCE),
    }
    status = 0
    for name, data in outputs.items():
        text = json.dumps(data, ensure_ascii=False, indent=1) + "\n"
        path = OUT_DIR / name
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                print(f"{path} is stale", file=sys.stderr)
                status = 1
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path} ({len(data['encode'])} encode, {len(data['parse'])} parse cases)")
    return status


if __name__ == "__main__":
    sys.exit(main())
