#!/usr/bin/env python3
"""Records expected chat template renderings for tests/chat_template_test.cc.

The templates under tests/fixtures/chat_templates/*.jinja are the published ones (see the
README there). For each template this script builds a model directory (a tiny
tokenizer.json, a tokenizer_config.json with the model's special tokens, and the template
as chat_template.jinja), loads it with transformers' AutoTokenizer and calls
apply_chat_template(..., tokenize=False) over a set of conversations. It writes
expected.json with, per case, the inputs, the exact variables transformers passed to the
template (render_context) and the rendered string (or the error the template raised).
It also records expressions.json (small templates probing Jinja semantics, rendered by
transformers' Jinja environment) and the expected outputs of the loader fixtures under
model_dirs/.

strftime_now() is pinned to 2024-07-26 12:00:00 so that Llama 3.2's date is stable; the
C++ test passes the same time.

Usage: python3 tools/make_chat_template_fixtures.py [--out tests/fixtures/chat_templates]
Requires: pip install transformers jinja2 tokenizers (tested with transformers 5.24.0,
jinja2 3.1.6, tokenizers 0.23.3). Output is deterministic.
"""

import argparse
import copy
import datetime
import json
import os
import shutil
import tempfile

import jinja2
import tokenizers
import transformers
from tokenizers import Tokenizer, models
from transformers import AutoTokenizer
import transformers.utils.chat_template_utils as chat_template_utils

FIXED_NOW = datetime.datetime(2024, 7, 26, 12, 0, 0)


class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return cls(FIXED_NOW.year, FIXED_NOW.month, FIXED_NOW.day, FIXED_NOW.hour)


chat_template_utils.datetime = _FixedDatetime

# Every Template.render call made by transformers is recorded here.
_captured_contexts = []
_original_render = jinja2.Template.render


def _spy_render(self, *args, **kwargs):
    _captured_contexts.append(copy.deepcopy(kwargs))
    return _original_render(self, *args, **kwargs)


jinja2.Template.render = _spy_render

LLAMA3_TOKENS = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN_TOKENS = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}

# name -> template file, special tokens (as in each model's tokenizer_config.json) and the
# conversation features the template supports.
TEMPLATES = {
    "gemma3": ("gemma3.jinja",
               {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
                "unk_token": "<unk>"},
               {"parts"}),
    "gemma4": ("gemma4.jinja",
               {"bos_token": "<bos>", "eos_token": "<turn|>", "pad_token": "<pad>",
                "unk_token": "<unk>", "mask_token": "<mask>"},
               {"parts", "tools", "gemma_thinking"}),
    "llama3_1": ("llama3_1.jinja", LLAMA3_TOKENS, {"tools", "llama"}),
    "llama3_2": ("llama3_2.jinja", LLAMA3_TOKENS, {"tools", "llama"}),
    "llama3_3": ("llama3_3.jinja", LLAMA3_TOKENS, {"tools", "llama"}),
    "qwen2_5": ("qwen2_5.jinja", QWEN_TOKENS, {"tools"}),
    "qwen3": ("qwen3.jinja", QWEN_TOKENS, {"tools", "qwen_thinking"}),
}
# More published templates, run over every conversation (the kwargs that only some
# families read, like enable_thinking or date_string, are harmless to the others).
ALL_FEATURES = {"parts", "tools", "llama", "qwen_thinking", "gemma_thinking"}
EXTRA_TEMPLATES = {
    "gpt_oss": ("gpt_oss.jinja", {"bos_token": "<|startoftext|>", "eos_token": "<|return|>",
                                  "pad_token": "<|endoftext|>"}, ALL_FEATURES),
    "qwen3_5": ("qwen3_5.jinja", QWEN_TOKENS, ALL_FEATURES),
    "deepseek_v3_1": ("deepseek_v3_1.jinja",
                      {"bos_token": "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                       "eos_token": "<\uff5cend\u2581of\u2581sentence\uff5c>"}, ALL_FEATURES),
    "mistral_small_3_2": ("mistral_small_3_2.jinja",
                          {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
                          ALL_FEATURES),
    "hermes3_tool_use": ("hermes3_tool_use.jinja",
                         {"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, ALL_FEATURES),
    "functionary_v3_1": ("functionary_v3_1.jinja", LLAMA3_TOKENS, ALL_FEATURES),
    "seed_oss": ("seed_oss.jinja", {"bos_token": "<seed:bos>", "eos_token": "<seed:eos>",
                                    "pad_token": "<seed:pad>"}, ALL_FEATURES),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days"},
            },
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the documentation.",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for"},
                "tags": {"type": "array", "items": {"type": "string"},
                         "description": "Tags to filter by"},
                "options": {"type": "object", "description": "Search options",
                            "properties": {"limit": {"type": "number",
                                                     "description": "Max results"}},
                            "required": ["limit"]},
                "exact": {"type": "boolean", "description": "Exact match", "nullable": True},
            },
            "required": ["query", "tags"],
        },
    },
}
TOOL_CALL_TURNS = [
    {"role": "user", "content": "What's the weather in Paris? Use celsius."},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
     "content": "{\"temperature\": 21.5, \"condition\": \"sunny\"}"},
    {"role": "assistant", "content": "It is 21.5 °C and sunny in Paris."},
    {"role": "user", "content": "Thanks! And tomorrow?"},
]


