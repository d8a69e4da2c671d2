#!/usr/bin/env python3
"""The agents' APIs through the official Python clients against a running `ubatch serve`.

Usage: test_agents_clients.py --base-url http://127.0.0.1:PORT [--api-key KEY]

OpenAI Responses (`openai` package, client.responses): plain, streamed (the event types in
order and the final response), a tool round trip (function_call, then function_call_output),
structured output through text.format. Anthropic Messages (`anthropic` package,
client.messages): plain, streamed (text_stream and the final message), a tool round trip
(tool_use, then tool_result), count_tokens equal to usage.input_tokens, an error's type.
A client whose package is missing is skipped (a "SKIP" line). Each check prints PASS or FAIL;
the last line is "N passed, N failed, N skipped".
tests/test_server_agents_python.cpp starts the server and runs this script under CTest.
"""
import argparse
import json
import sys
import traceback

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}},
    "required": ["city"],
    "additionalProperties": False,
}
# Greedy sampling (the anthropic client has no temperature parameter in every version).
GREEDY = {"temperature": 0}
QUESTION = "What is the weather in Paris?"


def openai_checks(base_url, key):
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key=key)

    def plain():
        r = client.responses.create(model="any", input="Why is the sky blue?", max_output_tokens=8, temperature=0)
        assert r.object == "response" and r.id.startswith("resp_"), r
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
        assert r.output_text, r
        assert r.usage.output_tokens == 8 and r.usage.total_tokens == r.usage.input_tokens + 8, r.usage
        return r.output_text

    def streamed(whole):
        types, deltas, final = [], "", None
        with client.responses.stream(model="any", input="Why is the sky blue?", max_output_tokens=8,
                                     temperature=0) as stream:
            for ev in stream:
                if not types or types[-1] != ev.type:
                    types.append(ev.type)
                if ev.type == "response.output_text.delta":
                    deltas += ev.delta
                if ev.type == "response.incomplete":  # cut by max_output_tokens (the helper's
                    final = ev.response               # get_final_response wants response.completed)
        want = ["response.created", "response.in_progress", "response.output_item.added",
                "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                "response.content_part.done", "response.output_item.done", "response.incomplete"]
        assert types == want, types
        assert deltas == whole == final.output_text, (deltas, whole, final.output_text)

    def tools():
        tool = {"type": "function", "name": "get_weather", "description": "Get the weather for a city.",
                "parameters": WEATHER_SCHEMA, "strict": True}
        r = client.responses.create(model="any", input=QUESTION, tools=[tool], tool_choice="required",
                                    parallel_tool_calls=False, max_output_tokens=48, temperature=0)
        calls = [o for o in r.output if o.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather", r.output
        args = json.loads(calls[0].arguments)
        assert isinstance(args.get("city"), str), args
        # Streamed: the same call through the function-call events.
        args_streamed = ""
        with client.responses.stream(model="any", input=QUESTION, tools=[tool], tool_choice="required",
                                     parallel_tool_calls=False, max_output_tokens=48, temperature=0) as stream:
            for ev in stream:
                if ev.type == "response.function_call_arguments.delta":
                    args_streamed += ev.delta
        assert json.loads(args_streamed) == args, args_streamed
        # The round trip: the call and its output back as input items.
        follow = [{"role": "user", "content": QUESTION}, calls[0].model_dump(exclude_none=True),
                  {"type": "function_call_output", "call_id": calls[0].call_id, "output": "22 C and sunny"}]
        r2 = client.responses.create(model="any", input=follow, tools=[tool], max_output_tokens=8, temperature=0)
        assert r2.usage.input_tokens > r.usage.input_tokens, r2.usage
        # A call_id no call has: a 400.
        try:
            client.responses.create(model="any", input=follow[2:], max_output_tokens=4)
            raise AssertionError("no error")
        except openai.BadRequestError as e:
            assert "function_call" in str(e), e

    def text_format():
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                   "age": {"type": "integer"}},
                  "required": ["name", "age"], "additionalProperties": False}
        r = client.responses.create(model="any", input="Describe a person as JSON.", max_output_tokens=200,
                                    temperature=0,
                                    text={"format": {"type": "json_schema", "name": "person", "schema": schema,
                                                     "strict": True}})
        out = json.loads(r.output_text)
        assert isinstance(out["name"], str) and isinstance(out["age"], int), out

    def checks():
        whole = {}
        yield "responses plain", lambda: whole.setdefault("text", plain())
        yield "responses streamed", lambda: streamed(whole["text"])
        yield "responses tools round trip", tools
        yield "responses text.format json_schema", text_format

    return checks()


