#!/usr/bin/env python3
"""Differential test of the Jinja engine against the reference renderer (a development tool;
needs `pip install jinja2`, see scripts/jinja_reference.py):

  scripts/template_diff.py [--ubatch build/ubatch] corpus DIR_OR_FILE ...
      every template (*.jinja) × every conversation of ../shared/reference/templates/cases.json
      (bos "<s>", eos "</s>", the fixed date), rendered by `ubatch template render` and by the
      reference;
  scripts/template_diff.py [--ubatch build/ubatch] random --kind expr|statements --seed N --count N
      N generated templates: expressions over operators, filters, tests, methods, literals and
      the variables of a tool conversation (expr), or nested statements with every whitespace-
      control sign, loops, macros, blocks and raw (statements).

A pair agrees when both render the same bytes, or both fail (the kind of failure is compared
for raise_exception only). Prints the disagreements (shortest first) and "A of N agree".
Printed generator/method objects (Python shows their memory address) are compared without it.
"""
import argparse
import concurrent.futures
import json
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_reference  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("UBATCH_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
CASES = os.path.join(SHARED, "reference", "templates", "cases.json")
# Objects Python prints with their memory address, as such or HTML-escaped: one-shot iterators
# (which ubatch prints as "<generator object>") and bound methods.
ADDRESS = re.compile(r"(<|&lt;)(generator object|list_reverseiterator object|reversed object|"
                     r"dict_reversekeyiterator object|built-in method)(?:(?!>|&gt;).)*(>|&gt;)")


def ours(ubatch, source_path, inputs):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(inputs, f)
        path = f.name
    try:
        p = subprocess.run([ubatch, "template", "render", source_path, path], capture_output=True)
    finally:
        os.unlink(path)
    if p.returncode == 0:
        return "ok", p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    kind = "raise_exception" if "raise_exception error" in err else "error"
    return kind, err.strip()


def normalize(text):
    return ADDRESS.sub(lambda m: m.group(1) + ("method" if m.group(2) == "built-in method" else "iterator") + m.group(3),
                       text)


def compare(ubatch, jobs):
    """jobs: (label, template path, inputs). Returns the disagreements."""
    def one(job):
        label, path, inputs = job
        with open(path, encoding="utf-8", newline="") as f:
            source = f.read()
        rk, rv = jinja_reference.render(source, inputs)
        ok, ov = ours(ubatch, path, inputs)
        if rk == "ok" and ok == "ok":
            agree = normalize(rv) == normalize(ov)
        elif rk == "raise_exception":
            agree = ok == "raise_exception" and rv in ov
        else:
            agree = rk != "ok" and ok != "ok"
        return None if agree else (label, source, rk, rv, ok, ov)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return [r for r in pool.map(one, jobs) if r]


def corpus_jobs(paths):
    cases = json.load(open(CASES, encoding="utf-8"))
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".jinja"))
        else:
            files.append(p)
    jobs = []
    for path in files:
        source = open(path, encoding="utf-8", newline="").read()
        for c in cases["cases"]:
            if c.get("only_if_uses") and c["only_if_uses"] not in source:
                continue
            inputs = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"],
                      "bos_token": "<s>", "eos_token": "</s>", "extra_vars": c.get("extra_vars", {}),
                      "continue_final_message": c.get("continue_final_message", False), "date": cases["fixed_date"]}
            if c["tools"] is not None:
                inputs["tools"] = c["tools"]
            jobs.append((f"{os.path.basename(path)} / {c['id']}", path, inputs))
    return jobs


