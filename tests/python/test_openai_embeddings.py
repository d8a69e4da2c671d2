#!/usr/bin/env python3
"""Drives a running `ubatch serve` with the official OpenAI Python client's embeddings.create.

Usage: test_openai_embeddings.py --base-url http://127.0.0.1:PORT/v1 [--api-key KEY]

Each check prints PASS or FAIL with the reason; the last line is "N passed, N failed" and the
exit status is 1 when any check failed. tests/test_server_embeddings.cpp starts the server and
runs this script under CTest.
"""
import argparse
import math
import sys
import traceback

import openai


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="unused")
    args = ap.parse_args()
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0, timeout=300)
    model = client.models.list().data[0].id

    def one_string():
        r = client.embeddings.create(model=model, input="The capital of France is Paris.")
        check(r.object == "list", r.object)
        check(len(r.data) == 1 and r.data[0].object == "embedding" and r.data[0].index == 0, r.data)
        check(len(r.data[0].embedding) > 0, "empty vector")
        check(abs(norm(r.data[0].embedding) - 1.0) < 1e-4, f"norm {norm(r.data[0].embedding)}")
        check(r.usage.prompt_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens, r.usage)
        check(r.model == model, r.model)

    def several_strings_in_order():
        texts = ["first text", "second text", "third text"]
        r = client.embeddings.create(model=model, input=texts)
        check([d.index for d in r.data] == [0, 1, 2], [d.index for d in r.data])
        alone = client.embeddings.create(model=model, input=texts[1]).data[0].embedding
        check(r.data[1].embedding == alone, "a text's vector changed with the other inputs")

    def float_equals_base64():
        # The client asks for base64 by default and decodes it; float is the plain JSON array.
        default = client.embeddings.create(model=model, input="hello world").data[0].embedding
        as_float = client.embeddings.create(model=model, input="hello world", encoding_format="float").data[0].embedding
        check(default == as_float, "base64 and float differ")

    def dimensions():
        r = client.embeddings.create(model=model, input="hello world", dimensions=8)
        check(len(r.data[0].embedding) == 8, len(r.data[0].embedding))
        check(abs(norm(r.data[0].embedding) - 1.0) < 1e-4, norm(r.data[0].embedding))

    def empty_input_is_400():
        try:
            client.embeddings.create(model=model, input="")
        except openai.BadRequestError as e:
            check(e.status_code == 400, e.status_code)
            return
        raise AssertionError("no error for an empty input")

    checks = [one_string, several_strings_in_order, float_equals_base64, dimensions, empty_input_is_400]
    passed = failed = 0
    for c in checks:
        try:
            c()
            print(f"PASS {c.__name__}")
            passed += 1
        except Exception:  # noqa: BLE001 - report every failure
            print(f"FAIL {c.__name__}\n{traceback.format_exc()}")
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
