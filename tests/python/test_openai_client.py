#!/usr/bin/env python3
"""Drives a running `ubatch serve` with the official OpenAI Python client (pip `openai`).

Usage: test_openai_client.py --base-url http://127.0.0.1:PORT/v1 [--api-key KEY]

Each check prints PASS or FAIL with the reason; the last line is "N passed, N failed" and
the exit status is 1 when any check failed. tests/test_server_openai_python.cpp starts the
server and runs this script under CTest.
"""
import argparse
import sys
import traceback

import openai


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="unused")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=300)
    model = client.models.list().data[0].id
    chat_messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name a colour."},
    ]

    def models_list():
        models = client.models.list()
        check(len(models.data) == 1, f"one model expected, got {models.data}")
        check(models.data[0].object == "model", "object is not 'model'")
        one = client.models.retrieve(model)  # GET /v1/models/{id}
        check(one.id == model and one.object == "model", one)
        try:
            client.models.retrieve("no-such-model")
        except openai.NotFoundError as e:
            check(e.status_code == 404 and e.body["code"] == "model_not_found", e.body)
        else:
            raise AssertionError("an unknown model id was found")

    def completion_non_streaming():
        r = client.completions.create(model=model, prompt="The capital of France is", max_tokens=8, temperature=0)
        check(r.object == "text_completion", r.object)
        check(isinstance(r.choices[0].text, str) and r.choices[0].text, "empty text")
        check(r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason)
        check(r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0, r.usage)
        check(r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)

    def completion_streaming_equals_non_streaming():
        kw = dict(model=model, prompt="Once upon a time", max_tokens=12, temperature=0)
        whole = client.completions.create(**kw).choices[0].text
        pieces = [c.choices[0].text for c in client.completions.create(stream=True, **kw) if c.choices]
        check(len(pieces) > 1, f"expected several chunks, got {pieces}")
        check("".join(pieces) == whole, f"stream {''.join(pieces)!r} != {whole!r}")

    def chat_non_streaming():
        r = client.chat.completions.create(model=model, messages=chat_messages, max_tokens=10, temperature=0)
        check(r.object == "chat.completion", r.object)
        check(r.choices[0].message.role == "assistant", r.choices[0].message.role)
        check(isinstance(r.choices[0].message.content, str), "content is not a string")
        check(r.usage.prompt_tokens > 5, r.usage)

    def chat_streaming_with_usage():
        kw = dict(model=model, messages=chat_messages, max_tokens=10, temperature=0)
        whole = client.chat.completions.create(**kw)
        text, usage, finish = "", None, None
        for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                finish = c.finish_reason or finish
        check(text == whole.choices[0].message.content, f"{text!r} != {whole.choices[0].message.content!r}")
        check(usage is not None and usage.completion_tokens == whole.usage.completion_tokens, usage)
        check(finish == whole.choices[0].finish_reason, finish)

    def chat_n_and_logprobs():
        r = client.chat.completions.create(model=model, messages=chat_messages, max_tokens=4, temperature=0.8,
                                           seed=3, n=2, logprobs=True, top_logprobs=2)
        check(len(r.choices) == 2, f"{len(r.choices)} choices")
        for c in r.choices:
            check(c.logprobs is not None and len(c.logprobs.content) >= 1, c.logprobs)
            check(len(c.logprobs.content[0].top_logprobs) == 2, c.logprobs.content[0])

    def extensions_in_extra_body():
        r = client.completions.create(model=model, prompt="Hi", max_tokens=3, temperature=0,
                                      extra_body={"priority": 5, "deadline_ms": 60000, "top_k": 0, "min_p": 0.1})
        check(r.usage.completion_tokens <= 3, r.usage)

    def bad_request_is_400():
        try:
            client.completions.create(model=model, prompt="Hi", max_tokens=0)
        except openai.BadRequestError as e:
            check(e.status_code == 400, e.status_code)
            check(e.body and e.body.get("code") == "invalid_value", e.body)
            return
        raise AssertionError("max_tokens=0 was accepted")

    def context_overflow_is_400():
        try:
            client.completions.create(model=model, prompt="Hi", max_tokens=10**9)
        except openai.BadRequestError:
            return
        raise AssertionError("max_tokens=1e9 was accepted")

    def wrong_key_is_401():
        if args.api_key == "unused":
            return
        bad = openai.OpenAI(base_url=args.base_url, api_key="wrong-" + args.api_key, max_retries=0)
        try:
            bad.models.list()
        except openai.AuthenticationError as e:
            check(e.status_code == 401, e.status_code)
            return
        raise AssertionError("a wrong API key was accepted")

    checks = [models_list, completion_non_streaming, completion_streaming_equals_non_streaming, chat_non_streaming,
              chat_streaming_with_usage, chat_n_and_logprobs, extensions_in_extra_body, bad_request_is_400,
              context_overflow_is_400, wrong_key_is_401]
    passed = failed = 0
    for fn in checks:
        try:
            fn()
            print(f"PASS {fn.__name__}")
            passed += 1
        except Exception:  # noqa: BLE001 — report every failure, keep going
            print(f"FAIL {fn.__name__}")
            traceback.print_exc(file=sys.stdout)
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
