"""schemathesis hooks for tests/python/schemathesis_run.py (loaded through SCHEMATHESIS_HOOKS).

`ubatch_no_server_error` replaces schemathesis' not_a_server_error: every 5xx fails except the
refusals docs/API.md documents for well-formed requests, each recognised by its error code —
503 `queue_full` (the queue is full), 503 `deadline_unattainable` and 504 `deadline_exceeded`
(a strict `deadline_ms` that cannot be or was not met: the generator sends `deadline_ms: 1`).
A 500, or a 503/504 with another code or no JSON error body, fails.
"""
import json

import schemathesis

DOCUMENTED_REFUSALS = {(503, "queue_full"), (503, "deadline_unattainable"), (504, "deadline_exceeded")}


@schemathesis.check
def ubatch_no_server_error(ctx, response, case):
    """No 5xx except the documented refusals (503 queue_full / deadline_unattainable, 504 deadline_exceeded)."""
    status = response.status_code
    if status < 500:
        return None
    code = None
    try:
        code = json.loads(response.content)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        pass
    if (status, code) in DOCUMENTED_REFUSALS:
        return None
    raise AssertionError(f"server error {status} (error code {code!r}): {response.content[:300]!r}")
