#!/usr/bin/env python3
"""Soak test of `ubatch serve`: many concurrent clients, random valid requests, clients that
disconnect mid-stream, malformed requests — then checks the server survived them all.

Usage (the documented run, docs/SOAK.md; the CI run is `--requests 500` with a small cache):
  tests/python/soak.py --binary build/ubatch --model models/gemma-3-270m-q4_k_m.gguf \
      --requests 10000 --concurrency 32 --max-tokens 16 [--json-out soak.json] [-- SERVER ARGS]
  tests/python/soak.py --url http://127.0.0.1:8080 [--pid PID] ...   # a server already running

The script starts `BINARY serve -m MODEL --port 0 SERVER ARGS` (or attaches to --url), waits for
/health, then:
  1. warm-up: fills the whole KV cache once with prompts of random token ids (max_tokens 1), so
     every KV page is resident (the cache is zero-filled lazily, and its blocks stay cached for
     prefix reuse), then --grammar-warmup requests with distinct JSON schemas (the server's
     bounded cache of compiled grammars filled), then a round of ordinary requests; resident memory (VmRSS from
     /proc/PID/status) and the KV gauges of /metrics are read as the baseline;
  2. the soak: --requests jobs over --concurrency client tasks (asyncio, raw sockets, HTTP/1.1
     keep-alive reused at random). About --malformed-share of the jobs send a malformed request
     (bad JSON, wrong types, out-of-range values, oversize prompt or body, bad UTF-8, bad HTTP),
     about --disconnect-share disconnect (mid-stream with FIN or RST, before the response,
     half-closed), the rest are valid: /v1/completions and /v1/chat/completions with random
     n, max_tokens, stream, sampling, stop, logprobs, logit_bias, priority and deadlines (plus a
     few /tokenize, /detokenize, /v1/models, /health, /metrics);
  3. the checks, printed as a table (exit status 1 when one fails):
     - the server process is alive throughout (polled every second) and at the end, and
       /health answers 200 throughout (every 2 s, with its worst latency reported);
     - every valid request got a well-formed answer: 200 with a body that matches the API
       (docs/API.md: object, choices 0..n-1, finish reasons, usage arithmetic, logprobs), or a
       stream of JSON frames ending in [DONE] with one final chunk per choice; or a documented
       refusal (503 queue_full; 503/504 for a strict deadline);
     - every malformed request got a 4xx with a JSON error body (the documented status and
       `code` where the request is well-formed HTTP), never a 5xx, never a hang (per-request
       timeout --timeout);
     - after the run and a settle time: no request running or queued, no stream open, KV blocks
       used back to the baseline (0: what is left is the prefix cache), the engine's
       submitted == finished counters;
     - resident memory after the run minus after the warm-up <= --rss-bound-mib.
Exit status: 0 all checks passed, 1 a check failed, 77 skipped (binary or model missing).
Standard library only.
"""
import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict

SKIP = 77
# A kept-alive connection idle longer than this is not reused: the server's --keep-alive (5 s by
# default) may be closing it, and a request racing that close is lost by no one's fault. Reuse
# within it must work: a reused connection closed with no answer is resent once on a new one and
# counted, and the keep-alive check fails when that happened.
KEEP_ALIVE_REUSE_S = 2.0

WORDS = ("the a of and to in is was for on with as by at from his her their it this that be have had not are "
         "were one all when there can more time people about city river music house light water story night "
         "market garden winter summer mountain teacher doctor engine window paper bridge station forest "
         "ocean island village letter friend family morning evening road school table kitchen history "
         "science language number colour animal bird horse apple bread coffee train car ship storm cloud "
         "quiet bright old new small large early late happy careful simple strange ancient modern "
         "walked found built wrote opened carried watched remembered discovered explained").split()
STOPS = [".", "\n", ",", " the", " and", "!", "?", "\n\n", " a", "is"]
PREAMBLES = [
    "You are a concise assistant. Answer in one short sentence and do not repeat the question. "
    "If you do not know, say so plainly. Keep numbers exact and names spelled as given.",
    "The following is an excerpt from a travel guide about small towns along the northern coast, "
    "their markets, their harbours, and the old stone bridges that connect the islands.",
    "Summarise the passage below for a reader in a hurry, keeping every date and every name.",
]
CHAT_SYSTEM = ["You are a helpful assistant.", "Answer briefly.", PREAMBLES[0]]


# ----------------------------------------------------------------------------- HTTP/1.1 client

class ProtocolError(Exception):
    """The server sent bytes that are not valid HTTP/1.1 framing."""


class ConnectionLost(Exception):
    """The connection closed (or was reset) before a whole response arrived."""

    def __init__(self, message, got_bytes):
        super().__init__(message)
        self.got_bytes = got_bytes


class Response:
    def __init__(self, version, status, reason, headers):
        self.version, self.status, self.reason, self.headers = version, status, reason, headers

    def header(self, name, default=""):
        return self.headers.get(name.lower(), default)

    def keep_alive(self):
        conn = self.header("connection").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


class Conn:
    """One TCP connection speaking HTTP/1.1 over asyncio streams."""

    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.requests = 0  # requests sent on it (>0: a kept-alive connection)
        self.idle_since = time.monotonic()

    @classmethod
    async def open(cls, host, port):
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    def close(self, reset=False):
        sock = self.writer.get_extra_info("socket")
        if reset and sock is not None:
            try:  # SO_LINGER 0: close() sends RST instead of FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        try:
            if reset:
                self.writer.transport.abort()
            else:
                self.writer.close()
        except Exception:
            pass

    async def send(self, data):
        self.requests += 1
        self.writer.write(data)
        await self.writer.drain()

    async def _readline(self, got):
        try:
            line = await self.reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError as e:
            raise ConnectionLost(f"closed mid-line ({len(e.partial)} bytes)", got or bool(e.partial))
        except asyncio.LimitOverrunError:
            raise ProtocolError("a line longer than 4 MiB")
        except (ConnectionResetError, BrokenPipeError) as e:
            raise ConnectionLost(f"reset: {e}", got)
        return line[:-2]

    async def read_head(self):
        """Status line and headers (1xx interim responses skipped)."""
        got = False
        while True:
            line = await self._readline(got)
            got = True
            m = re.fullmatch(rb"(HTTP/1\.[01]) (\d{3})(?: (.*))?", line)
            if not m:
                raise ProtocolError(f"bad status line {line[:80]!r}")
            headers = {}
            while True:
                h = await self._readline(True)
                if not h:
                    break
                name, sep, value = h.partition(b":")
                if not sep or not name or name != name.strip():
                    raise ProtocolError(f"bad header line {h[:80]!r}")
                key = name.decode("latin-1").lower()
                value = value.strip().decode("latin-1")
                headers[key] = headers[key] + ", " + value if key in headers else value
            status = int(m.group(2))
            if 100 <= status < 200:
                continue
            return Response(m.group(1).decode(), status, (m.group(3) or b"").decode("latin-1"), headers)

    async def body_pieces(self, resp, method="GET"):
        """Yields the body as it arrives: chunked, Content-Length or until close."""
        if method == "HEAD" or resp.status in (204, 304):
            return
        te = resp.header("transfer-encoding").lower()
        try:
            if te:
                if te.split(",")[-1].strip() != "chunked":
                    raise ProtocolError(f"unsupported Transfer-Encoding {te!r}")
                while True:
                    size_line = await self._readline(True)
                    try:
                        size = int(size_line.split(b";")[0].strip(), 16)
                    except ValueError:
                        raise ProtocolError(f"bad chunk size {size_line[:40]!r}")
                    if size == 0:
                        while await self._readline(True):  # trailers
                            pass
                        return
                    data = await self.reader.readexactly(size)
                    if await self.reader.readexactly(2) != b"\r\n":
                        raise ProtocolError("chunk not followed by CRLF")
                    yield data
            elif "content-length" in resp.headers:
                try:
                    left = int(resp.header("content-length"))
                except ValueError:
                    raise ProtocolError(f"bad Content-Length {resp.header('content-length')!r}")
                while left > 0:
                    data = await self.reader.read(min(left, 1 << 16))
                    if not data:
                        raise ConnectionLost(f"closed with {left} body bytes missing", True)
                    left -= len(data)
                    yield data
            else:
                resp.until_close = True
                while True:
                    data = await self.reader.read(1 << 16)
                    if not data:
                        return
                    yield data
        except asyncio.IncompleteReadError as e:
            raise ConnectionLost(f"closed mid-body ({len(e.partial)} bytes of a chunk)", True)
        except (ConnectionResetError, BrokenPipeError) as e:
            raise ConnectionLost(f"reset mid-body: {e}", True)

    async def read_body(self, resp, method="GET", limit=64 << 20):
        out = bytearray()
        async for piece in self.body_pieces(resp, method):
            out += piece
            if len(out) > limit:
                raise ProtocolError("body over 64 MiB")
        return bytes(out)


