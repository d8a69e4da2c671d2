#!/usr/bin/env python3
"""Structured-output corpus against a running `ubatch serve` (docs/STRUCTURED.md).

Usage: structured_corpus.py --base-url http://127.0.0.1:PORT [--schemas DIR] [--grammars DIR]
                            [--concurrency N] [--report FILE]

For every JSON Schema in tests/data/schemas/ it asks /v1/chat/completions twice, greedy and
sampled, with response_format json_schema (strict). An answer that ends with "stop" must parse
(json.loads) and validate (python `jsonschema`, draft 2020-12, formats checked); any other answer must end
with "length" (the model ran out of tokens mid-structure). For every GBNF grammar in
tests/data/grammars/ it asks /v1/completions with the `grammar` field, greedy and sampled;
those grammars are bounded, so every answer must end with "stop" and be accepted by an
independent checker written here (a parser per grammar, Python's csv module for CSV).

Each check prints PASS or FAIL; the last line is "N passed, N failed"; exit status 1 when any
check failed, or when fewer than --min-complete of the schema answers completed (a corpus that
never completes would prove nothing). tests/test_server_structured_corpus.cpp starts the
server and runs this script under CTest.
"""
import argparse
import concurrent.futures
import csv
import io
import json
import os
import re
import sys
import urllib.error
import urllib.request

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def post(base_url, path, body, timeout=600):
    req = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# ---- checkers for the GBNF corpus (independent of the grammars' own formulation) ----

class ParseError(Exception):
    pass


def check_arithmetic(text):
    """Recursive descent over integers, + - * /, parentheses and optional single spaces."""
    toks = re.findall(r"\s+|\d+|[-+*/()]|.", text)
    if "".join(toks) != text:
        raise ParseError("untokenizable")
    toks = [t for t in toks if not t.isspace()]
    pos = 0

    def peek():
        return toks[pos] if pos < len(toks) else None

    def eat(t=None):
        nonlocal pos
        if pos >= len(toks) or (t is not None and toks[pos] != t):
            raise ParseError(f"expected {t!r} at token {pos} of {toks}")
        pos += 1
        return toks[pos - 1]

    def factor():
        neg = peek() == "-"
        if neg:
            eat("-")
        if peek() == "(":
            if neg:
                raise ParseError("sign before a parenthesis")
            eat("(")
            v = expr()
            eat(")")
            return v
        t = eat()
        if not t.isdigit() or (len(t) > 1 and t[0] == "0"):
            raise ParseError(f"bad number {t!r}")
        return -int(t) if neg else int(t)

    def expr():
        v = factor()
        while peek() in ("+", "-", "*", "/"):
            eat()
            factor()
        return v

    expr()
    if pos != len(toks):
        raise ParseError(f"trailing tokens {toks[pos:]}")


SQL_KEYWORDS = {"SELECT", "FROM", "WHERE", "AND", "ORDER", "BY", "ASC", "DESC", "LIMIT"}


def check_sql(text):
    """SELECT cols FROM ident [WHERE cond {AND cond}] [ORDER BY ident [ASC|DESC]] [LIMIT n];"""
    toks = re.findall(r"'[^']*'|<=|>=|!=|[=<>,;*]|-?\d+|[A-Za-z_][A-Za-z0-9_]*|\s+|.", text)
    if "".join(toks) != text:
        raise ParseError("untokenizable")
    toks = [t for t in toks if not t.isspace()]
    pos = 0

    def eat(pred, what):
        nonlocal pos
        if pos >= len(toks) or not pred(toks[pos]):
            raise ParseError(f"expected {what} at {toks[pos:pos + 3]}")
        pos += 1
        return toks[pos - 1]

    ident = lambda t: re.fullmatch(r"[a-z][a-z0-9_]*", t) is not None
    kw = lambda k: (lambda t: t == k)
    eat(kw("SELECT"), "SELECT")
    if toks[pos] == "*":
        pos += 1
    else:
        eat(ident, "column")
        while toks[pos] == ",":
            pos += 1
            eat(ident, "column")
    eat(kw("FROM"), "FROM")
    eat(ident, "table")
    if pos < len(toks) and toks[pos] == "WHERE":
        pos += 1
        while True:
            eat(ident, "column")
            eat(lambda t: t in ("=", "!=", "<", "<=", ">", ">="), "comparison")
            eat(lambda t: re.fullmatch(r"-?\d+|'[A-Za-z0-9 ]*'", t) is not None, "value")
            if pos < len(toks) and toks[pos] == "AND":
                pos += 1
                continue
            break
    if pos < len(toks) and toks[pos] == "ORDER":
        pos += 1
        eat(kw("BY"), "BY")
        eat(ident, "column")
        if pos < len(toks) and toks[pos] in ("ASC", "DESC"):
            pos += 1
    if pos < len(toks) and toks[pos] == "LIMIT":
        pos += 1
        eat(lambda t: re.fullmatch(r"[1-9]\d*", t) is not None, "limit")
    eat(kw(";"), "';'")
    if pos != len(toks):
        raise ParseError(f"trailing tokens {toks[pos:]}")


