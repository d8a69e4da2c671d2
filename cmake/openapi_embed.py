#!/usr/bin/env python3
"""docs/openapi.yaml → a C++ source defining ubatch::server::openapi_json() (src/server/openapi.h).

Run by the build (CMakeLists.txt) whenever the YAML changes. Checks what a typo would break
before it reaches a client: the document is an OpenAPI 3 object with paths, every operation
has responses, and every local $ref points at something. Needs python3-yaml.
Usage: openapi_embed.py IN.yaml OUT.cpp
"""
import json
import sys

import yaml


def fail(msg):
    sys.exit(f"openapi_embed: {sys.argv[1]}: {msg}")


def check_refs(doc, node, where):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#/"):
                fail(f"{where}: only local $ref are allowed, got {ref}")
            target = doc
            for part in ref[2:].split("/"):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    fail(f"{where}: $ref {ref} points at nothing")
                target = target[part]
        for k, v in node.items():
            check_refs(doc, v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            check_refs(doc, v, f"{where}/{i}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1], encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as e:
        fail(f"not valid YAML: {e}")
    if not isinstance(doc, dict) or not str(doc.get("openapi", "")).startswith("3."):
        fail("not an OpenAPI 3 document")
    paths = doc.get("paths")
    if not isinstance(paths, dict) or not paths:
        fail("no paths")
    for path, item in paths.items():
        for method, op in item.items():
            if not isinstance(op, dict) or not op.get("responses"):
                fail(f"{method.upper()} {path} has no responses")
    check_refs(doc, doc, "#")
    text = json.dumps(doc, ensure_ascii=True, separators=(",", ":"))
    delim = "ubatch_openapi"
    if f"){delim}\"" in text:
        fail("the document contains the raw-string delimiter")
    out = (
        "// Generated from docs/openapi.yaml by cmake/openapi_embed.py at build time; do not edit.\n"
        '#include "server/openapi.h"\n\n'
        "namespace ubatch::server {\n\n"
        "std::string_view openapi_json() {\n"
        f'  static constexpr char kJson[] = R"{delim}({text}){delim}";\n'
        "  return {kJson, sizeof(kJson) - 1};\n"
        "}\n\n"
        "}  // namespace ubatch::server\n"
    )
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(out)


if __name__ == "__main__":
    main()
