# The openai Python SDK against a running `tpserve serve`: sync and async clients, chat
# and text completions, streamed and not, logprobs, usage, typed errors and 16 concurrent
# streams. Prints one PASS/FAIL line per check; exits 1 if any failed. The weights are
# random (--load-format dummy), so the checks are on structure, never on the text.
# The clients validate strictly: a field the SDK's types reject is an APIResponseValidationError.
# Except on text completion streams: the SDK types their chunks as a whole Completion, whose
# finish_reason may not be null, yet null is what OpenAI itself sends until the last chunk;
# those go through a client with the SDK's default (lenient) parsing.
# The server needs API_KEY (serve --api-key): every client sends it, and one check sends a wrong one.
# Usage: python client_conformance.py HTTP_PORT MODEL API_KEY   (run by client_conformance_test.sh)
import asyncio
import math
import sys
import traceback
import urllib.request

import json
from typing import Literal

import openai
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel, Field

PORT, MODEL, API_KEY = sys.argv[1], sys.argv[2], sys.argv[3]
BASE_URL = f"http://127.0.0.1:{PORT}/v1"
MESSAGES = [{"role": "user", "content": "Hello there"}]
PROMPT = "The capital of France is"
N = 8  # max_tokens of the runs that must stop on length
LENGTH = {"ignore_eos": True}  # vLLM's extension: never stop on EOS

failures = 0


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                     "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]


class Person(BaseModel):  # structured output: every field bounded
    name: str = Field(max_length=6)
    age: int
    color: Literal["red", "green", "blue"]
    member: bool


def ok(name):
    print(f"PASS: {name}", flush=True)