def random_expr_template(rng, variables):
    strings = ["'a'", "'Hello World'", "\"it's\"", "'<|im_end|>'", "''", "' x '", "'a,b,,c'", "'\\n'", "'ß'",
               "'%s-%d'", "'{}:{}'", "'abc'"]
    filters = ["length", "trim", "upper", "lower", "string", "list", "first", "last", "join", "join(', ')", "tojson",
               "tojson(indent=2)", "tojson(sort_keys=true)", "tojson(separators=(',', ':'))", "tojson(ensure_ascii=true)",
               "default('D')", "default(1, true)", "items", "dictsort", "sort", "sort(reverse=true)", "unique", "reverse",
               "sum", "min", "max", "int", "float", "abs", "round", "round(1)", "capitalize", "title",
               "replace('a', 'X')", "map(attribute='role')", "map('string')", "selectattr('role', 'equalto', 'user')",
               "rejectattr('type')", "select('odd')", "reject('none')", "count", "safe", "escape", "wordcount",
               "indent(2)", "indent(2, true)", "center(9)", "batch(2)", "slice(2)", "format(1, 2)", "truncate(5)",
               "striptags", "attr('role')"]
    tests = ["defined", "undefined", "none", "string", "mapping", "iterable", "sequence", "number", "integer", "float",
             "boolean", "true", "false", "odd", "even", "divisibleby 3", "callable", "lower", "upper", "eq 3",
             "in [1, 2, 3]", "sameas none", "escaped"]
    methods = ["strip()", "lstrip()", "rstrip('! ')", "split()", "split(',')", "split(' ', 1)", "rsplit(' ', 1)",
               "upper()", "lower()", "title()", "startswith('H')", "endswith(('!', ' '))", "replace('l', 'L')",
               "replace('', '-')", "find('o')", "count('l')", "format(1, 2)", "splitlines()", "join(['x', 'y'])",
               "partition(',')", "isdigit()", "isalpha()", "items()", "keys()", "values()", "get('a')", "get('zz', 5)",
               "append(1)", "pop()", "index(1)", "copy()", "zfill(5)", "center(8, '*')", "capitalize()", "swapcase()"]
    ops = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", "<=", ">", ">=", "in", "not in", "and", "or", "**"]
    names = list(variables) + ["undef", "messages[0]", "messages[-1].content", "tools[0].function"]

    def atom(d):
        r = rng.random()
        if r < 0.15:
            return rng.choice(["0", "1", "2", "-3", "7", "2.5", "1e3", "0.1"])
        if r < 0.3:
            return rng.choice(strings)
        if r < 0.55:
            return rng.choice(names + ["none", "true", "false"])
        if r < 0.62:
            return "[" + ", ".join(expr(d + 1) for _ in range(rng.randint(0, 3))) + "]"
        if r < 0.67:
            return "{" + ", ".join(rng.choice(strings) + ": " + expr(d + 1) for _ in range(rng.randint(0, 2))) + "}"
        return "(" + expr(d + 1) + ")"

    def expr(d=0):
        if d > 3:
            return atom(d)
        r = rng.random()
        if r < 0.3:
            return atom(d)
        if r < 0.45:
            return atom(d) + "|" + rng.choice(filters)
        if r < 0.55:
            return atom(d) + " is " + rng.choice(["", "not "]) + rng.choice(tests)
        if r < 0.65:
            return atom(d) + "." + rng.choice(methods)
        if r < 0.72:  # subscripts on variables (jinja2 folds literal subscripts at compile time)
            return rng.choice(names) + "[" + rng.choice(["0", "-1", "1:", ":2", "::-1", "'role'", "1:-1"]) + "]"
        if r < 0.9:
            return expr(d + 1) + " " + rng.choice(ops) + " " + expr(d + 1)
        if r < 0.95:
            return "not " + expr(d + 1)
        return expr(d + 1) + " if " + expr(d + 1) + " else " + expr(d + 1)

    def stmt():
        e = expr()
        r = rng.random()
        if r < 0.6:
            return "{{ " + e + " }}"
        if r < 0.8:
            return "{% for x in " + e + " %}[{{ loop.index }}:{{ x }}{{ loop.last }}]{% else %}E{% endfor %}"
        if r < 0.9:
            return "{% set ns = namespace(v=" + e + ") %}{{ ns.v }}"
        return "{% if " + e + " %}Y{% else %}N{% endif %}"
    return "\n".join(stmt() for _ in range(rng.randint(1, 3)))