def anthropic_checks(base_url, key):
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key=key)
    ask = [{"role": "user", "content": "Why is the sky blue?"}]
    tool = {"name": "get_weather", "description": "Get the weather for a city.", "input_schema": WEATHER_SCHEMA}

    def plain():
        m = client.messages.create(model="any", max_tokens=8, extra_body=GREEDY, messages=ask, system="Be brief.")
        assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_"), m
        assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 8, m
        assert m.content[0].type == "text" and m.content[0].text, m
        return m

    def streamed(m):
        text = ""
        with client.messages.stream(model="any", max_tokens=8, extra_body=GREEDY, messages=ask, system="Be brief.") as s:
            for piece in s.text_stream:
                text += piece
            final = s.get_final_message()
        assert text == m.content[0].text == final.content[0].text, (text, m.content[0].text)
        assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 8, final

    def count(m):
        c = client.messages.count_tokens(model="any", messages=ask, system="Be brief.")
        assert c.input_tokens == m.usage.input_tokens, (c, m.usage)

    def tools():
        q = [{"role": "user", "content": QUESTION}]
        m = client.messages.create(model="any", max_tokens=48, extra_body=GREEDY, messages=q, tools=[tool],
                                   tool_choice={"type": "any", "disable_parallel_tool_use": True})
        assert m.stop_reason == "tool_use", m
        uses = [b for b in m.content if b.type == "tool_use"]
        assert len(uses) == 1 and uses[0].name == "get_weather" and isinstance(uses[0].input["city"], str), m
        with client.messages.stream(model="any", max_tokens=48, extra_body=GREEDY, messages=q, tools=[tool],
                                    tool_choice={"type": "any", "disable_parallel_tool_use": True}) as s:
            final = s.get_final_message()
        su = [b for b in final.content if b.type == "tool_use"]
        assert len(su) == 1 and su[0].input == uses[0].input and final.stop_reason == "tool_use", final
        follow = q + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                    "content": "22 C and sunny"}]}]
        m2 = client.messages.create(model="any", max_tokens=8, extra_body=GREEDY, messages=follow, tools=[tool])
        assert m2.usage.input_tokens > m.usage.input_tokens, m2.usage
        c = client.messages.count_tokens(model="any", messages=follow, tools=[tool])
        assert c.input_tokens == m2.usage.input_tokens, (c, m2.usage)

    def error():
        try:
            client.messages.create(model="any", max_tokens=8, messages=[
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "x"}]}])
            raise AssertionError("no error")
        except anthropic.BadRequestError as e:
            assert e.body["error"]["type"] == "invalid_request_error", e.body
            assert "tool_use" in e.body["error"]["message"], e.body

    def checks():
        got = {}
        yield "messages plain", lambda: got.setdefault("m", plain())
        yield "messages streamed", lambda: streamed(got["m"])
        yield "messages count_tokens", lambda: count(got["m"])
        yield "messages tools round trip", tools
        yield "messages error shape", error

    return checks()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="none")
    a = ap.parse_args()
    passed = failed = skipped = 0
    for package, suite in (("openai", openai_checks), ("anthropic", anthropic_checks)):
        try:
            __import__(package)
        except ImportError:
            print(f"SKIP {package}: the Python package is not installed (scripts/setup.sh installs it)")
            skipped += 1
            continue
        for name, fn in suite(a.base_url, a.api_key):
            try:
                fn()
                print(f"PASS {name}")
                passed += 1
            except Exception:  # noqa: BLE001 - every failure is reported
                print(f"FAIL {name}\n{traceback.format_exc()}")
                failed += 1
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