def http_request(method, path, body=None, keep_alive=True, extra_headers=(), content_type="application/json"):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if body is not None:
        lines.append(f"Content-Type: {content_type}")
        lines.append(f"Content-Length: {len(body)}")
    lines.extend(extra_headers)
    if not keep_alive:
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    return head + (body or b"")


class SseParser:
    """Splits a text/event-stream body into the data of its events."""

    def __init__(self):
        self.buf = b""

    def feed(self, data):
        self.buf += data.replace(b"\r\n", b"\n")
        events = []
        while b"\n\n" in self.buf:
            raw, self.buf = self.buf.split(b"\n\n", 1)
            data_lines = []
            for line in raw.split(b"\n"):
                if line.startswith(b":"):
                    continue
                if line.startswith(b"data:"):
                    data_lines.append(line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:])
                else:
                    raise ProtocolError(f"SSE line without data: {line[:60]!r}")
            if data_lines:
                events.append(b"\n".join(data_lines))
        return events


# ----------------------------------------------------------------------------- request generators

class Ctx:
    """What the generators need to know of the server."""

    def __init__(self, model_id, n_vocab, n_ctx, max_tokens, max_body):
        self.model_id, self.n_vocab, self.n_ctx = model_id, n_vocab, n_ctx
        self.max_tokens, self.max_body = max_tokens, max_body


def words(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def random_ids(rng, ctx, lo, hi):
    return [rng.randrange(3, ctx.n_vocab) for _ in range(rng.randint(lo, hi))]


def completion_prompt(rng, ctx):
    text = words(rng, 3, 40)
    if rng.random() < 0.5:
        text = rng.choice(PREAMBLES) + "\n\n" + text  # shared prefixes: prefix-cache hits
    shape = rng.random()
    if shape < 0.7:
        return text
    if shape < 0.8:
        return [text]
    if shape < 0.9:
        return random_ids(rng, ctx, 1, 60)
    return [random_ids(rng, ctx, 1, 60)]


def chat_messages(rng):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": rng.choice(["system", "system", "developer"]), "content": rng.choice(CHAT_SYSTEM)})
    for _ in range(rng.randint(0, 2)):
        msgs.append({"role": "user", "content": words(rng, 2, 20)})
        msgs.append({"role": "assistant", "content": words(rng, 2, 20)})
    content = words(rng, 2, 30)
    if rng.random() < 0.15:
        half = len(content) // 2
        content = [{"type": "text", "text": content[:half]}, {"type": "text", "text": content[half:]}]
    msgs.append({"role": "user", "content": content})
    if rng.random() < 0.1:
        msgs[-1]["name"] = "soak"  # unknown fields are ignored
    return msgs


def valid_completion(rng, ctx, chat, stream=None, max_tokens=None):
    """A valid request body and what its answer must look like."""
    body = {}
    if chat:
        body["messages"] = chat_messages(rng)
    else:
        body["prompt"] = completion_prompt(rng, ctx)
    r = rng.random()
    if r < 0.5:
        body["model"] = ctx.model_id
    elif r < 0.6:
        body["model"] = "gpt-4o-mini"  # informational
    n = rng.randint(1, 3)
    if n > 1 or rng.random() < 0.3:
        body["n"] = n
    mt = max_tokens if max_tokens is not None else rng.randint(1, ctx.max_tokens)
    if not chat and max_tokens is None and rng.random() < 0.05:
        mt = 16  # the documented default of /v1/completions
    else:
        body["max_completion_tokens" if rng.random() < 0.2 else "max_tokens"] = mt
    stream = rng.random() < 0.5 if stream is None else stream
    if stream or rng.random() < 0.1:
        body["stream"] = stream
    include_usage = False
    if stream and rng.random() < 0.5:
        include_usage = rng.random() < 0.8
        body["stream_options"] = {"include_usage": include_usage}
    r = rng.random()
    if r < 0.25:
        body["temperature"] = 0
    elif r < 0.75:
        body["temperature"] = round(rng.uniform(0.0, 1.5), 3)
    if rng.random() < 0.3:
        body["top_p"] = round(rng.uniform(0.1, 1.0), 3)
    if rng.random() < 0.3:
        body["top_k"] = rng.randint(0, 100)
    if rng.random() < 0.3:
        body["min_p"] = round(rng.uniform(0.0, 0.3), 3)
    if rng.random() < 0.1:
        body["repeat_penalty"] = round(rng.uniform(1.0, 1.5), 3)
        body["repeat_last_n"] = rng.randint(-1, 128)
    if rng.random() < 0.1:
        body["presence_penalty"] = round(rng.uniform(-1, 1), 3)
        body["frequency_penalty"] = round(rng.uniform(-1, 1), 3)
    if rng.random() < 0.5:
        body["seed"] = rng.randint(0, 2**31)
    if rng.random() < 0.3:
        body["stop"] = rng.choice(STOPS) if rng.random() < 0.5 else rng.sample(STOPS, rng.randint(1, 3))
    top_logprobs = None
    if rng.random() < 0.15:
        if chat:
            body["logprobs"] = True
            top_logprobs = 0
            if rng.random() < 0.5:
                top_logprobs = rng.randint(0, 5)
                body["top_logprobs"] = top_logprobs
        else:
            body["logprobs"] = rng.choice([True, 0, 1, 2, 5])
            top_logprobs = 0 if body["logprobs"] is True else body["logprobs"]
    elif rng.random() < 0.05:
        body["logprobs"] = False
    if rng.random() < 0.1:
        body["logit_bias"] = {str(rng.randrange(ctx.n_vocab)): round(rng.uniform(-5, 5), 2)
                              for _ in range(rng.randint(1, 3))}
    if rng.random() < 0.2:
        body["priority"] = rng.randint(-5, 5)
    strict = False
    if rng.random() < 0.1:
        body["deadline_ms"] = rng.randint(500, 60000)
        r = rng.random()
        if r < 0.5:
            body["deadline_policy"] = "best_effort"
        else:
            strict = True
            if r < 0.75:
                body["deadline_policy"] = "strict"
    if rng.random() < 0.1:
        body["ignore_eos"] = True
    if rng.random() < 0.1:
        body["user"] = "soak"
    constraint = None
    if rng.random() < 0.06:
        constraint = structured_output(rng, body)
    path = ("/v1/chat/completions" if chat else "/v1/completions") if rng.random() < 0.9 else \
        ("/chat/completions" if chat else "/completions")
    expect = dict(kind="chat" if chat else "completions", stream=stream, n=n, max_tokens=mt,
                  include_usage=include_usage, top_logprobs=top_logprobs, strict_deadline=strict,
                  constraint=constraint)
    return path, body, expect


def structured_output(rng, body):
    """Adds a constraint (docs/API.md, Structured output) to a request body; returns how a
    choice that ends with "stop" must read: ("json", required keys) or ("regex", pattern).
    Schemas use random property names, so the server's grammar cache meets many of them."""
    body.pop("stop", None)  # a stop string would cut the text short of the grammar
    r = rng.random()
    if r < 0.3:
        body["response_format"] = {"type": "json_object"}
        return ("json", [])
    if r < 0.7:
        names = rng.sample(WORDS[-60:], rng.randint(1, 3))
        types = {"string": {"type": "string", "maxLength": 12}, "integer": {"type": "integer", "minimum": 0},
                 "boolean": {"type": "boolean"}}
        schema = {"type": "object", "properties": {k: types[rng.choice(list(types))] for k in names},
                  "required": names, "additionalProperties": False}
        if rng.random() < 0.5:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "soak", "strict": True, "schema": schema}}
        else:
            body["json_schema"] = schema
        return ("json", names)
    body["grammar"] = 'root ::= " "? ("yes" | "no" | [0-9]{1,3}) "."'
    return ("regex", r" ?(yes|no|[0-9]{1,3})\.")


def check_constraint(text, finish, exp):
    """A constrained choice that stopped is a sentence of its grammar."""
    c = exp.get("constraint")
    if c is None or finish != "stop":
        return
    if c[0] == "regex":
        need(re.fullmatch(c[1], text) is not None, f"grammar output {text!r}")
        return
    try:
        doc = json.loads(text)
    except ValueError:
        raise Bad(f"constrained output is not JSON: {text[:120]!r}")
    need(isinstance(doc, dict), f"constrained output is not an object: {text[:120]!r}")
    need(all(k in doc for k in c[1]), f"constrained output lacks {c[1]}: {text[:120]!r}")