def random_statements_template(rng):
    ws = ["", " ", "  ", "\n", " \n", "\n  ", "\t", "\n\n", "  \n  ", "\r\n", " \t \n"]

    def tag(body, kind="%"):
        left, right = rng.choice(["", "", "-", "+"]), rng.choice(["", "", "-", "+"])
        if kind == "{":
            return "{{" + left.replace("+", "") + " " + body + " " + right.replace("+", "") + "}}"
        if kind == "#":
            return "{#" + left + " " + body + " " + right + "#}"
        return "{%" + left + " " + body + " " + right + "%}"

    def text():
        return rng.choice(ws) + rng.choice(["a", "b c", "x", "", "<|im_start|>", "z"]) + rng.choice(ws)

    def block(d):
        r = rng.random()
        if d > 3 or r < 0.25:
            return text()
        if r < 0.35:
            return tag(rng.choice(["x", "loop.index if loop is defined else 0", "'q'", "ns.v", "y"]), "{")
        if r < 0.42:
            return tag("c", "#")
        if r < 0.55:
            return (tag("if " + rng.choice(["x", "not x", "y > 1", "ns.v"])) + body(d + 1) +
                    (tag("else") + body(d + 1) if rng.random() < 0.4 else "") + tag("endif"))
        if r < 0.68:
            return (tag("for i in " + rng.choice(["[1,2]", "range(3)", "xs", "[]", "xs if i"])) + body(d + 1) +
                    (tag(rng.choice(["break", "continue"])) if rng.random() < 0.15 else "") +
                    (tag("else") + body(d + 1) if rng.random() < 0.3 else "") + tag("endfor"))
        if r < 0.74:
            return tag("set y = " + rng.choice(["1", "'s'", "x", "y ~ 1"]))
        if r < 0.8:
            return tag("set ns.v = " + rng.choice(["1", "ns.v ~ 'k'", "x"]))
        if r < 0.86:
            name = "m" + str(d)
            return tag(f"macro {name}(a, b=2)") + body(d + 1) + tag("endmacro") + tag(f"{name}(1)", "{")
        if r < 0.9:
            return tag("set blk") + body(d + 1) + tag("endset") + tag("blk|trim", "{")
        if r < 0.94:
            return tag("filter upper") + body(d + 1) + tag("endfilter")
        if r < 0.97:
            return tag("generation") + body(d + 1) + tag("endgeneration")
        return tag("raw").replace("+%}", "%}") + text() + "{{ not }}" + text() + tag("endraw")

    def body(d):
        return "".join(block(d) for _ in range(rng.randint(1, 3)))
    return "{% set ns = namespace(v=0) %}" + body(0) + ("\n" if rng.random() < 0.3 else "")


def random_jobs(kind, seed, count, workdir):
    rng = random.Random(seed)
    cases = json.load(open(CASES, encoding="utf-8"))
    extra = {"n": 3, "f": 2.5, "s": " Héllo, World! ", "e": "", "lst": [3, 1, 2], "d": {"b": 1, "a": 2},
             "nested": {"x": {"y": [1, {"z": "q"}]}}, "neg": -7, "fl": [0.1, 1e16, 1e-5, 123.0, -0.0], "uni": "ß日本😀",
             "x": True, "xs": [1, 2, 3]}
    base = {"messages": cases["cases"][5]["messages"], "tools": cases["tools"], "add_generation_prompt": True,
            "bos_token": "<s>", "eos_token": "</s>", "extra_vars": extra, "date": cases["fixed_date"]}
    jobs = []
    for i in range(count):
        source = random_expr_template(rng, extra) if kind == "expr" else random_statements_template(rng)
        path = os.path.join(workdir, f"t{i}.jinja")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(source)
        jobs.append((f"#{i}", path, base))
    return jobs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ubatch", default=os.path.join(ROOT, "build", "ubatch"))
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("paths", nargs="+")
    r = sub.add_parser("random")
    r.add_argument("--kind", choices=["expr", "statements"], default="expr")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--count", type=int, default=1000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        jobs = corpus_jobs(args.paths) if args.mode == "corpus" else random_jobs(args.kind, args.seed, args.count, workdir)
        bad = compare(args.ubatch, jobs)
    bad.sort(key=lambda b: len(b[1]))
    for label, source, rk, rv, ok, ov in bad[:20]:
        print(f"DISAGREE {label}\n  template: {source!r}\n  reference: {rk} {rv!r:.300}\n  ubatch:    {ok} {ov!r:.300}")
    print(f"{len(jobs) - len(bad)} of {len(jobs)} agree")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