def check_csv(text):
    """Two to four lines of three fields each, RFC 4180 quoting (Python's csv module, strict)."""
    if not text.endswith("\n"):
        raise ParseError("the last line is not terminated")
    rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    if not 2 <= len(rows) <= 4:
        raise ParseError(f"{len(rows)} lines")
    for r in rows:
        if len(r) != 3:
            raise ParseError(f"a line with {len(r)} fields: {r}")


GRAMMARS = {
    "arithmetic.gbnf": ("Write an arithmetic expression using numbers, + - * / and parentheses.", check_arithmetic),
    "sql.gbnf": ("Write a SQL query that selects the names of users older than 30 from the table users.", check_sql),
    "csv.gbnf": ("Write a CSV table with columns name, city, age and two people.", check_csv),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True, help="http://127.0.0.1:PORT (no /v1)")
    ap.add_argument("--schemas", default=os.path.join(DATA, "schemas"))
    ap.add_argument("--grammars", default=os.path.join(DATA, "grammars"))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=192, help="per schema answer")
    ap.add_argument("--min-complete", type=float, default=0.6, help="share of schema answers that must complete")
    ap.add_argument("--report", help="write one JSON line per answer here")
    args = ap.parse_args()
    checks = jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers
    missing = [f for f in ("date", "time", "date-time", "uuid", "email", "ipv4") if f not in checks]
    if missing:
        print(f"FAIL python jsonschema cannot check the formats {missing} (pip install rfc3339-validator)")
        return 1

    jobs = []  # (label, kind, path, body, check)
    for name in sorted(os.listdir(args.schemas)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(args.schemas, name), encoding="utf-8") as f:
            text = f.read()
        schema = json.loads(text)
        jsonschema.Draft202012Validator.check_schema(schema)  # the corpus itself must be valid
        what = schema.get("description", "the data")
        messages = [{"role": "user", "content": f"Answer with JSON only. {what}"}]
        for mode, sampling in (("greedy", {"temperature": 0}),
                               ("sampled", {"temperature": 0.8, "top_p": 0.95, "seed": sum(map(ord, name))})):
            body = {"messages": messages, "max_tokens": args.max_tokens, **sampling,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "answer", "strict": True, "schema": schema}}}
            jobs.append((f"{name} {mode}", "schema", "/v1/chat/completions", body, schema))
    for name, (prompt, checker) in sorted(GRAMMARS.items()):
        with open(os.path.join(args.grammars, name), encoding="utf-8") as f:
            gbnf = f.read()
        for mode, sampling in (("greedy", {"temperature": 0}), ("sampled-1", {"temperature": 0.9, "seed": 1}),
                               ("sampled-2", {"temperature": 0.9, "seed": 2})):
            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 400, "grammar": gbnf, **sampling}
            jobs.append((f"{name} {mode}", "gbnf", "/v1/chat/completions", body, checker))

    def run(job):
        label, kind, path, body, check = job
        status, reply = post(args.base_url, path, body)
        return job, status, reply

    passed = failed = 0
    schema_total = schema_complete = 0
    report = open(args.report, "w", encoding="utf-8") if args.report else None
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        for (label, kind, path, body, check), status, reply in pool.map(run, jobs):
            ok, why, text, finish = False, "", "", ""
            try:
                if status != 200:
                    raise AssertionError(f"HTTP {status}: {reply}")
                choice = reply["choices"][0]
                text = choice["message"]["content"]
                finish = choice["finish_reason"]
                if kind == "schema":
                    schema_total += 1
                    if finish == "stop":
                        schema_complete += 1
                        instance = json.loads(text)
                        # The draft's own format checker (FormatChecker() would check draft 3's "time").
                        validator = jsonschema.Draft202012Validator(
                            check, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
                        validator.validate(instance)
                    elif finish != "length":
                        raise AssertionError(f"finish_reason {finish!r}")
                else:
                    if finish != "stop":
                        raise AssertionError(f"finish_reason {finish!r} (the grammar is bounded: it must complete)")
                    check(text)
                ok = True
            except Exception as e:  # noqa: BLE001 — any failure is reported with the answer
                why = f"{type(e).__name__}: {e}"
            if ok:
                passed += 1
                print(f"PASS {label}: {finish}, {len(text)} chars")
            else:
                failed += 1
                print(f"FAIL {label}: {why}\n     answer ({finish}): {text!r}")
            if report:
                report.write(json.dumps({"label": label, "finish": finish, "ok": ok, "text": text}) + "\n")
    if report:
        report.close()
    share = schema_complete / schema_total if schema_total else 0.0
    print(f"schema answers: {schema_complete} of {schema_total} completed ({100 * share:.0f}%), the rest ended with length")
    if share < args.min_complete:
        failed += 1
        print(f"FAIL fewer than {100 * args.min_complete:.0f}% of the schema answers completed")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