def valid_misc(rng, ctx):
    r = rng.random()
    if r < 0.3:
        body = {"content": words(rng, 1, 30)}
        for key in ("add_special", "parse_special", "with_pieces"):
            if rng.random() < 0.3:
                body[key] = rng.random() < 0.5
        return "POST", "/tokenize", body, dict(kind="tokenize", with_pieces=body.get("with_pieces", False))
    if r < 0.55:
        return "POST", "/detokenize", {"tokens": random_ids(rng, ctx, 0, 40)}, dict(kind="detokenize")
    if r < 0.75:
        return "GET", rng.choice(["/v1/models", "/models"]), None, dict(kind="models")
    if r < 0.9:
        return "GET", rng.choice(["/health", "/v1/health"]), None, dict(kind="health")
    return "GET", "/metrics", None, dict(kind="metrics")


# The malformed kinds in rotation, as points of the bands of malformed() below (21 slots weighted
# about like the bands): the n-th malformed job of a run takes slot n % 21, so every kind comes up
# in every 21 malformed requests (a short CI run covers them all); variants within a kind are random.
MALFORMED_SLOTS = [0.02, 0.07, 0.12, 0.17, 0.22, 0.27, 0.32, 0.37, 0.42, 0.47, 0.52, 0.6, 0.65, 0.7, 0.72, 0.75,
                   0.78, 0.8, 0.85, 0.9, 0.95]


# Malformed requests: (kind, raw request bytes, allowed statuses, expected error code or None).
def malformed(rng, ctx, ordinal=None):
    def post(path, body_bytes, **kw):
        return http_request("POST", path, body_bytes, keep_alive=False, **kw)

    cpath = "/v1/completions"
    chpath = "/v1/chat/completions"
    r = rng.random() if ordinal is None else MALFORMED_SLOTS[ordinal % len(MALFORMED_SLOTS)]
    if r < 0.15:
        body = rng.choice([b'{"prompt": "hi", "max_tokens": 4', b'{prompt: "hi"}', b"not json at all",
                           b'{"prompt": "hi",}', b'{"prompt": "hi"} trailing', b"", b"[1, 2, 3]", b"null",
                           b'{"prompt": "\\ud800"}', b'"just a string"'])
        return "bad_json", post(rng.choice([cpath, chpath]), body), {400}, "invalid_json"
    if r < 0.35:
        field, value, path = rng.choice([
            ("prompt", 5, cpath), ("prompt", {"a": 1}, cpath), ("prompt", [1.5, "x"], cpath),
            ("stream", "yes", cpath), ("max_tokens", "5", cpath), ("temperature", "hot", cpath),
            ("stop", 5, cpath), ("logit_bias", [1, 2], cpath), ("messages", {"role": "user"}, chpath),
            ("messages", [{"role": 1, "content": "x"}], chpath), ("messages", [{"role": "user", "content": 5}], chpath),
            ("seed", "abc", cpath), ("stream_options", 3, cpath), ("n", "two", cpath), ("model", 7, cpath),
            ("deadline_policy", 1, cpath), ("top_k", True, cpath)])
        body = {"prompt": words(rng, 2, 8)} if path == cpath else {"messages": [{"role": "user", "content": "hi"}]}
        body[field] = value
        return "wrong_type", post(path, json.dumps(body).encode()), {400}, "invalid_type"
    if r < 0.55:
        field, value, code = rng.choice([
            ("max_tokens", 0, "invalid_value"), ("max_tokens", -1, "invalid_value"),
            ("max_tokens", 10**9, "invalid_value"), ("n", 0, "invalid_value"), ("n", 1000, "invalid_value"),
            ("temperature", 3.5, "invalid_value"), ("top_p", 1.5, "invalid_value"), ("top_k", -1, "invalid_value"),
            ("min_p", -0.5, "invalid_value"), ("logprobs", 50, "invalid_value"), ("n", 1.5, "invalid_value"),
            ("priority", 10**7, "invalid_value"), ("echo", True, "unsupported_parameter"),
            ("deadline_policy", "sometimes", "invalid_value"), ("logit_bias", {"999999999": 1}, "invalid_token"),
            ("logit_bias", {"abc": 1}, "invalid_token"), ("logit_bias", {"5": 500}, "invalid_value"),
            ("prompt", [ctx.n_vocab + 5], "invalid_token"), ("prompt", [-3, 5], "invalid_token"),
            ("prompt", ["a", "b"], "invalid_value"), ("stop", ["x"] * 20, "invalid_value"),
            ("repeat_penalty", 0, "invalid_value"), ("presence_penalty", 9, "invalid_value")])
        body = {"prompt": words(rng, 2, 8), field: value}
        return "out_of_range", post(cpath, json.dumps(body).encode()), {400}, code
    if r < 0.62:
        path, body, code = rng.choice([
            (cpath, {"max_tokens": 4}, "missing_required_parameter"), (cpath, {"prompt": ""}, "empty_prompt"),
            (cpath, {"prompt": []}, "empty_prompt"), (chpath, {"messages": []}, "empty_prompt"),
            (chpath, {"prompt": "hi"}, "missing_required_parameter"),
            (chpath, {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, "invalid_value")])
        return "missing_or_empty", post(path, json.dumps(body).encode()), {400}, code
    if r < 0.67:
        body = b'{"prompt": "caf\xc3 \xff\xfe"}'
        return "bad_utf8", post(cpath, body), {400}, "invalid_encoding"
    if r < 0.71:
        depth = rng.randint(65, 5000)
        body = b'{"prompt": "x", "a": ' + b"[" * depth + b"]" * depth + b"}"
        return "deep_nesting", post(cpath, body), {400}, "invalid_json"
    if r < 0.735:
        # More tokens than the per-request context (each word is about one token).
        n_words = int(ctx.n_ctx * 1.3) + 64
        text = " ".join(rng.choice(WORDS) for _ in range(n_words))
        if rng.random() < 0.5:
            body = {"prompt": text, "max_tokens": 4}
            path = cpath
        else:
            body = {"messages": [{"role": "user", "content": text}], "max_tokens": 4}
            path = chpath
        return "oversize_prompt", post(path, json.dumps(body).encode()), {400}, "context_length_exceeded"
    if r < 0.76:
        # A prompt as large as --max-body lets through (90-99% of it): refused for the context,
        # and cheaply (it must not cost the server seconds and hundreds of MiB to find out).
        sentence = words(rng, 20, 40) + ". "
        text = sentence * (int(ctx.max_body * rng.uniform(0.9, 0.99)) // len(sentence))
        chat = rng.random() < 0.5
        body = {"messages": [{"role": "user", "content": text}]} if chat else {"prompt": text}
        return "huge_prompt", post(chpath if chat else cpath, json.dumps(body).encode()), {400}, \
            "context_length_exceeded"
    if r < 0.79:
        body = b'{"prompt": "' + b"x" * (ctx.max_body + 1024) + b'"}'
        return "oversize_body", post(cpath, body), {413}, "request_too_large"
    if r < 0.81:
        # A chunked body over --max-body: 413 expected; any 4xx passes the soak (the table shows which).
        payload = b'{"prompt": "' + b"y" * (ctx.max_body + 1024) + b'"}'
        chunks = b"".join(b"%x\r\n%s\r\n" % (len(payload[i:i + 65536]), payload[i:i + 65536])
                          for i in range(0, len(payload), 65536)) + b"0\r\n\r\n"
        head = ("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
        return "oversize_chunked", head + chunks, None, None
    # Bad HTTP: any 4xx with a JSON error body (the status depends on the HTTP layer).
    choice = rng.randrange(9)
    if choice == 0:
        raw = b"GARBAGE\r\n\r\n"
    elif choice == 1:
        raw = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nConnection: close\r\n\r\n{}"
    elif choice == 2:
        raw = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\nConnection: close\r\n\r\n{}"
    elif choice == 3:
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               b"zz\r\nhello\r\n0\r\n\r\n")
    elif choice == 4:
        raw = b"GET /" + b"a" * rng.randint(20000, 200000) + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    elif choice == 5:
        raw = (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * rng.randint(70000, 300000) +
               b"\r\nConnection: close\r\n\r\n")
    elif choice == 6:
        raw = b"GET /v1/%zz%00/../models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    elif choice == 7:
        raw = http_request(rng.choice(["PUT", "DELETE", "PATCH"]), rng.choice([cpath, "/v1/models", "/nowhere"]),
                           b"{}", keep_alive=False)
    else:
        raw = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n"
               b"Connection: close\r\n\r\n5\r\n{\"a\":\r\n0\r\n\r\n")
    return f"bad_http_{choice}", raw, None, None


# ----------------------------------------------------------------------------- response checks

class Bad(Exception):
    """The response breaks the API contract."""


def need(cond, what):
    if not cond:
        raise Bad(what)


def check_error_body(body, code=None):
    try:
        doc = json.loads(body)
    except ValueError:
        raise Bad(f"error body is not JSON: {body[:120]!r}")
    need(isinstance(doc, dict) and isinstance(doc.get("error"), dict), f"no error object: {body[:120]!r}")
    err = doc["error"]
    need(isinstance(err.get("message"), str) and err["message"], "error without a message")
    if code is not None:
        need(err.get("code") == code, f"error code {err.get('code')!r}, expected {code!r} ({err.get('message')})")
    return err


def check_usage(u, exp, finishes):
    need(isinstance(u, dict), f"usage {u!r}")
    for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
        need(isinstance(u.get(k), int) and u[k] >= 0, f"usage.{k} = {u.get(k)!r}")
    need(u["prompt_tokens"] > 0, "usage.prompt_tokens is 0")
    need(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], f"usage arithmetic {u}")
    need(u["completion_tokens"] <= exp["n"] * exp["max_tokens"], f"{u['completion_tokens']} tokens > n*max_tokens")
    if finishes and all(f == "length" for f in finishes):
        need(u["completion_tokens"] == exp["n"] * exp["max_tokens"],
             f"every choice hit the length limit but completion_tokens = {u['completion_tokens']}, "
             f"expected {exp['n']} x {exp['max_tokens']}")