def bad(name, why):
    global failures
    failures += 1
    print(f"FAIL: {name}: {why}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def run(name, fn):
    try:
        fn()
        ok(name)
    except Exception as e:  # one check's failure must not hide the others
        bad(name, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")


async def arun(name, coro):
    try:
        await coro
        ok(name)
    except Exception as e:
        bad(name, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}")


def check_usage(usage, finish_reason, max_tokens):
    expect(usage is not None, "no usage")
    expect(usage.prompt_tokens > 0, f"prompt_tokens {usage.prompt_tokens}")
    expect(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, f"usage {usage}")
    if finish_reason == "length":
        expect(usage.completion_tokens == max_tokens, f"finish length but {usage.completion_tokens} != {max_tokens} tokens")
    else:
        expect(1 <= usage.completion_tokens <= max_tokens, f"completion_tokens {usage.completion_tokens}")


def check_chat(r, max_tokens, finish="length"):
    expect(r.object == "chat.completion", f"object {r.object!r}")
    expect(isinstance(r.id, str) and r.id, f"id {r.id!r}")
    expect(r.model == MODEL, f"model {r.model!r}")
    expect(len(r.choices) == 1, f"{len(r.choices)} choices")
    c = r.choices[0]
    expect(c.index == 0, f"index {c.index}")
    expect(c.message.role == "assistant", f"role {c.message.role!r}")
    expect(isinstance(c.message.content, str), f"content {c.message.content!r}")
    expect(c.finish_reason in ({finish} if finish else {"stop", "length"}), f"finish_reason {c.finish_reason!r}")
    check_usage(r.usage, c.finish_reason, max_tokens)


def check_completion(r, max_tokens, finish="length"):
    expect(r.object == "text_completion", f"object {r.object!r}")
    expect(r.model == MODEL, f"model {r.model!r}")
    expect(len(r.choices) == 1, f"{len(r.choices)} choices")
    c = r.choices[0]
    expect(isinstance(c.text, str), f"text {c.text!r}")
    expect(c.finish_reason in ({finish} if finish else {"stop", "length"}), f"finish_reason {c.finish_reason!r}")
    check_usage(r.usage, c.finish_reason, max_tokens)


# A stream's chunks: (text, finish_reason, usage chunk). Chat chunks carry deltas; every
# chunk but the usage chunk has one choice; the usage chunk (asked for) has none and is last.
def fold_stream(chunks, chat):
    text, finish, usage, n = "", None, None, 0
    for ch in chunks:
        n += 1
        expect(usage is None, "a chunk after the usage chunk")
        expect(ch.object == ("chat.completion.chunk" if chat else "text_completion"), f"object {ch.object!r}")
        expect(ch.model == MODEL, f"model {ch.model!r}")
        if ch.usage is not None:
            expect(ch.choices == [], f"usage chunk with choices {ch.choices}")
            usage = ch.usage
            continue
        expect(len(ch.choices) == 1, f"{len(ch.choices)} choices")
        expect(finish is None, "a chunk after the finish_reason")
        c = ch.choices[0]
        piece = (c.delta.content if chat else c.text) or ""
        expect(isinstance(piece, str), f"piece {piece!r}")
        text += piece
        finish = c.finish_reason
    expect(n > 0, "no chunks")
    return text, finish, usage


def check_stream(text, finish, usage, max_tokens, want_text=None):
    expect(finish == "length", f"finish_reason {finish!r}")
    check_usage(usage, finish, max_tokens)
    if want_text is not None:
        expect(text == want_text, f"streamed {text!r} != non-streamed {want_text!r}")


def check_chat_logprobs(lp, tokens, top):
    expect(lp is not None and lp.content is not None, f"logprobs {lp}")
    expect(len(lp.content) == tokens, f"{len(lp.content)} logprobs for {tokens} tokens")
    for t in lp.content:
        expect(isinstance(t, openai.types.chat.ChatCompletionTokenLogprob), f"type {type(t)}")
        expect(isinstance(t.token, str) and t.logprob <= 0 and math.isfinite(t.logprob), f"entry {t}")
        expect(t.bytes is not None and all(0 <= b < 256 for b in t.bytes), f"bytes {t.bytes}")
        try:  # a token that is part of a UTF-8 character has no exact text
            expect(bytes(t.bytes).decode() == t.token, f"bytes {t.bytes} are not the token {t.token!r}")
        except UnicodeDecodeError:
            pass
        expect(len(t.top_logprobs) == top, f"{len(t.top_logprobs)} top_logprobs, asked {top}")
        for alt in t.top_logprobs:
            expect(isinstance(alt.token, str) and alt.logprob <= 0, f"alternative {alt}")
        if top:
            expect(t.top_logprobs == sorted(t.top_logprobs, key=lambda a: -a.logprob), "top_logprobs not sorted")
            expect(t.logprob <= t.top_logprobs[0].logprob + 1e-4, f"chosen {t.logprob} above the best {t.top_logprobs[0]}")


def sync_checks(client, lenient):
    def models():
        ids = [m.id for m in client.models.list()]
        expect(MODEL in ids, f"{MODEL} not in {ids}")

    run("models.list() names the served model", models)

    greedy = {}

    def chat():
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, temperature=0, extra_body=LENGTH)
        check_chat(r, N)
        greedy["chat"] = r.choices[0].message.content

    run("sync chat.completions.create: ChatCompletion, finish length, usage", chat)

    def chat_eos():
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_completion_tokens=4)
        check_chat(r, 4, finish=None)

    run("sync chat.completions.create with max_completion_tokens, EOS allowed", chat_eos)

    def chat_stream():
        s = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, temperature=0, stream=True,
                                           stream_options={"include_usage": True}, extra_body=LENGTH)
        check_stream(*fold_stream(s, chat=True), N, greedy.get("chat"))

    run("sync chat stream: deltas concatenate to the greedy text, usage chunk last", chat_stream)

    def chat_stream_no_usage():
        chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, stream=True,
                                                     extra_body=LENGTH))
        expect(all(ch.usage is None for ch in chunks), "usage without stream_options.include_usage")
        expect(chunks[0].choices[0].delta.role == "assistant", f"first delta {chunks[0].choices[0].delta}")
        expect(chunks[-1].choices[0].finish_reason == "length", f"last chunk {chunks[-1]}")

    run("sync chat stream without include_usage: role first, no usage", chat_stream_no_usage)

    def completion():
        r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, temperature=0, extra_body=LENGTH)
        check_completion(r, N)
        greedy["completion"] = r.choices[0].text

    run("sync completions.create: Completion, finish length, usage", completion)

    def completion_stream():
        s = lenient.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, temperature=0, stream=True,
                                      stream_options={"include_usage": True}, extra_body=LENGTH)
        check_stream(*fold_stream(s, chat=False), N, greedy.get("completion"))

    run("sync completions stream: text concatenates to the greedy text, usage chunk last", completion_stream)

    def chat_logprobs():
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, logprobs=True, top_logprobs=3,
                                           extra_body=LENGTH)
        check_chat(r, N)
        check_chat_logprobs(r.choices[0].logprobs, N, 3)
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2, logprobs=True,
                                           extra_body=LENGTH)
        check_chat_logprobs(r.choices[0].logprobs, 2, 0)

    run("sync chat logprobs/top_logprobs parse as ChatCompletionTokenLogprob", chat_logprobs)

    def chat_logprobs_stream():
        s = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, logprobs=True, top_logprobs=2,
                                           stream=True, extra_body=LENGTH)
        entries = []
        for ch in s:
            if ch.choices and ch.choices[0].logprobs is not None:
                entries += ch.choices[0].logprobs.content or []
        check_chat_logprobs(openai.types.chat.chat_completion.ChoiceLogprobs(content=entries), N, 2)

    run("sync chat stream logprobs: one entry per token", chat_logprobs_stream)

    def completion_logprobs():
        r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, logprobs=2, extra_body=LENGTH)
        check_completion(r, N)
        lp = r.choices[0].logprobs
        expect(lp is not None and len(lp.tokens) == N and len(lp.token_logprobs) == N, f"logprobs {lp}")
        expect(len(lp.top_logprobs) == N and all(len(t) <= 2 for t in lp.top_logprobs), f"top {lp.top_logprobs}")
        expect(lp.text_offset == sorted(lp.text_offset), f"text_offset {lp.text_offset}")

    run("sync completions logprobs parse as Logprobs", completion_logprobs)

    def errors():
        try:
            client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
            raise AssertionError("no error for an unknown model")
        except openai.NotFoundError as e:
            expect(e.status_code == 404, f"status {e.status_code}")
        for field, kwargs in (("max_tokens", {"max_tokens": -1}), ("temperature", {"temperature": -1, "max_tokens": 2})):
            for create in (lambda **k: client.chat.completions.create(messages=MESSAGES, **k),
                           lambda **k: client.completions.create(prompt=PROMPT, **k)):
                try:
                    create(model=MODEL, **kwargs)
                    raise AssertionError(f"no error for {kwargs}")
                except openai.BadRequestError as e:
                    expect(field in e.message, f"{kwargs}: message does not name {field}: {e.message!r}")
                    expect(isinstance(e.body, dict) and field in e.body.get("message", ""), f"body {e.body}")
        try:  # a stream refused before it starts is an HTTP error too, not an SSE event
            client.completions.create(model="no-such-model", prompt=PROMPT, max_tokens=2, stream=True)
            raise AssertionError("no error for an unknown model (stream)")
        except openai.NotFoundError:
            pass

    run("errors: unknown model -> NotFoundError; max_tokens -1, temperature -1 -> BadRequestError naming the field",
        errors)

    def api_key():
        # --api-key: a wrong key is the SDK's AuthenticationError (401, OpenAI's error shape);
        # /health needs no key.
        with OpenAI(**{**CLIENT, "api_key": "not-" + API_KEY}) as wrong:
            try:
                wrong.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
                raise AssertionError("no error for a wrong API key")
            except openai.AuthenticationError as e:
                expect(e.status_code == 401, f"status {e.status_code}")
                expect(e.code == "invalid_api_key", f"code {e.code!r}")
            try:
                wrong.models.list()
                raise AssertionError("no error for a wrong API key (models)")
            except openai.AuthenticationError:
                pass
        health = urllib.request.urlopen(BASE_URL.removesuffix("/v1") + "/health")
        expect(health.status == 200, f"/health {health.status}")

    run("a wrong API key -> AuthenticationError; /health is open", api_key)

    def several_choices():
        # A high temperature: the random weights' distributions are peaked.
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, n=3, seed=7, temperature=5,
                                           extra_body=LENGTH)
        expect([c.index for c in r.choices] == [0, 1, 2], f"indices {[c.index for c in r.choices]}")
        expect(all(c.finish_reason == "length" for c in r.choices), f"finish {[c.finish_reason for c in r.choices]}")
        expect(r.usage.completion_tokens == 3 * N, f"usage {r.usage}")
        again = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, n=3, seed=7,
                                               temperature=5, extra_body=LENGTH)
        texts = [c.message.content for c in r.choices]
        expect(texts == [c.message.content for c in again.choices], "a seeded n=3 request did not repeat")
        expect(len(set(texts)) > 1, f"the choices are all the same: {texts}")
        chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, n=3, seed=7,
                                                     temperature=5, stream=True, stream_options={"include_usage": True},
                                                     extra_body=LENGTH))
        streamed = ["", "", ""]
        for ch in chunks:
            for c in ch.choices:
                streamed[c.index] += c.delta.content or ""
        expect(streamed == texts, f"streamed {streamed} != {texts}")
        expect(chunks[-1].usage.completion_tokens == 3 * N, f"usage {chunks[-1].usage}")

    run("sync chat n=3: three choices, seeded repeatably, streamed with their indices", several_choices)

    def choices_share_the_prompt():
        # Choices 1..n-1 start once choice 0 computed the prompt: they find it in the prefix cache.
        def hits():
            request = urllib.request.Request(BASE_URL.removesuffix("/v1") + "/metrics",
                                             headers={"Authorization": f"Bearer {API_KEY}"})
            text = urllib.request.urlopen(request).read().decode()
            return sum(float(line.split()[-1]) for line in text.splitlines()
                       if line.startswith("vllm:prefix_cache_hits_total"))
        prompt = " ".join(f"word{i}" for i in range(120))
        before = hits()
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, n=4, extra_body=LENGTH)
        expect(len(r.choices) == 4, f"{len(r.choices)} choices")
        gained = hits() - before
        expect(gained >= 3 * ((r.usage.prompt_tokens - 1) // 16) * 16, f"prefix cache hits grew by {gained} for a "
               f"{r.usage.prompt_tokens}-token prompt and 3 later choices")

    run("completions n=4: the later choices take the prompt from the prefix cache", choices_share_the_prompt)

    def parse_pydantic():
        # The SDK sends the model's strict JSON schema; random weights can only write what
        # the grammar allows, and every field is bounded, so the output must end and validate.
        for seed in range(4):
            r = client.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=Person, max_tokens=200,
                                              temperature=1, seed=seed)
            person = r.choices[0].message.parsed
            expect(isinstance(person, Person), f"parsed {person!r} from {r.choices[0].message.content!r}")
            expect(r.choices[0].finish_reason == "stop", f"finish {r.choices[0].finish_reason}")

    run("sync chat.completions.parse(response_format=Pydantic model): every output validates", parse_pydantic)

    def json_object():
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40,
                                           response_format={"type": "json_object"}, seed=1)
        text = r.choices[0].message.content
        if r.choices[0].finish_reason == "stop":
            expect(isinstance(json.loads(text), dict), f"not an object: {text!r}")
        else:  # random weights may still be inside a string at max_tokens
            expect(text.lstrip().startswith("{"), f"not the start of an object: {text!r}")

    run("sync response_format json_object: an object", json_object)

    def bad_schema():
        try:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, response_format={
                "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 3}}})
            raise AssertionError("no error for an unsupported keyword")
        except openai.BadRequestError as e:
            expect("minimum" in e.message, f"message does not name the keyword: {e.message!r}")

    run("response_format with an unsupported keyword -> BadRequestError naming it", bad_schema)

    def named_tool_stream():
        # A named function: the output is constrained to its arguments and streams as one call.
        for seed in range(3):
            s = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=200, seed=seed,
                                               tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                               stream=True)
            ids, names, args, finish = set(), set(), "", None
            for ch in s:
                if not ch.choices:
                    continue
                for tc in ch.choices[0].delta.tool_calls or []:
                    expect(tc.index == 0, f"index {tc.index}")
                    if tc.id:
                        ids.add(tc.id)
                    if tc.function and tc.function.name:
                        names.add(tc.function.name)
                    if tc.function and tc.function.arguments:
                        args += tc.function.arguments
                finish = ch.choices[0].finish_reason or finish
            expect(len(ids) == 1 and names == {"get_weather"}, f"ids {ids} names {names}")
            expect(finish == "tool_calls", f"finish {finish}")
            a = json.loads(args)
            expect(set(a) <= {"city", "unit"} and "city" in a and len(a["city"]) <= 8, f"arguments {a}")

    run("sync chat stream, tool_choice a named function: one streamed tool call with valid arguments",
        named_tool_stream)

    def required_tools():
        # The list of calls is unbounded: random weights may still be inside it at max_tokens
        # (then it is content, finish "length"); those that end are calls.
        calls = None
        for seed in range(6):
            r = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                               max_tokens=400, seed=seed)
            choice = r.choices[0]
            if choice.finish_reason == "length":
                expect(choice.message.content and not choice.message.tool_calls, f"cut short: {choice.message}")
                continue
            expect(choice.finish_reason == "tool_calls" and choice.message.tool_calls, f"message {choice.message}")
            # The text was the calls; it is not repeated as content (as vLLM answers).
            expect(choice.message.content is None, f"content beside the calls: {choice.message.content!r}")
            for call in choice.message.tool_calls:
                expect(call.type == "function" and call.function.name in ("get_weather", "get_time"), f"call {call}")
                json.loads(call.function.arguments)
            calls = calls or choice.message.tool_calls
        expect(calls, "no seed of 6 finished its list of calls in 400 tokens")
        # The conversation goes on with the tool's answer.
        follow = MESSAGES + [{"role": "assistant", "tool_calls": [c.model_dump() for c in calls]},
                             {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"}]
        r = client.chat.completions.create(model=MODEL, messages=follow, max_tokens=4, extra_body=LENGTH)
        check_chat(r, 4)

    run("sync chat tool_choice required: message.tool_calls, then a role tool message is accepted", required_tools)

    def auto_tools():
        # The fixture's Gemma 4 template renders the tools; random weights rarely write a call,
        # so this checks the shapes: a reply (content and/or calls) and a finish reason.
        r = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=8, seed=3)
        m = r.choices[0].message
        expect(m.content is not None or m.tool_calls, f"message {m}")
        expect(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), f"finish {r.choices[0].finish_reason}")
        chunks = list(client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=8, seed=3,
                                                     stream=True))
        expect(chunks[-1].choices[0].finish_reason == r.choices[0].finish_reason, f"last chunk {chunks[-1]}")

    run("sync chat with tools, tool_choice auto: whole and streamed", auto_tools)