def user(text):
    return {"role": "user", "content": text}


def assistant(text):
    return {"role": "assistant", "content": text}


def conversations(features):
    """Yields (case name, messages, apply_chat_template kwargs)."""
    yield "user_gen", [user("Hello!")], {"add_generation_prompt": True}
    yield "system_user_gen", [SYSTEM, user("What is the capital of France?")], \
        {"add_generation_prompt": True}
    yield "system_user_nogen", [SYSTEM, user("What is the capital of France?")], {}
    yield "multi_turn_gen", [SYSTEM, user("Hi, who are you?"), assistant("I am an assistant."),
                             user("Tell me a joke.")], {"add_generation_prompt": True}
    yield "ends_with_assistant", [user("2+2?"), assistant("4")], {}
    yield "unicode", [user("你好，世界！ 🌍🚀 Ünïcödé — «quotes» ’apostrophes’"),
                      assistant("こんにちは 👋 Привет"),
                      user("  leading and trailing spaces  \n\n")], {"add_generation_prompt": True}
    yield "template_syntax_in_content", [
        user("Show {{ messages }} and {% if x %} and {# c #} literally, with 'quotes' \"too\"")], \
        {"add_generation_prompt": True}
    yield "multiline_content", [SYSTEM, user("line1\nline2\r\n\tindented\n\n"),
                                assistant("\n answer with surrounding newlines \n")], {}
    yield "empty_content", [user(""), assistant(""), user("x")], {"add_generation_prompt": True}
    if "parts" in features:
        yield "content_parts", [
            {"role": "system", "content": [{"type": "text", "text": "Be terse."}]},
            {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                         {"type": "image"},
                                         {"type": "text", "text": " this picture. "}]},
            {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]},
        ], {"add_generation_prompt": True}
    if "tools" in features:
        yield "tools_no_call", [SYSTEM, user("Hi")], \
            {"add_generation_prompt": True, "tools": [WEATHER_TOOL, SEARCH_TOOL]}
        yield "tools_call_and_result", [SYSTEM] + TOOL_CALL_TURNS, \
            {"add_generation_prompt": True, "tools": [WEATHER_TOOL]}
        # OpenAI clients send content null with tool calls; transformers drops null keys.
        content_none = copy.deepcopy(TOOL_CALL_TURNS[:3])
        content_none[1]["content"] = None
        yield "tools_call_content_none", content_none, \
            {"add_generation_prompt": True, "tools": [WEATHER_TOOL]}
        string_args = copy.deepcopy(TOOL_CALL_TURNS[:3])
        string_args[1]["tool_calls"][0]["function"]["arguments"] = \
            "{\"city\": \"Paris\", \"unit\": \"celsius\"}"
        yield "tools_string_arguments", string_args, \
            {"add_generation_prompt": True, "tools": [WEATHER_TOOL]}
        rich = copy.deepcopy(TOOL_CALL_TURNS[:3])
        rich[1]["tool_calls"][0]["function"] = {
            "name": "search_docs",
            "arguments": {"query": "chat \"templates\"", "tags": ["jinja", "héllo"],
                          "options": {"limit": 5, "ratio": 0.25}, "exact": False, "note": None}}
        yield "tools_rich_arguments", rich, {"add_generation_prompt": True,
                                             "tools": [WEATHER_TOOL, SEARCH_TOOL]}
    if "llama" in features:
        yield "llama_date_string", [SYSTEM, user("What day is it?")], \
            {"add_generation_prompt": True, "date_string": "01 Jan 2025"}
        yield "llama_tools_in_system", [SYSTEM, user("Weather in Oslo?")], \
            {"add_generation_prompt": True, "tools": [WEATHER_TOOL], "tools_in_user_message": False}
        yield "llama_two_tool_calls_error", [user("Weather in Paris and Oslo?"), {
            "role": "assistant", "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]}], \
            {"tools": [WEATHER_TOOL]}
        yield "llama_builtin_tools", [SYSTEM, user("Search the news."), {
            "role": "assistant", "tool_calls": [
                {"type": "function", "function": {"name": "brave_search",
                                                  "arguments": {"query": "news today"}}}]},
            {"role": "ipython", "content": "Headline: tests pass"}], \
            {"add_generation_prompt": True, "builtin_tools": ["brave_search", "code_interpreter"],
             "date_string": "26 Jul 2024"}
    if "qwen_thinking" in features:
        yield "qwen_enable_thinking_false", [user("Quick answer: 1+1?")], \
            {"add_generation_prompt": True, "enable_thinking": False}
        yield "qwen_reasoning_content", [
            user("What is 2+3?"),
            {"role": "assistant", "content": "5", "reasoning_content": "2 plus 3 is 5."},
            user("And 3+4?"),
            {"role": "assistant", "content": "<think>\n3+4=7\n</think>\n\n7"}], {}
        yield "qwen_thinking_history", [
            user("First?"), {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nOne."},
            user("Second?")], {"add_generation_prompt": True}
        yield "qwen_reasoning_alias", [
            user("Why?"), {"role": "assistant", "content": "Because.", "reasoning": "Think."}], {}
    if "gemma_thinking" in features:
        yield "gemma_enable_thinking", [SYSTEM, user("Solve x+1=3.")], \
            {"add_generation_prompt": True, "enable_thinking": True}
        yield "gemma_thinking_no_system", [user("Hi")], \
            {"add_generation_prompt": True, "enable_thinking": True}
        yield "gemma_strip_thinking", [
            user("Q1"), assistant("<|channel>thought\nsecret<channel|>Visible answer."), user("Q2")], \
            {"add_generation_prompt": True}
        reasoning = copy.deepcopy(TOOL_CALL_TURNS)
        reasoning[1]["reasoning_content"] = "I should call the weather tool."
        yield "gemma_reasoning_with_tool_call", reasoning, \
            {"add_generation_prompt": True, "tools": [WEATHER_TOOL], "enable_thinking": True}
        yield "gemma_developer_role", [{"role": "developer", "content": "  Dev rules.  "},
                                       user("Hi")], {"add_generation_prompt": True}
    if "parts" in features and "tools" not in features:
        yield "roles_must_alternate_error", [user("a"), user("b")], {}


def make_model_dir(root, template_source, special_tokens, extra_files=None, config_extra=None):
    """Writes a directory AutoTokenizer can load; returns the files the C++ test reads."""
    os.makedirs(root, exist_ok=True)
    vocab = {"<unk>": 0}
    for token in special_tokens.values():
        content = token["content"] if isinstance(token, dict) else token
        vocab.setdefault(content, len(vocab))
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(os.path.join(root, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **special_tokens, **(config_extra or {})}
    with open(os.path.join(root, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
    if template_source is not None:
        with open(os.path.join(root, "chat_template.jinja"), "w", encoding="utf-8") as f:
            f.write(template_source)
    for name, content in (extra_files or {}).items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(content)


def apply(tokenizer, messages, kwargs):
    """Returns (rendered, error, render_context)."""
    _captured_contexts.clear()
    try:
        rendered = tokenizer.apply_chat_template(copy.deepcopy(messages), tokenize=False,
                                                 **copy.deepcopy(kwargs))
        error = None
    except (jinja2.exceptions.TemplateError, TypeError, ValueError) as e:
        rendered, error = None, str(e)
    context = _captured_contexts[-1] if _captured_contexts else None
    return rendered, error, context


def split_options(kwargs):
    """apply_chat_template kwargs -> the C++ ApplyChatTemplateOptions fields."""
    kwargs = dict(kwargs)
    options = {"add_generation_prompt": kwargs.pop("add_generation_prompt", False),
               "tools": kwargs.pop("tools", None), "documents": kwargs.pop("documents", None)}
    options["extra_context"] = kwargs
    return options


def record_templates(out_dir, work_dir):
    cases = []
    for name, (file_name, tokens, features) in {**TEMPLATES, **EXTRA_TEMPLATES}.items():
        with open(os.path.join(out_dir, file_name), encoding="utf-8") as f:
            source = f.read()
        model_dir = os.path.join(work_dir, name)
        make_model_dir(model_dir, source, tokens)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        for case, messages, kwargs in conversations(features):
            rendered, error, context = apply(tokenizer, messages, kwargs)
            entry = {"name": f"{name}/{case}", "template": file_name, "special_tokens": tokens,
                     "messages": messages, "options": split_options(kwargs),
                     "render_context": context}
            if error is None:
                entry["expected"] = rendered
            else:
                entry["expected_error"] = error
            cases.append(entry)
    return cases


# Loader fixtures: model directories in the layouts transformers reads.
LOADER_TEMPLATE = ("{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}"
                   "{% endfor %}{% if tools %}tools={{ tools | map(attribute='function.name') | join(',') }}"
                   "{% endif %}{% if add_generation_prompt %}[assistant]{% endif %}")
TOOL_USE_TEMPLATE = "TOOL_USE " + LOADER_TEMPLATE
ADDED_TOKEN = {"content": "</s>", "lstrip": False, "normalized": False, "rstrip": False,
               "single_word": False, "special": True, "__type": "AddedToken"}
LOADER_DIRS = {
    # chat_template.jinja beside a config that also has one: the .jinja file wins.
    "jinja_file": dict(template=LOADER_TEMPLATE, tokens={"bos_token": "<s>", "eos_token": "</s>"},
                       config_extra={"chat_template": "IGNORED {{ messages }}"}),
    # A single template string in tokenizer_config.json; eos as an AddedToken object.
    "config_string": dict(template=None, tokens={"bos_token": "<s>", "eos_token": ADDED_TOKEN},
                          config_extra={"chat_template": LOADER_TEMPLATE}),
    # Named templates: "tool_use" is picked when tools are given.
    "config_named_list": dict(template=None, tokens={"bos_token": "<s>", "eos_token": "</s>"},
                              config_extra={"chat_template": [
                                  {"name": "default", "template": LOADER_TEMPLATE},
                                  {"name": "tool_use", "template": TOOL_USE_TEMPLATE}]}),
    # A legacy special_tokens_map.json overrides the config (no added_tokens_decoder).
    "special_tokens_map": dict(template=LOADER_TEMPLATE,
                               tokens={"bos_token": "<s>", "eos_token": "</s>"},
                               extra_files={"special_tokens_map.json": json.dumps(
                                   {"bos_token": "<BOS>", "eos_token": {"content": "<EOS>"}})}),
    # additional_chat_templates/<name>.jinja beside chat_template.jinja.
    "additional_templates": dict(template=LOADER_TEMPLATE,
                                 tokens={"bos_token": "<s>", "eos_token": "</s>"},
                                 extra_files={"additional_chat_templates/tool_use.jinja":
                                              TOOL_USE_TEMPLATE}),
}
LOADER_CONVERSATIONS = [
    ("plain", [user("hi"), {"role": "assistant", "content": "yo", "tool_calls": None}],
     {"add_generation_prompt": True}),
    ("with_tools", [user("weather?")], {"add_generation_prompt": True, "tools": [WEATHER_TOOL]}),
]


def record_loader_dirs(out_dir, work_dir):
    cases = []
    for name, spec in LOADER_DIRS.items():
        committed = os.path.join(out_dir, "model_dirs", name)
        shutil.rmtree(committed, ignore_errors=True)
        make_model_dir(committed, spec["template"], spec["tokens"], spec.get("extra_files"),
                       spec.get("config_extra"))
        os.remove(os.path.join(committed, "tokenizer.json"))  # only Python needs it
        scratch = os.path.join(work_dir, "loader_" + name)
        make_model_dir(scratch, spec["template"], spec["tokens"], spec.get("extra_files"),
                       spec.get("config_extra"))
        tokenizer = AutoTokenizer.from_pretrained(scratch)
        for case, messages, kwargs in LOADER_CONVERSATIONS:
            rendered, error, _ = apply(tokenizer, messages, kwargs)
            assert error is None, error
            cases.append({"name": f"{name}/{case}", "model_dir": f"model_dirs/{name}",
                          "messages": messages, "options": split_options(kwargs),
                          "special_tokens": tokenizer.special_tokens_map, "expected": rendered})
    return cases


# Small templates probing Jinja semantics one feature at a time.
EXPRESSIONS = [
    ("{{ 'a' ~ none ~ true ~ 1.0 ~ [1, 'b'] ~ {'k': none} ~ (1,) }}", {}),
    ("{{ none }}|{{ true }}|{{ 3/2 }}|{{ 4/2 }}|{{ 7//2 }}|{{ -7//2 }}|{{ -7 % 3 }}|{{ 2**10 }}", {}),
    ("{{ 1e20 }}|{{ 1.5e-7 }}|{{ 0.1+0.2 }}|{{ 1e16 }}|{{ 123456789012345.6 }}|{{ 1.0e-5 }}|{{ -0.0 }}", {}),
    ("{{ 'abc'[::-1] }}|{{ 'héllo'[1:3] }}|{{ 'héllo'|length }}|{{ [1,2,3,4][1:] }}|{{ [1,2,3,4][-2:] }}", {}),
    ("{{ 'abcdef'[1:5:2] }}|{{ 'abcdef'[:-2] }}|{{ [1,2,3][5:] }}|{{ 'abc'[-1] }}|{{ 'abc'[9] }}|{{ [1,2,3][::-2] }}", {}),
    ("{{ ('a', 'b') }}|{{ 'a' in ['a'] }}|{{ 'b' in {'b': 1} }}|{{ 'bc' in 'abc' }}|{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}", {}),
    ("{{ 1 == 1.0 }}|{{ true == 1 }}|{{ [1] == [1] }}|{{ none == none }}|{{ x == none }}|{{ (1,2) == [1,2] }}", {}),
    ("{{ x is iterable }}|{{ x is sequence }}|{{ x is mapping }}|{{ x is string }}|{{ x is none }}", {}),
    ("{{ 5 is number }}|{{ true is number }}|{{ 'a' is sequence }}|{{ {} is sequence }}|{{ {} is iterable }}", {}),
    ("{{ 1 is integer }}|{{ 1.0 is float }}|{{ true is integer }}|{{ true is boolean }}|{{ range is callable }}", {}),
    ("{{ 3 is divisibleby 3 }}|{{ 'a' is lower }}|{{ 'A' is upper }}|{{ 3 is odd }}|{{ 2 is even }}", {}),
    ("{{ 1 is eq 1 }}|{{ 1 is equalto 1 }}|{{ 2 is gt 1 }}|{{ 1 is in [1] }}|{{ none is sameas none }}|{{ 1 is ne 2 }}", {}),
    ("{{ [1,2]|first }}|{{ []|first }}|{{ x|first }}|{{ 'xy'|last }}|{{ {'a': 1, 'b': 2}|first }}", {}),
    ("{{ x|join(',') }}|{{ x|list }}|{{ x|items|list }}|{{ x|string }}|{{ x|upper }}|{{ x|trim }}|{{ x|length }}", {}),
    ("{{ 'ß'.upper() }}|{{ 'hello world'.title() }}|{{ \"they're\".title() }}|{{ 'ΣΑΣ'.lower() }}|{{ 'éCOLE'.capitalize() }}", {}),
    ("{{ 'a\\tb' }}|{{ ['a\\tb', \"it's\", 'é\\x00', 'say \"hi\"', 'both \\' \"'] }}", {}),
    ("{{ range(3)|list }}|{{ range(1, 10, 3)|list }}|{{ range(5, 0, -2)|list }}|{{ range(0)|list }}", {}),
    ("{{ 'a' * 3 }}|{{ [1] * 2 }}|{{ 3 * 'b' }}|{{ '%s-%d' % ('a', 3) }}|{{ '%s' % 'x' }}|{{ '%05.1f|%-4s|%x' % (3.14159, 'ab', 255) }}", {}),
    ("{{ 'x'|indent }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}", {}),
    ("{{ [{'n': 'b'}, {'n': 'a'}]|sort(attribute='n')|map(attribute='n')|join(',') }}", {}),
    ("{{ ['B', 'a', 'C']|sort }}|{{ ['B', 'a', 'C']|sort(case_sensitive=true) }}|{{ ['a', 'A', 'b']|unique|list }}|{{ [3, 1, 2]|sort(reverse=true) }}", {}),
    ("{{ [1, 2, 3, 4]|select('odd')|list }}|{{ [1, none, 2]|reject('none')|list }}|{{ [1, 0, 2]|select|list }}", {}),
    ("{{ [{'a': 1}, {'a': 0}, {}]|selectattr('a')|list }}|{{ [{'a': 1}, {'a': 0}]|rejectattr('a')|list }}|{{ [{'t': 'x'}, {'t': 'y'}]|selectattr('t', 'equalto', 'y')|list }}", {}),
    ("{{ 5|default(3) }}|{{ none|default(3) }}|{{ ''|default(3, true) }}|{{ x|d('z') }}|{{ x|default }}", {}),
    ("{{ 'abc'|reverse }}|{{ [1, 2]|reverse|list }}|{{ '4.7'|int }}|{{ 'x'|int }}|{{ '3'|float }}|{{ ' 42 '|int }}", {}),
    ("{{ 3.7|round }}|{{ 3.14159|round(2) }}|{{ 2.5|round }}|{{ 0.125|round(2) }}|{{ 3|round }}|{{ 2.7|round(0, 'floor') }}", {}),
    ("{{ [1, 2]|sum }}|{{ -3|abs }}|{{ [3, 1]|min }}|{{ [3, 1]|max }}|{{ 'a b  c'|wordcount }}|{{ [{'v': 2}, {'v': 5}]|sum(attribute='v') }}", {}),
    ("{{ 'hello'|capitalize }}|{{ 'hELLO wORLD'|title }}|{{ 'a-b (c'|title }}|{{ 'a'|center(5) }}|{{ '<a>&\"\\''|e }}|{{ '<a>'|safe }}", {}),
    ("{{ {'b': 1, 'a': {'c': [1, 2]}}|tojson(indent=2, sort_keys=true) }}|{{ [1, 2]|tojson(separators=(',', ':')) }}|{{ 'é'|tojson(ensure_ascii=true) }}", {}),
    ("{{ 'a\\u0001\\u007f\\u2028\"\\\\'|tojson }}|{{ 1.5|tojson }}|{{ 1e100|tojson }}|{{ (1, 2)|tojson }}|{{ {}|tojson(indent=2) }}|{{ []|tojson }}", {}),
    ("{{ d|tojson }}|{{ d|tojson(indent=4) }}", {"d": {"z": 1, "a": [True, None, "😀"], "m": {"k": 1.25}}}),
    ("{{ d|dictsort }}|{{ d|dictsort(reverse=true) }}|{{ d|dictsort(by='value') }}|{{ d.items()|list }}", {"d": {"b": 2, "A": 3, "c": 1}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }}{{ loop.index }}/{{ loop.length }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }};{% endfor %}", {"d": {"a": 1, "b": 2}}),
    ("{% for k, v in d|items %}{{ k }}:{{ v }},{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{{ d.keys()|list }}|{{ d.values()|list }}", {"d": {"x": 1, "y": [2]}}),
    ("{% for x in [1, 2, 3] if x != 2 %}{{ loop.index }}:{{ x }}{{ loop.previtem }}{{ loop.nextitem }},{% endfor %}", {}),
    ("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}", {}),
    ("{% for x in 'ab' %}{{ loop.cycle('o', 'e') }}{{ x }}{% endfor %}|{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {}),
    ("{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in y %}{% else %}undef{% endfor %}", {}),
    ("{% for i in [1, 2, 3] %}{% if i > 1 %}[{{ x }}]{% endif %}{% set x = i %}{% endfor %}|{{ x }}", {}),
    ("{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}|{{ x }}", {}),
    ("{% macro m() %}{{ y }}{% endmacro %}{% set y = 3 %}{{ m() }}", {}),
    ("{% if true %}{% set z = 4 %}{% endif %}{{ z }}", {}),
    ("{% set ns = namespace(a=1) %}{% for i in [1, 2] %}{% set ns.a = ns.a + i %}{% endfor %}{{ ns.a }}|{{ ns }}", {}),
    ("{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}", {}),
    ("{% macro m(a, b=2) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}|{{ m(1, 3) }}|{{ m(b=5, a=0) }}", {}),
    ("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}|{% macro v() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ v(1, 2, k=3) }}", {}),
    ("{% macro outer(x) %}<{{ inner(x) }}>{% endmacro %}{% macro inner(x) %}{{ x * 2 }}{% endmacro %}{{ outer(4) }}", {}),
    ("{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}inner{% endcall %}|{% filter upper %}abc{% endfilter %}", {}),
    ("{% set x %}  ab {% endset %}[{{ x }}]|{% set y | trim %}  cd  {% endset %}[{{ y }}]", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% with c = 1 %}{{ c }}{% endwith %}{{ c }}", {}),
    ("{{ 'a' 'b' }}|{{ \"x\\ny\" }}|{{ '\\x41\\u00e9\\101' }}|{{ 'it\\'s' }}", {}),
    ("{{ 1 if true else 2 }}|{{ 1 if false else 2 if false else 3 }}|{{ 1 if false }}", {}),
    ("{{ not none }}|{{ 1 and 0 }}|{{ 0 or 'x' }}|{{ none or none }}|{{ [] or {} }}|{{ 'a' and 'b' }}", {}),
    ("{{ [1, 2] < [1, 3] }}|{{ 'a' < 'b' }}|{{ {'a': 1} == {'a': 1} }}|{{ 'abc' ~ 1 ~ none }}|{{ 1 + 2.0 }}|{{ 2 ** -1 }}", {}),
    ("{{ 7 % -3 }}|{{ 7.5 // 2 }}|{{ -7.5 % 2 }}|{{ -1 | abs }}|{{ -(1) }}|{{ not 1 == 2 }}|{{ 2 ** 3 ** 2 }}", {}),
    ("{{ dict(a=1, b=2) }}|{{ dict(a=1).a }}|{{ dict({'z': 0}, y=1) }}", {}),
    ("{{ ' a b '.split(' ') }}|{{ 'a,b,c'.split(',', 1) }}|{{ 'a,b,c'.rsplit(',', 1) }}|{{ '  a  b '.split() }}|{{ 'a b c'.split(none, 1) }}", {}),
    ("{{ 'abc'.startswith(('x', 'a')) }}|{{ 'xxaxx'.strip('x') }}|{{ 'abca'.replace('a', 'z', 1) }}|{{ 'abc'.find('c') }}|{{ ', '.join(['a', 'b']) }}", {}),
    ("{{ '\\n x \\n'.strip() }}|{{ '\\n x \\n'.lstrip() }}|{{ '\\n x \\n'.rstrip() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ 'ab'.endswith('b') }}", {}),
    ("{{ '42'.isdigit() }}|{{ 'ab'.isalpha() }}|{{ ' '.isspace() }}|{{ 'AB'.isupper() }}|{{ 'x'.zfill(3) }}|{{ 'k=v'.partition('=') }}|{{ '{}-{}'.format(1, 'a') }}", {}),
    ("{{ 'abc'.foo }}|{{ 'abc'.foo is defined }}|{{ {'a': 1}.b is defined }}|{{ {'a': 1}['b'] is defined }}|{{ [1][5] is defined }}", {}),
    ("{{ d['items'] }}|{{ d.get('items') }}|{{ d.get('nope', 'dflt') }}|{{ d.get('nope') }}", {"d": {"items": 5}}),
    ("{{ messages[0].content }}|{{ messages[0]['role'] }}|{{ messages|length }}|{{ messages[-1].content|upper }}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}", {}),
    ("{%- raw %} {{ not evaluated }} {% endraw -%}|{# comment #}x", {}),
    ("  {% if true %}\n    yes\n  {% endif %}\n  {{ 'v' }}  \n{%- if true %} a {% endif -%}\n\n  b  {#- c #}  d  {{- 'e' -}}  f", {}),
    ("{% for i in [1, 2] %}\n  item {{ i }}\n{% endfor %}\n{%+ if true %}keep-lstrip{% endif +%}\nnext", {}),
    ("line1\r\nline2\r{{ 'x' }}\n", {}),
    ("{{ 'a' }}\n", {}),
    ("{{ 'a' }}\n\n", {}),
    ("{% generation %}gen{% endgeneration %}", {}),
    ("{{ x.y }}", {}),
    ("{{ x.y.z }}", {"x": {}}),
    ("{{ 'a' + 1 }}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 1 < 'a' }}", {}),
    ("{% for a in none %}{% endfor %}", {}),
    ("{{ d.pop('a') }}", {"d": {"a": 1}}),
    ("{{ l.append(1) }}", {"l": []}),
    ("{% set d = {} %}{% set d.a = 1 %}", {}),
    ("{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("{% macro m(a) %}{% endmacro %}{{ m(1, c=2) }}", {}),
    ("{{ raise_exception('Custom failure: ' ~ 42) }}", {}),
    ("{{ x|tojson }}", {}),
    ("{{ 'a' in none }}", {}),
    ("{{ [1] + (2,) }}", {}),
    ("{{ namespace(_hidden=1) }}", {}),
    ("{{ range(200000)|length }}", {}),
    # markupsafe: `safe`/`escape` make Markup, and Markup + str escapes the str.
    ("{{ 'a'|safe + '<b>' }}|{{ '<x>' + 'y'|safe }}|{{ ('<'|e) + '<' }}|{{ ('<'|e|e) }}|{{ 'a'|safe ~ '<' }}|{{ ('<i>'|safe|upper) + '&' }}", {}),
    # Jinja's map/select/... return generators: always true, no len(), not JSON.
    ("{{ [] | select | list }}|{% if [] | select %}generator-is-true{% endif %}|{{ none | map('upper') | list }}|{{ [1, 2] | map('string') | join('-') }}", {}),
    ("{{ [1] | map('string') | length }}", {}),
    ("{{ [1] | select | tojson }}", {}),
    ("{{ [3, 1] | reverse | first }}|{{ {'a': 1, 'b': 2} | reverse | list }}|{{ 'x' in ['x'] | select }}", {}),
    # Dict keys need not be strings.
    ("{% set d = {1: 'a', 2.0: 'b', true: 'c', none: 'n', (1, 2): 't'} %}{{ d }}|{{ d[1] }}|{{ d[2] }}|{{ d[(1, 2)] }}|{{ 2 in d }}|{{ d|length }}", {}),
    ("{% set d = {0: 0, 512: 128, 1024: 256} %}{% for k, v in d.items() %}{{ k }}:{{ v }},{% endfor %}|{{ d|tojson }}|{{ d|dictsort(reverse=true) }}", {}),
    ("{{ {[1]: 2} }}", {}),
    # An unknown filter or test inside an if/inline-if fails only when it runs.
    ("{% if false %}{{ x | from_json }}{% endif %}ok|{{ 1 if true else (x | nope) }}|{% if x is nosuchtest %}{% endif %}", {}),
    ("{% if true %}{{ x | from_json }}{% endif %}", {}),
    ("{{ x | from_json }}", {}),
    ("{% if true %}{% for i in [1] %}{{ i | nope }}{% endfor %}{% endif %}", {}),
    # Found by differential fuzzing against Jinja.
    ("{{ 0.1 is odd }}|{{ 3.0 is odd }}|{{ 'ab' % [1, 2] }}|{{ '%s' % [1, 2] }}|{{ 'a' % x }}|{{ x in {'a': 1} }}", {}),
    ("{{ 2.5 | indent(2) }}", {}),
    ("{{ x | int }}", {}),
    ("{{ x | last | float }}", {}),
]


def record_expressions():
    env_template = chat_template_utils._compile_jinja_template
    cases = []
    for source, context in EXPRESSIONS:
        entry = {"template": source, "context": context}
        try:
            entry["expected"] = env_template(source).render(**copy.deepcopy(context))
        except Exception as e:  # noqa: BLE001 - every Jinja error type is recorded
            entry["expected_error"] = f"{type(e).__name__}: {e}"
        cases.append(entry)
    return cases


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                      "fixtures", "chat_templates"))
    args = parser.parse_args()
    header = {"generated_by": f"tools/make_chat_template_fixtures.py with transformers "
                              f"{transformers.__version__}, jinja2 {jinja2.__version__}, "
                              f"tokenizers {tokenizers.__version__}",
              "strftime_now": FIXED_NOW.isoformat()}
    with tempfile.TemporaryDirectory() as work_dir:
        write_json(os.path.join(args.out, "expected.json"),
                   {**header, "cases": record_templates(args.out, work_dir)})
        write_json(os.path.join(args.out, "loader_expected.json"),
                   {**header, "cases": record_loader_dirs(args.out, work_dir)})
    write_json(os.path.join(args.out, "expressions.json"),
               {**header, "cases": record_expressions()})


if __name__ == "__main__":
    main()