FINISH = {"stop", "length"}


def check_finish(f, exp):
    ok = FINISH | ({"deadline"} if exp["strict_deadline"] else set())
    need(f in ok, f"finish_reason {f!r}")


def check_logprobs(lp, exp, chat):
    if exp["top_logprobs"] is None:
        need(lp is None, f"logprobs {str(lp)[:80]} not asked for")
        return
    need(isinstance(lp, dict), f"logprobs {lp!r}")
    if chat:
        content = lp.get("content")
        need(isinstance(content, list), "logprobs.content is not a list")
        for e in content:
            need(isinstance(e.get("token"), str) and isinstance(e.get("logprob"), (int, float)), f"entry {e}")
            need(e["logprob"] <= 1e-3, f"logprob {e['logprob']} > 0")
            need(isinstance(e.get("top_logprobs"), list) and len(e["top_logprobs"]) <= exp["top_logprobs"],
                 f"top_logprobs {e.get('top_logprobs')}")
    else:
        toks, lps = lp.get("tokens"), lp.get("token_logprobs")
        need(isinstance(toks, list) and isinstance(lps, list) and len(toks) == len(lps), "tokens/token_logprobs")
        need(all(isinstance(x, (int, float)) and x <= 1e-3 for x in lps), "token_logprobs")


def check_completion(doc, exp):
    chat = exp["kind"] == "chat"
    need(doc.get("object") == ("chat.completion" if chat else "text_completion"), f"object {doc.get('object')!r}")
    need(isinstance(doc.get("id"), str) and doc["id"], "no id")
    need(isinstance(doc.get("created"), int), "no created")
    need(isinstance(doc.get("model"), str), "no model")
    choices = doc.get("choices")
    need(isinstance(choices, list) and len(choices) == exp["n"], f"{len(choices or [])} choices for n={exp['n']}")
    need(sorted(c.get("index") for c in choices) == list(range(exp["n"])), "choice indices")
    finishes, texts = [], {}
    for c in choices:
        if chat:
            m = c.get("message")
            need(isinstance(m, dict) and m.get("role") == "assistant", f"message {m!r}")
            need(isinstance(m.get("content"), str), "message.content is not a string")
            texts[c["index"]] = m["content"]
        else:
            need(isinstance(c.get("text"), str), "text is not a string")
            texts[c["index"]] = c["text"]
        check_finish(c.get("finish_reason"), exp)
        finishes.append(c["finish_reason"])
        check_logprobs(c.get("logprobs"), exp, chat)
    check_usage(doc.get("usage"), exp, finishes)
    for c in choices:
        check_constraint(texts[c["index"]], c["finish_reason"], exp)
    return [(texts[c["index"]], c["finish_reason"]) for c in sorted(choices, key=lambda c: c["index"])]


class StreamChecker:
    def __init__(self, exp):
        self.exp = exp
        self.chat = exp["kind"] == "chat"
        self.id = None
        self.finished = {}
        self.role_seen = set()
        self.done = False
        self.usage = None
        self.frames = 0
        self.texts = defaultdict(str)
        self.deadline_error = False  # a strict deadline passed after the head: an error event, then [DONE]

    def frame(self, data):
        need(not self.done, "a frame after [DONE]")
        self.frames += 1
        if data == b"[DONE]":
            self.done = True
            return
        try:
            doc = json.loads(data)
        except ValueError:
            raise Bad(f"frame is not JSON: {data[:100]!r}")
        if "error" in doc:
            err = doc["error"]
            # docs/API.md: a strict deadline that passes once the stream's head is sent ends the
            # stream with one error event (deadline_exceeded) and [DONE]; anything else is a failure.
            if self.exp["strict_deadline"] and isinstance(err, dict) and err.get("code") == "deadline_exceeded" \
                    and not self.deadline_error:
                self.deadline_error = True
                return
            raise Bad(f"error frame: {str(err)[:200]}")
        need(not self.deadline_error, "a chunk after the deadline error event")
        need(doc.get("object") == ("chat.completion.chunk" if self.chat else "text_completion"),
             f"chunk object {doc.get('object')!r}")
        self.id = self.id or doc.get("id")
        need(doc.get("id") == self.id, "chunk ids differ")
        choices = doc.get("choices")
        need(isinstance(choices, list), "chunk without choices")
        if not choices:
            need(self.exp["include_usage"], "an empty-choices chunk without include_usage")
            need(self.usage is None, "two usage chunks")
            self.usage = doc.get("usage")
            need(isinstance(self.usage, dict), "usage chunk without usage")
            return
        if self.exp["include_usage"]:
            need("usage" in doc and doc["usage"] is None, "a content chunk whose usage is not null")
        need(self.usage is None, "content after the usage chunk")
        for c in choices:
            i = c.get("index")
            need(isinstance(i, int) and 0 <= i < self.exp["n"], f"chunk index {i!r}")
            need(i not in self.finished, f"choice {i} continued after its final chunk")
            if self.chat:
                d = c.get("delta")
                need(isinstance(d, dict), "chunk without delta")
                if i not in self.role_seen:
                    need(d.get("role") == "assistant", f"first delta of choice {i} has no assistant role: {d}")
                    self.role_seen.add(i)
                if "content" in d:
                    need(isinstance(d["content"], str), "delta.content is not a string")
                    self.texts[i] += d["content"]
            else:
                need(isinstance(c.get("text"), str), "chunk text is not a string")
                self.texts[i] += c["text"]
            f = c.get("finish_reason")
            if f is not None:
                check_finish(f, self.exp)
                self.finished[i] = f

    def end(self):
        need(self.done, f"stream ended without [DONE] after {self.frames} frames")
        if self.deadline_error:
            return
        need(sorted(self.finished) == list(range(self.exp["n"])),
             f"final chunks for choices {sorted(self.finished)} of n={self.exp['n']}")
        for i, f in self.finished.items():
            check_constraint(self.texts[i], f, self.exp)
        if self.exp["include_usage"]:
            need(self.usage is not None, "no usage chunk")
            check_usage(self.usage, self.exp, list(self.finished.values()))
        else:
            need(self.usage is None, "usage chunk without include_usage")


def check_misc(kind, exp, status, body, content_type):
    need(status == 200, f"status {status}")
    if kind == "metrics":
        need(b"ubatch_ready 1" in body, "metrics without ubatch_ready 1")
        return
    doc = json.loads(body)
    if kind == "tokenize":
        toks = doc.get("tokens")
        need(isinstance(toks, list), "tokens")
        if exp["with_pieces"]:
            need(all(isinstance(t, dict) and isinstance(t.get("id"), int) for t in toks), "pieces")
        else:
            need(all(isinstance(t, int) for t in toks), "token ids")
    elif kind == "detokenize":
        need(isinstance(doc.get("content"), str), "content")
    elif kind == "models":
        need(doc.get("object") == "list" and len(doc.get("data", [])) == 1, "model list")
    elif kind == "health":
        need(doc.get("status") == "ok", f"health {doc}")