async def async_checks(client, lenient):
    async def chat():
        r = await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, extra_body=LENGTH)
        check_chat(r, N)

    await arun("async chat.completions.create", chat())

    async def completion():
        r = await client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, extra_body=LENGTH)
        check_completion(r, N)

    await arun("async completions.create", completion())

    async def collect(stream):
        return [ch async for ch in await stream]

    async def chat_stream():
        chunks = await collect(client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=N, stream=True,
                                                              stream_options={"include_usage": True}, extra_body=LENGTH))
        check_stream(*fold_stream(chunks, chat=True), N)

    await arun("async chat stream with usage", chat_stream())

    async def completion_stream():
        chunks = await collect(lenient.completions.create(model=MODEL, prompt=PROMPT, max_tokens=N, stream=True,
                                                         stream_options={"include_usage": True}, extra_body=LENGTH))
        check_stream(*fold_stream(chunks, chat=False), N)

    await arun("async completions stream with usage", completion_stream())

    async def error():
        try:
            await client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=-1)
            raise AssertionError("no error for max_tokens -1")
        except openai.BadRequestError as e:
            expect("max_tokens" in e.message, f"message {e.message!r}")

    await arun("async errors are BadRequestError", error())

    async def concurrent():
        async def one(i):
            if i % 2:
                stream = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"Count {i}"}],
                                                        max_tokens=N + i, stream=True,
                                                        stream_options={"include_usage": True}, extra_body=LENGTH)
            else:
                stream = lenient.completions.create(model=MODEL, prompt=f"{PROMPT} {i}", max_tokens=N + i, stream=True,
                                                   stream_options={"include_usage": True}, extra_body=LENGTH)
            check_stream(*fold_stream(await collect(stream), chat=bool(i % 2)), N + i)

        results = await asyncio.gather(*(one(i) for i in range(16)), return_exceptions=True)
        errs = [f"stream {i}: {type(r).__name__}: {r}" for i, r in enumerate(results) if isinstance(r, BaseException)]
        expect(not errs, "; ".join(errs))

    await arun("16 concurrent async streams all complete with usage", concurrent())


CLIENT = dict(base_url=BASE_URL, api_key=API_KEY, max_retries=0, timeout=120)


async def async_main():
    async with AsyncOpenAI(**CLIENT, _strict_response_validation=True) as client, AsyncOpenAI(**CLIENT) as lenient:
        await async_checks(client, lenient)


def main():
    print(f"openai {openai.__version__} against {BASE_URL}", flush=True)
    with OpenAI(**CLIENT, _strict_response_validation=True) as client, OpenAI(**CLIENT) as lenient:
        sync_checks(client, lenient)
    asyncio.run(async_main())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
