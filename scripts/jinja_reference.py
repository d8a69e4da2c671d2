#!/usr/bin/env python3
"""The reference chat-template renderer: Python jinja2 set up as Hugging Face transformers
sets it up for chat templates (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks,
loopcontrols and the {% generation %} tag; transformers' tojson, raise_exception,
strftime_now, namespace and dict globals), as ../shared/reference/templates/README.md
describes. A development tool: scripts/template_diff.py compares `ubatch template render`
with it. Needs `pip install jinja2` (3.1.x); not used by the build or CI.

  scripts/jinja_reference.py TEMPLATE [INPUT]
INPUT is the JSON `ubatch template render` reads (messages, tools, add_generation_prompt,
continue_final_message, bos_token, eos_token, extra_vars, date). Prints the rendering; on a
template error prints `ERROR <kind>: <message>` (kind raise_exception or runtime) to stderr and
exits 1.
"""
import copy
import datetime
import json
import sys

import jinja2
from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG"


class GenerationTag(Extension):
    """{% generation %}…{% endgeneration %}: renders its body (transformers' AssistantTracker
    only records offsets)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


class TemplateNamespace(jinja2.utils.Namespace):
    def __setitem__(self, key, value):
        if key.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"namespace attribute {key!r} starts with '_'")
        super().__setitem__(key, value)


def make_environment(date):
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return date.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now,
                       namespace=TemplateNamespace, dict=dict)
    return env


def render(source, inputs):
    """Returns ("ok", text) or (kind, message) with kind "raise_exception" or "runtime"."""
    date = datetime.datetime.strptime(inputs.get("date", datetime.date.today().isoformat()), "%Y-%m-%d")
    env = make_environment(date)
    messages = copy.deepcopy(inputs.get("messages", []))
    cont = inputs.get("continue_final_message", False)
    if cont:
        content = messages[-1].get("content") if messages and isinstance(messages[-1], dict) else None
        if isinstance(content, str):
            messages[-1]["content"] = content + CONTINUE_TAG + " "
        elif isinstance(content, list) and any(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
            part = [p for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)][-1]
            part["text"] += CONTINUE_TAG + " "
        else:
            return "runtime", "continue_final_message is set but the final message has no text to continue"
    variables = dict(messages=messages, add_generation_prompt=inputs.get("add_generation_prompt", False),
                     bos_token=inputs.get("bos_token", ""), eos_token=inputs.get("eos_token", ""))
    if inputs.get("tools") is not None:
        variables["tools"] = copy.deepcopy(inputs.get("tools"))
    variables.update(copy.deepcopy(inputs.get("extra_vars", {})))
    try:
        out = env.from_string(source).render(**variables)
    except TemplateError as e:
        if type(e) is TemplateError:
            return "raise_exception", str(e)
        return "runtime", f"{type(e).__name__}: {e}"
    except Exception as e:  # TypeError, ValueError, … raised by Python while rendering
        return "runtime", f"{type(e).__name__}: {e}"
    if cont:
        if CONTINUE_TAG + " " in out:
            out = out[: out.rindex(CONTINUE_TAG + " ")]
        elif CONTINUE_TAG in out:
            out = out[: out.rindex(CONTINUE_TAG)].rstrip()
        else:
            return "runtime", "continue_final_message is set but the final message does not appear in the output"
    return "ok", out


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8", newline="") as f:
        source = f.read()
    if len(sys.argv) == 3 and sys.argv[2] != "-":
        with open(sys.argv[2], encoding="utf-8") as f:
            inputs = json.load(f)
    else:
        inputs = json.load(sys.stdin)
    kind, text = render(source, inputs)
    if kind != "ok":
        print(f"ERROR {kind}: {text}", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