# ----------------------------------------------------------------------------- the jobs

class Result:
    __slots__ = ("category", "kind", "outcome", "status", "latency", "detail", "failed", "texts")

    def __init__(self, category, kind, outcome, status=None, latency=0.0, detail="", failed=False, texts=None):
        self.category, self.kind, self.outcome, self.status = category, kind, outcome, status
        self.latency, self.detail, self.failed = latency, detail, failed
        self.texts = texts  # [(text, finish_reason)] per choice, for replays


class Soak:
    def __init__(self, args, host, port, ctx, plan_seed):
        self.args, self.host, self.port, self.ctx = args, host, port, ctx
        self.seed = plan_seed
        self.results = []
        self.next_job = 0
        self.done_jobs = 0
        self.stale_retries = 0
        self.reused = 0
        self.on_progress = None
        # Each job's category is its rng's first draw; the malformed ones are numbered in job order.
        self.malformed_ordinal = {}
        for i in range(args.requests):
            if self.job_rng(i).random() < args.malformed_share:
                self.malformed_ordinal[i] = len(self.malformed_ordinal)

    def job_rng(self, i):
        return random.Random(self.seed * 1_000_003 + i)

    async def connect(self):
        return await Conn.open(self.host, self.port)

    async def worker(self):
        conn = None
        while self.next_job < self.args.requests:
            i = self.next_job
            self.next_job += 1
            rng = self.job_rng(i)
            r = rng.random()
            t0 = time.monotonic()
            try:
                if r < self.args.malformed_share:
                    res = await asyncio.wait_for(self.malformed_job(rng, self.malformed_ordinal[i]), self.args.timeout)
                elif r < self.args.malformed_share + self.args.disconnect_share:
                    res = await asyncio.wait_for(self.disconnect_job(rng), self.args.timeout)
                else:
                    res, conn = await self.valid_job(rng, conn)
            except asyncio.TimeoutError:
                cat = ("malformed" if r < self.args.malformed_share else
                       "disconnect" if r < self.args.malformed_share + self.args.disconnect_share else "valid")
                res = Result(cat, "?", "timeout", failed=True, detail=f"no answer within {self.args.timeout} s")
            res.latency = time.monotonic() - t0
            self.results.append(res)
            self.done_jobs += 1
            if self.on_progress:
                self.on_progress(self.done_jobs)
        if conn:
            conn.close()

    # -- valid requests
    async def valid_job(self, rng, conn):
        r = rng.random()
        if r < 0.05:
            method, path, body, exp = valid_misc(rng, self.ctx)
        elif r < 0.05 + self.args.replay_share:
            return await self.replay_job(rng, conn)
        elif r < 0.05 + self.args.replay_share + self.args.pipeline_share:
            return await self.pipeline_job(rng), conn
        else:
            chat = rng.random() < 0.5
            path, body, exp = valid_completion(rng, self.ctx, chat)
            method = "POST"
        return await self.one_valid(rng, conn, method, path, body, exp)

    async def replay_job(self, rng, conn):
        """The same seeded request twice, streamed one way and unstreamed the other, at two moments
        of the load: the texts must be equal (batch invariance; a stream's text equals the
        unstreamed text)."""
        chat = rng.random() < 0.5
        stream = rng.random() < 0.5
        path, body, exp = valid_completion(rng, self.ctx, chat, stream=stream)
        for k in ("deadline_ms", "deadline_policy"):
            body.pop(k, None)
        exp["strict_deadline"] = False
        if body.get("temperature", 1) != 0:
            body["seed"] = rng.randint(0, 2**31)
        first, conn = await self.one_valid(rng, conn, "POST", path, body, exp)
        if first.failed or first.texts is None:
            return first, conn
        await asyncio.sleep(rng.uniform(0.0, 2.0))
        body["stream"] = not stream
        body.pop("stream_options", None)
        exp2 = dict(exp, stream=not stream, include_usage=False)
        second, conn = await self.one_valid(rng, conn, "POST", path, body, exp2)
        kind = f"replay {exp['kind']}"
        if second.failed or second.texts is None:
            second.kind = kind
            return second, conn
        if first.texts != second.texts:
            return Result("valid", kind, "texts differ", 200, failed=True,
                          detail=f"{'stream' if stream else 'unstreamed'} {first.texts!r} vs "
                                 f"{second.texts!r}; request {json.dumps(body)[:400]}"), conn
        return Result("valid", kind, "200, same text", 200), conn

    async def pipeline_job(self, rng):
        """2-3 requests written at once on a new connection (HTTP/1.1 pipelining): every one must
        be answered, in order (told apart by their n)."""
        ns = rng.sample([1, 2, 3], rng.randint(2, 3))
        reqs, exps = [], []
        for k, n in enumerate(ns):
            path, body, exp = valid_completion(rng, self.ctx, rng.random() < 0.5,
                                               stream=k == len(ns) - 1 and rng.random() < 0.5)
            for key in ("deadline_ms", "deadline_policy"):
                body.pop(key, None)
            body["n"] = n
            exp.update(n=n, strict_deadline=False)
            reqs.append(http_request("POST", path, json.dumps(body).encode(), keep_alive=k < len(ns) - 1))
            exps.append(exp)
        conn = await self.connect()
        try:
            await conn.send(b"".join(reqs))
            for k, exp in enumerate(exps):
                res, _ = await self.answer(conn, "POST", exp)
                if res.failed:
                    res.kind, res.detail = "pipelined", f"request {k + 1} of {len(exps)}: {res.detail}"
                    return res
            return Result("valid", "pipelined", f"{len(exps)} answered in order", 200)
        except ConnectionLost as e:
            return Result("valid", "pipelined", "connection lost", failed=True,
                          detail=f"after {k} of {len(exps)} answers: {e}")
        except (ProtocolError, Bad) as e:
            return Result("valid", "pipelined", "bad response", failed=True,
                          detail=f"answer {k + 1} of {len(exps)} (n={exps[k]['n']}): {e}")
        finally:
            conn.close()

    async def one_valid(self, rng, conn, method, path, body, exp):
        keep = rng.random() < 0.6
        if conn is not None and time.monotonic() - conn.idle_since > KEEP_ALIVE_REUSE_S:
            conn.close()  # the server may close it any moment now (--keep-alive 5 s): a new one
            conn = None
        data = http_request(method, path, json.dumps(body).encode() if body is not None else None, keep_alive=keep)
        for attempt in range(2):
            fresh = conn is None
            if fresh:
                conn = await self.connect()
            else:
                self.reused += 1
            try:
                res, keep_ok = await asyncio.wait_for(self.exchange(conn, method, data, exp), self.args.timeout)
            except asyncio.TimeoutError:
                conn.close(reset=True)
                return Result("valid", exp["kind"], "timeout", failed=True,
                              detail=f"no whole answer within {self.args.timeout} s"), None
            except ConnectionLost as e:
                conn.close()
                if not fresh and not e.got_bytes and attempt == 0:
                    self.stale_retries += 1  # the server closed a kept-alive connection first
                    conn = None
                    continue
                return Result("valid", exp["kind"], "connection lost", failed=True, detail=str(e)), None
            except (ProtocolError, Bad) as e:
                conn.close()
                return Result("valid", exp["kind"], "bad response", failed=True, detail=str(e)), None
            except OSError as e:
                conn.close()
                return Result("valid", exp["kind"], "socket error", failed=True, detail=repr(e)), None
            if keep and keep_ok:
                conn.idle_since = time.monotonic()
                return res, conn
            conn.close()
            return res, None
        raise AssertionError("unreachable")

    async def exchange(self, conn, method, data, exp):
        await conn.send(data)
        return await self.answer(conn, method, exp)

    async def answer(self, conn, method, exp):
        """Reads and checks the answer to one valid request; returns (Result, connection reusable)."""
        resp = await conn.read_head()
        kind = exp["kind"]
        keep_ok = resp.keep_alive()
        if kind not in ("chat", "completions"):
            body = await conn.read_body(resp, method)
            try:
                check_misc(kind, exp, resp.status, body, resp.header("content-type"))
            except (ValueError, Bad) as e:
                raise Bad(f"{kind}: {e}")
            return Result("valid", kind, "200", 200), keep_ok and not getattr(resp, "until_close", False)
        label = f"{kind}{' stream' if exp['stream'] else ''}"
        if exp.get("constraint"):
            label += " constrained"
        if resp.status != 200:
            body = await conn.read_body(resp, method)
            err = check_error_body(body)
            legit = (resp.status == 503 and err.get("code") == "queue_full") or \
                    (exp["strict_deadline"] and resp.status == 503 and err.get("code") == "deadline_unattainable") or \
                    (exp["strict_deadline"] and resp.status == 504 and err.get("code") == "deadline_exceeded")
            outcome = f"{resp.status} {err.get('code')}"
            return Result("valid", label, outcome, resp.status, failed=not legit,
                          detail="" if legit else err.get("message", "")), keep_ok
        if exp["stream"]:
            need(resp.header("content-type").startswith("text/event-stream"),
                 f"stream Content-Type {resp.header('content-type')!r}")
            sc, sse = StreamChecker(exp), SseParser()
            async for piece in conn.body_pieces(resp, method):
                for ev in sse.feed(piece):
                    sc.frame(ev)
            need(not sse.buf.strip(), f"bytes after the last event: {sse.buf[:60]!r}")
            sc.end()
            if sc.deadline_error:
                return Result("valid", label, "200 deadline error event", 200), \
                    keep_ok and not getattr(resp, "until_close", False)
            texts = [(sc.texts[i], sc.finished[i]) for i in range(exp["n"])]
        else:
            need(resp.header("content-type").startswith("application/json"),
                 f"Content-Type {resp.header('content-type')!r}")
            body = await conn.read_body(resp, method)
            try:
                doc = json.loads(body)
            except ValueError:
                raise Bad(f"body is not JSON: {body[:100]!r}")
            texts = check_completion(doc, exp)
        outcome = "200 deadline" if any(f == "deadline" for _, f in texts) else "200"
        return Result("valid", label, outcome, 200, texts=texts), keep_ok and not getattr(resp, "until_close", False)

    # -- clients that go away
    async def disconnect_job(self, rng):
        r = rng.random()
        mode = ("stream_mid_fin" if r < 0.4 else "stream_mid_rst" if r < 0.6 else "stream_before_head"
                if r < 0.7 else "nonstream_wait" if r < 0.9 else "half_close")
        stream = mode.startswith("stream")
        mt = rng.randint(self.ctx.max_tokens, 3 * self.ctx.max_tokens)
        path, body, exp = valid_completion(rng, self.ctx, rng.random() < 0.5, stream=stream, max_tokens=mt)
        if rng.random() < 0.5:
            body["ignore_eos"] = True
        data = http_request("POST", path, json.dumps(body).encode())
        conn = await self.connect()
        try:
            await conn.send(data)
            if mode == "stream_before_head" or mode == "nonstream_wait":
                await asyncio.sleep(rng.uniform(0.0, 0.5 if mode == "nonstream_wait" else 0.2))
                conn.close(reset=rng.random() < 0.3)
                return Result("disconnect", mode, "closed")
            if mode == "half_close":
                conn.writer.write_eof()
                try:
                    resp = await conn.read_head()
                except ConnectionLost:
                    return Result("disconnect", mode, "closed by server")
                body = await conn.read_body(resp)
                if resp.status >= 500 and not (exp["strict_deadline"] and resp.status in (503, 504)):
                    return Result("disconnect", mode, f"{resp.status}", resp.status, failed=True, detail=body[:200])
                return Result("disconnect", mode, f"answered {resp.status}", resp.status)
            resp = await conn.read_head()
            if resp.status != 200:
                body = await conn.read_body(resp)
                err = check_error_body(body)
                legit = resp.status == 503 or (exp["strict_deadline"] and resp.status == 504)
                return Result("disconnect", mode, f"{resp.status} {err.get('code')}", resp.status, failed=not legit,
                              detail=err.get("message", ""))
            want = rng.randint(1, 4)
            sc, sse = StreamChecker(exp), SseParser()
            async for piece in conn.body_pieces(resp):
                for ev in sse.feed(piece):
                    sc.frame(ev)
                if sc.frames >= want or sc.done:
                    break
            outcome = "completed first" if sc.done else "closed mid-stream"
            conn.close(reset=mode.endswith("rst"))
            return Result("disconnect", mode, outcome, 200)
        except (Bad, ProtocolError) as e:
            return Result("disconnect", mode, "bad response", failed=True, detail=str(e))
        except (ConnectionLost, OSError) as e:
            return Result("disconnect", mode, "connection lost", failed=True, detail=str(e))
        finally:
            conn.close()

    # -- malformed requests
    async def malformed_job(self, rng, ordinal):
        kind, raw, statuses, code = malformed(rng, self.ctx, ordinal)
        conn = await self.connect()
        try:
            # Send while reading: the server may answer (and close) before it has read it all.
            sender = asyncio.ensure_future(self._send_all(conn, raw))
            try:
                resp = await conn.read_head()
                body = await conn.read_body(resp)
            finally:
                if not sender.done():
                    sender.cancel()
            if resp.status >= 500:
                return Result("malformed", kind, str(resp.status), resp.status, failed=True,
                              detail=body[:200].decode("utf-8", "replace"))
            if not (400 <= resp.status < 500) or (statuses and resp.status not in statuses):
                return Result("malformed", kind, str(resp.status), resp.status, failed=True,
                              detail=f"expected {sorted(statuses) if statuses else '4xx'}: "
                                     f"{body[:200].decode('utf-8', 'replace')}")
            try:
                check_error_body(body, code)
            except Bad as e:
                return Result("malformed", kind, str(resp.status), resp.status, failed=True, detail=str(e))
            return Result("malformed", kind, str(resp.status), resp.status)
        except ConnectionLost as e:
            return Result("malformed", kind, "closed without an answer", failed=True, detail=str(e))
        except ProtocolError as e:
            return Result("malformed", kind, "bad response", failed=True, detail=str(e))
        except OSError as e:
            return Result("malformed", kind, "socket error", failed=True, detail=repr(e))
        finally:
            conn.close()

    @staticmethod
    async def _send_all(conn, raw):
        try:
            for i in range(0, len(raw), 1 << 16):
                conn.writer.write(raw[i:i + (1 << 16)])
                await conn.writer.drain()
        except (ConnectionError, OSError):
            pass  # the server answered and closed first


# ----------------------------------------------------------------------------- server, metrics, memory

class Server:
    """A `ubatch serve` process started here (start()) or one already running (pid given)."""

    def __init__(self, binary=None, model=None, server_args=(), pid=None):
        self.binary, self.model, self.server_args = binary, model, list(server_args)
        self.proc = None
        self.log_path = None
        self.host, self.port, self.pid = "127.0.0.1", None, pid

    def start(self):
        """Starts it on a free port (--port 0) and reads the port from its log."""
        fd, self.log_path = tempfile.mkstemp(prefix="ubatch_serve_", suffix=".log")
        cmd = [self.binary, "serve", "-m", self.model, "--port", "0"] + self.server_args
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=fd)
        os.close(fd)
        self.pid = self.proc.pid
        deadline = time.monotonic() + 120
        while self.port is None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no 'listening on' line:\n{self.log_tail()}")
            m = re.search(r"listening on http://([\d.]+):(\d+)", self.log())
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
            else:
                time.sleep(0.05)

    def log(self):
        if not self.log_path:
            return ""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def log_tail(self, n=40):
        return "\n".join(self.log().splitlines()[-n:])

    def alive(self):
        if self.proc is not None:
            return self.proc.poll() is None
        if self.pid:
            try:
                os.kill(self.pid, 0)
                return True
            except OSError:
                return False
        return True

    def rss_kib(self, field="VmRSS"):
        if not self.pid:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None

    def stop(self):
        """SIGTERM; returns the exit status (None when not started by us)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "killed after 60 s"
        return self.proc.returncode


async def simple_get(host, port, path, timeout=10.0):
    conn = await Conn.open(host, port)
    try:
        await conn.send(http_request("GET", path, keep_alive=False))
        resp = await asyncio.wait_for(conn.read_head(), timeout)
        body = await asyncio.wait_for(conn.read_body(resp), timeout)
        return resp.status, body
    finally:
        conn.close()


async def simple_post(host, port, path, body, timeout=600.0):
    conn = await Conn.open(host, port)
    try:
        await conn.send(http_request("POST", path, json.dumps(body).encode(), keep_alive=False))
        resp = await asyncio.wait_for(conn.read_head(), timeout)
        data = await asyncio.wait_for(conn.read_body(resp), timeout)
        return resp.status, data
    finally:
        conn.close()


PREEMPT_MEMORY = 'ubatch_preemptions_total{cause="memory"}'
PREEMPT_PRIORITY = 'ubatch_preemptions_total{cause="priority"}'


def parse_metrics(text):
    """{"name{labels}": value}, the model label left out (summed over the models served)."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        name = re.sub(r'model="[^"]*",?', "", name).replace("{}", "")
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            pass
    return out


async def metrics(host, port):
    status, body = await simple_get(host, port, "/metrics")
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return parse_metrics(body.decode())


async def settle(host, port, seconds):
    """Waits until nothing runs, queues or streams and no KV block is used; returns the metrics."""
    deadline = time.monotonic() + seconds
    while True:
        m = await metrics(host, port)
        idle = (m.get("ubatch_requests_running", 0) == 0 and m.get("ubatch_requests_queued", 0) == 0 and
                m.get("ubatch_http_streams_active", 0) == 0 and m.get("ubatch_kv_blocks_used", 0) == 0)
        if idle or time.monotonic() > deadline:
            return m, idle
        await asyncio.sleep(0.1)


# ----------------------------------------------------------------------------- main

def mib(kib):
    return "n/a" if kib is None else f"{kib / 1024:.1f}"


def pct(xs, q):
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in rows + [headers]) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(headers))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    print()


async def wait_ready(server, seconds):
    """Polls /health until 200 (the model loaded)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            status, _ = await simple_get(server.host, server.port, "/health", timeout=5)
            if status == 200:
                return
        except (OSError, ConnectionLost, ProtocolError, asyncio.TimeoutError):
            pass
        if not server.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"/health never answered 200:\n{server.log_tail()}")
        await asyncio.sleep(0.1)


async def run(args, server):
    host, port = server.host, server.port
    await wait_ready(server, args.ready_timeout)
    status, body = await simple_get(host, port, "/v1/models")
    model = json.loads(body)["data"][0]
    meta = model["meta"]
    ctx = Ctx(model["id"], meta["n_vocab"], meta["n_ctx"], args.max_tokens, args.max_body)
    print(f"server pid {server.pid} on {host}:{port}: model {model['id']}, n_ctx {meta['n_ctx']} per request, "
          f"kv_cells {meta['kv_cells']}", flush=True)
    rss_start = server.rss_kib()

    # Warm-up 1: every KV block written once (token-id prompts, one generated token each).
    t_warm = time.monotonic()
    m0 = await metrics(host, port)
    total_blocks = int(m0["ubatch_kv_blocks_total"])
    block = int(m0["ubatch_kv_block_size_tokens"])
    plen = max(block, min(1024, ctx.n_ctx - 8) // block * block)
    n_fill = -(-meta["kv_cells"] // plen) + 2
    wrng = random.Random(args.seed ^ 0x5EED)
    sem = asyncio.Semaphore(4)

    async def fill(i):
        async with sem:
            ids = [wrng.randrange(3, ctx.n_vocab) for _ in range(plen)]
            st, data = await simple_post(host, port, "/v1/completions", {"prompt": ids, "max_tokens": 1})
            if st != 200:
                raise RuntimeError(f"warm-up request answered {st}: {data[:200]!r}")

    await asyncio.gather(*(fill(i) for i in range(n_fill if not args.no_kv_fill else 0)))

    # Warm-up 1b: the compiled-grammar cache filled past its capacity (the server keeps the 64
    # most recently used grammars, each with the token classes and masks it has computed: tens
    # of MiB, bounded), so that the constrained requests of the soak, whose schemas are new
    # each time, do not count the cache's filling as growth.
    async def grammar_fill(i):
        async with sem:
            names = ["".join(wrng.choice("abcdefghijklmnop") for _ in range(wrng.randint(3, 10)))
                     for _ in range(wrng.randint(1, 4))]
            props = {n: {"type": wrng.choice(["string", "integer", "boolean"])} for n in names}
            schema = {"type": "object", "properties": props, "required": sorted(props)}
            st, data = await simple_post(host, port, "/v1/completions",
                                         {"prompt": "JSON:", "max_tokens": 12, "json_schema": schema})
            if st != 200:
                raise RuntimeError(f"grammar warm-up request answered {st}: {data[:200]!r}")

    await asyncio.gather(*(grammar_fill(i) for i in range(args.grammar_warmup)))
    # Warm-up 2: a round of ordinary requests (threads, allocator arenas, prefix cache).
    warm = Soak(args, host, port, ctx, args.seed + 1)
    warm.args = argparse.Namespace(**{**vars(args), "requests": args.warmup, "malformed_share": 0.0,
                                      "disconnect_share": 0.0})
    await asyncio.gather(*(warm.worker() for _ in range(min(args.concurrency, max(1, args.warmup)))))
    warm_failed = [r for r in warm.results if r.failed]
    m_base, idle_base = await settle(host, port, args.settle)
    rss_warm = server.rss_kib()
    print(f"warm-up: {n_fill if not args.no_kv_fill else 0} KV-filling prompts of {plen} tokens + {args.grammar_warmup} "
          f"distinct schemas + {args.warmup} "
          f"requests in {time.monotonic() - t_warm:.1f} s; RSS {mib(rss_start)} -> {mib(rss_warm)} MiB; "
          f"KV used {m_base.get('ubatch_kv_blocks_used'):.0f}, cached {m_base.get('ubatch_kv_blocks_cached'):.0f} "
          f"of {total_blocks}", flush=True)

    # The soak.
    soak = Soak(args, host, port, ctx, args.seed)
    health = {"checks": 0, "bad": [], "worst": 0.0}
    alive = {"dead_at": None}
    rss = {"mid": None, "peak": rss_warm or 0}
    t0 = time.monotonic()
    stop = asyncio.Event()

    def progress(done):
        if done == args.requests // 2:
            rss["mid"] = server.rss_kib()
        step = max(1, args.requests // 10)
        if done % step == 0:
            el = time.monotonic() - t0
            nf = sum(r.failed for r in soak.results)
            print(f"  {done}/{args.requests} in {el:.0f} s ({done / el:.1f} req/s), {nf} failed, "
                  f"RSS {mib(server.rss_kib())} MiB", flush=True)

    soak.on_progress = progress

    async def monitor():
        k = 0
        while not stop.is_set():
            if not server.alive() and alive["dead_at"] is None:
                alive["dead_at"] = time.monotonic() - t0
            r = server.rss_kib()
            if r:
                rss["peak"] = max(rss["peak"], r)
            if k % 2 == 0 and alive["dead_at"] is None:
                t = time.monotonic()
                try:
                    st, _ = await simple_get(host, port, "/health", timeout=10)
                    if st != 200:
                        health["bad"].append(f"{time.monotonic() - t0:.0f} s: status {st}")
                except Exception as e:  # noqa: BLE001 — any failure of /health is reported
                    health["bad"].append(f"{time.monotonic() - t0:.0f} s: {type(e).__name__} {e}")
                health["worst"] = max(health["worst"], time.monotonic() - t)
                health["checks"] += 1
            k += 1
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except asyncio.TimeoutError:
                pass

    mon = asyncio.ensure_future(monitor())
    await asyncio.gather(*(soak.worker() for _ in range(args.concurrency)))
    duration = time.monotonic() - t0
    stop.set()
    await mon
    alive_end = server.alive()
    if alive_end:
        m_end, idle_end = await settle(host, port, args.settle)
    else:
        m_end, idle_end = {}, False
    rss_end = server.rss_kib()
    hwm = server.rss_kib("VmHWM")

    # ---- report
    res = soak.results
    print(f"\n== soak: {len(res)} requests, {args.concurrency} clients, max_tokens <= {args.max_tokens}, "
          f"seed {args.seed}, {duration:.1f} s ({len(res) / duration:.1f} req/s)\n")
    by_cat = defaultdict(list)
    for r in res:
        by_cat[r.category].append(r)
    rows = []
    for cat in ("valid", "disconnect", "malformed"):
        rs = by_cat.get(cat, [])
        lat = [r.latency for r in rs]
        rows.append([cat, len(rs), sum(not r.failed for r in rs), sum(r.failed for r in rs),
                     f"{pct(lat, 0.5) * 1000:.0f}", f"{pct(lat, 0.99) * 1000:.0f}", f"{max(lat or [0]) * 1000:.0f}"])
    table(rows, ["category", "requests", "as expected", "failed", "p50 ms", "p99 ms", "max ms"])
    outcome_rows = [[cat, kind, outcome, n] for (cat, kind, outcome), n in
                    sorted(Counter((r.category, r.kind, r.outcome) for r in res).items())]
    table(outcome_rows, ["category", "kind", "outcome", "count"])

    failures = [r for r in res if r.failed] + warm_failed
    d = lambda k: m_end.get(k, 0) - m_base.get(k, 0)
    counters = [["ubatch_requests_submitted_total", f"{d('ubatch_requests_submitted_total'):.0f}"],
                ["ubatch_requests_finished_total", f"{d('ubatch_requests_finished_total'):.0f}"],
                ["ubatch_requests_cancelled_total", f"{d('ubatch_requests_cancelled_total'):.0f}"],
                ["ubatch_http_disconnects_total", f"{d('ubatch_http_disconnects_total'):.0f}"],
                ["ubatch_generated_tokens_total", f"{d('ubatch_generated_tokens_total'):.0f}"],
                ["ubatch_cached_prompt_tokens_total", f"{d('ubatch_cached_prompt_tokens_total'):.0f}"],
                ["ubatch_preemptions_total (memory + priority)",
                 f"{d(PREEMPT_MEMORY):.0f} + {d(PREEMPT_PRIORITY):.0f}"]]
    for k in sorted(m_end):
        if k.startswith("ubatch_http_responses_total"):
            counters.append([k, f"{d(k):.0f}"])
    table(counters, ["server counter (during the soak)", "delta"])

    growth = None if rss_end is None or rss_warm is None else (rss_end - rss_warm) / 1024
    sub_fin = (m_end.get("ubatch_requests_submitted_total"), m_end.get("ubatch_requests_finished_total"))
    checks = [
        ("server alive throughout and at the end", alive["dead_at"] is None and alive_end,
         "alive" if alive["dead_at"] is None and alive_end else f"dead at {alive['dead_at']} s"),
        ("/health 200 throughout", not health["bad"],
         f"{health['checks']} checks, worst {health['worst'] * 1000:.0f} ms" +
         (f"; {len(health['bad'])} bad: {health['bad'][:3]}" if health["bad"] else "")),
        ("valid requests answered validly", not any(r.failed for r in by_cat.get("valid", [])) and not warm_failed,
         f"{sum(r.failed for r in by_cat.get('valid', []))} of {len(by_cat.get('valid', []))} failed"
         f" (+{len(warm_failed)} in warm-up)"),
        ("disconnecting clients: no 5xx or bad frames", not any(r.failed for r in by_cat.get("disconnect", [])),
         f"{sum(r.failed for r in by_cat.get('disconnect', []))} of {len(by_cat.get('disconnect', []))} failed"),
        ("malformed requests: 4xx with an error body", not any(r.failed for r in by_cat.get("malformed", [])),
         f"{sum(r.failed for r in by_cat.get('malformed', []))} of {len(by_cat.get('malformed', []))} failed"),
        ("kept-alive connections not dropped", soak.stale_retries == 0,
         f"{soak.reused} requests on reused connections (idle < {KEEP_ALIVE_REUSE_S:g} s), {soak.stale_retries} "
         f"closed before an answer"),
        ("no request timed out (hang)", not any(r.outcome == "timeout" for r in res),
         f"{sum(r.outcome == 'timeout' for r in res)} timeouts of {args.timeout} s"),
        ("idle after the run (nothing running/queued/streaming)", idle_end,
         f"running {m_end.get('ubatch_requests_running')}, queued {m_end.get('ubatch_requests_queued')}, "
         f"streams {m_end.get('ubatch_http_streams_active')}"),
        ("KV blocks used back to the baseline", alive_end and
         m_end.get("ubatch_kv_blocks_used") == m_base.get("ubatch_kv_blocks_used") == 0,
         f"used {m_base.get('ubatch_kv_blocks_used'):.0f} -> {m_end.get('ubatch_kv_blocks_used', float('nan')):.0f}; "
         f"cached {m_base.get('ubatch_kv_blocks_cached'):.0f} -> {m_end.get('ubatch_kv_blocks_cached', float('nan')):.0f}"
         f" of {total_blocks}"),
        ("engine: submitted == finished", alive_end and sub_fin[0] == sub_fin[1],
         f"{sub_fin[0]:.0f} submitted, {sub_fin[1]:.0f} finished" if alive_end else "server gone"),
        (f"RSS growth after warm-up <= {args.rss_bound_mib} MiB", growth is not None and growth <= args.rss_bound_mib,
         f"start {mib(rss_start)}, after warm-up {mib(rss_warm)}, mid {mib(rss['mid'])}, end {mib(rss_end)} MiB "
         f"(growth {growth if growth is None else round(growth, 1)} MiB; peak {mib(hwm)} MiB)"),
    ]
    table([[name, "PASS" if ok else "FAIL", info] for name, ok, info in checks], ["check", "result", "values"])
    if failures:
        print(f"\nfirst failures ({len(failures)} in all):")
        for r in failures[:25]:
            print(f"  [{r.category} / {r.kind}] {r.outcome} {r.status or ''}: {str(r.detail)[:300]}")
    summary = dict(requests=len(res), concurrency=args.concurrency, max_tokens=args.max_tokens, seed=args.seed,
                   duration_s=round(duration, 1), failures=len(failures),
                   outcomes={f"{c}/{k}/{o}": n for (c, k, o), n in
                             Counter((r.category, r.kind, r.outcome) for r in res).items()},
                   rss_kib=dict(start=rss_start, warm=rss_warm, mid=rss["mid"], end=rss_end, peak=hwm),
                   kv=dict(total=total_blocks, base_used=m_base.get("ubatch_kv_blocks_used"),
                           base_cached=m_base.get("ubatch_kv_blocks_cached"),
                           end_used=m_end.get("ubatch_kv_blocks_used"), end_cached=m_end.get("ubatch_kv_blocks_cached")),
                   health_worst_ms=round(health["worst"] * 1000), checks={n: ok for n, ok, _ in checks})
    return all(ok for _, ok, _ in checks), summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", help="the ubatch binary to start")
    ap.add_argument("--model", help="the GGUF model to serve")
    ap.add_argument("--url", help="attach to a running server instead (http://HOST:PORT)")
    ap.add_argument("--pid", type=int, help="with --url: the server's pid, for the memory check")
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=16, help="largest max_tokens of a valid request")
    ap.add_argument("--malformed-share", type=float, default=0.05)
    ap.add_argument("--disconnect-share", type=float, default=0.10)
    ap.add_argument("--replay-share", type=float, default=0.05,
                    help="share of valid requests sent twice (streamed and not) whose texts must match")
    ap.add_argument("--pipeline-share", type=float, default=0.0,
                    help="share of valid jobs that pipeline 2-3 requests on one connection (HTTP/1.1)")
    ap.add_argument("--warmup", type=int, default=64, help="ordinary requests in the warm-up")
    ap.add_argument("--grammar-warmup", type=int, default=80,
                    help="requests with distinct JSON schemas in the warm-up (fills the server's cache of 64 grammars)")
    ap.add_argument("--no-kv-fill", action="store_true", help="skip writing the whole KV cache in the warm-up")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a request may take before it is a hang")
    ap.add_argument("--settle", type=float, default=30.0, help="seconds to wait for the server to go idle")
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--rss-bound-mib", type=float, default=64.0)
    ap.add_argument("--max-body", type=int, default=4 << 20, help="the server's --max-body")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json-out", help="write the figures as JSON here")
    ap.add_argument("server_args", nargs="*", help="after --: extra `ubatch serve` arguments")
    args = ap.parse_args()

    server = Server(args.binary, args.model, args.server_args, args.pid)
    if args.url:
        m = re.fullmatch(r"http://([^:/]+):(\d+)/?", args.url)
        if not m:
            ap.error("--url must look like http://HOST:PORT")
        server.host, server.port = m.group(1), int(m.group(2))
        if not args.pid:
            print("note: no --pid given: the memory check cannot read VmRSS and fails", flush=True)
    else:
        if not args.binary or not args.model:
            ap.error("give --binary and --model (or --url)")
        if not os.path.exists(args.binary):
            print(f"SKIP: ubatch binary not found at {args.binary}")
            return SKIP
        if not os.path.exists(args.model):
            print(f"SKIP: model not found at {args.model} (scripts/setup.sh installs it)")
            return SKIP
        server.start()
        print(f"started: {' '.join(server.cmd)}", flush=True)
    ok, summary = False, None
    try:
        ok, summary = asyncio.run(run(args, server))
    except Exception as e:  # noqa: BLE001 — reported with the server log
        print(f"FAIL: {type(e).__name__}: {e}")
        ok = False
    finally:
        code = server.stop()
        if code is not None:
            print(f"server exit status after SIGTERM: {code}")
            if code != 0:
                ok = False
        if not ok and server.log_path:
            print("server log (tail):\n" + server.log_tail())
        if server.log_path:
            os.unlink(server.log_path)
    if summary is not None:
        summary["server_exit"] = code
        summary["command"] = " ".join(sys.argv)
        if args.json_out:
            with open(args.json_out, "w") as f:
                json.dump(summary, f, indent=1)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
