#!/usr/bin/env python3
"""Drives the web page of a running `ubatch serve` in headless Chromium (Selenium + chromedriver).

Usage: test_webui_browser.py --base-url http://127.0.0.1:PORT --api-key KEY --ubatch BUILD/ubatch
                             --screenshot OUT.png [--users 64] [--chromium PATH] [--chromedriver PATH]

Checks, in order, on one page: it loads and asks for the API key, which is then kept in
localStorage; a chat message streams its reply into the page (text grows while the reply is
open) with its stats; the Stop button cancels a long reply (the server's
ubatch_requests_cancelled_total rises); with `ubatch load --users N` running against the server
the dashboard's numbers change, the batch chart draws both decode and prefill tokens (pixels
of both colours on its canvas), the request table fills; a screenshot of the dashboard is
written and checked; no console errors at any point. Also prints how the page kept up under
load (snapshot gaps, time to update the page per snapshot, main-thread frame gaps).

Each check prints PASS or FAIL with the reason; the last line is "N passed, N failed" and the
exit status is 1 when any check failed. tests/test_server_webui_browser.cpp starts the server
and runs this script under CTest.
"""
import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import time
import traceback
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


def check(cond, message):
    if not cond:
        raise AssertionError(message)


def wait_for(fn, timeout, what, interval=0.1):
    """Polls fn() until it returns a truthy value; raises with `what` after timeout seconds."""
    end = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def metric(base_url, key, name):
    """The sum of `name` over the models served (engine series carry a model label)."""
    req = urllib.request.Request(base_url + "/metrics", headers={"Authorization": f"Bearer {key}"})
    total, seen = 0.0, False
    with urllib.request.urlopen(req, timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + '{model="'):
                total += float(line.split()[-1])
                seen = True
    if not seen:
        raise AssertionError(f"{name} not in /metrics")
    return total


def start_browser(args):
    opts = webdriver.ChromeOptions()
    opts.binary_location = args.chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1360,1180", "--force-device-scale-factor=1", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-extensions",
              "--disable-sync", "--metrics-recording-only", "--no-default-browser-check"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(args.chromedriver), options=opts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--ubatch", required=True, help="the ubatch binary (runs `ubatch load`)")
    ap.add_argument("--screenshot", required=True)
    ap.add_argument("--users", type=int, default=64)
    ap.add_argument("--load-seconds", type=float, default=40)
    ap.add_argument("--chromium", default=os.environ.get("UBATCH_CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--chromedriver", default=os.environ.get("UBATCH_CHROMEDRIVER", "/usr/bin/chromedriver"))
    args = ap.parse_args()
    base = args.base_url.rstrip("/")
    driver = start_browser(args)
    driver.set_script_timeout(30)
    console = []  # every browser log entry seen
    load = None

    def logs():
        entries = driver.get_log("browser")
        console.extend(entries)
        return entries

    def js(script, *a):
        return driver.execute_script(script, *a)

    def page_loads_and_asks_for_the_key():
        driver.get(base + "/")
        check(driver.title == "ubatch", driver.title)
        wait_for(lambda: js("return document.getElementById('key-dialog').open"), 15, "the API key dialog")
        driver.find_element(By.ID, "key-input").send_keys(args.api_key)
        driver.find_element(By.ID, "key-save").click()
        check(js("return localStorage.getItem('ubatch.apiKey')") == args.api_key, "key not kept in localStorage")
        wait_for(lambda: driver.find_element(By.ID, "model-select").text, 15, "the model selector")
        # A reload finds the key in storage: no dialog.
        driver.refresh()
        wait_for(lambda: driver.find_element(By.ID, "model-select").text, 15, "the model selector after a reload")
        check(not js("return document.getElementById('key-dialog').open"), "the key was asked again after a reload")
        errors = [e for e in logs() if e["level"] == "SEVERE"]
        check(not errors, f"console errors: {errors}")

    def set_field(element_id, value):
        e = driver.find_element(By.ID, element_id)
        e.clear()
        if value != "":
            e.send_keys(str(value))

    def last_reply():
        return js("""
            const all = document.querySelectorAll('#messages .msg.assistant');
            if (!all.length) return null;
            const m = all[all.length - 1];
            return {text: m.querySelector('.text').textContent, streaming: m.querySelector('.text').classList.contains('streaming'),
                    done: m.classList.contains('done'), finish: m.dataset.finish || null,
                    tokens: m.dataset.tokens ? Number(m.dataset.tokens) : null,
                    stats: m.querySelector('.stats').textContent, n: all.length};""")

    def send(text):
        box = driver.find_element(By.ID, "input")
        box.clear()
        box.send_keys(text)
        box.send_keys(Keys.ENTER)

    def chat_reply_streams_into_the_page():
        set_field("max-tokens", 48)
        set_field("temperature", 0)
        driver.find_element(By.ID, "ignore-eos").click()  # on: a reply of exactly 48 tokens
        send("Hello! Name three colours.")
        partial = []  # text lengths seen while the reply was still streaming
        def progress():
            r = last_reply()
            if r and r["streaming"] and r["text"]:
                partial.append(len(r["text"]))
            return r and r["done"]
        wait_for(progress, 180, "the chat reply to finish", interval=0.02)
        r = last_reply()
        check(r["finish"] == "length", f"finish {r['finish']} (stats: {r['stats']})")
        check(r["tokens"] == 48, f"{r['tokens']} tokens")
        check(len(r["text"]) > 0, "empty reply")
        check(partial and min(partial) < len(r["text"]), f"no partial text seen before the end: {partial[:5]}")
        for part in ("48 tokens", "TTFT", "tokens/s", "finish: length", "cached"):
            check(part in r["stats"], f"'{part}' not in the stats line: {r['stats']}")
        check(driver.find_element(By.ID, "stop-button").get_attribute("disabled") is not None, "Stop still enabled")
        print(f"  reply: {r['text'][:60]!r}… | {r['stats']}")

    def stop_button_cancels_a_long_reply():
        cancelled_before = metric(base, args.api_key, "ubatch_requests_cancelled_total")
        set_field("max-tokens", 4000)
        send("Tell me a very long story.")
        wait_for(lambda: (last_reply() or {}).get("text"), 120, "the long reply to start")
        check(driver.find_element(By.ID, "stop-button").is_enabled(), "Stop is not enabled while a reply streams")
        driver.find_element(By.ID, "stop-button").click()
        wait_for(lambda: (last_reply() or {}).get("done"), 30, "the reply to end after Stop")
        r = last_reply()
        check(r["finish"] == "stopped", f"finish {r['finish']}")
        check(r["tokens"] < 4000, f"{r['tokens']} tokens: the reply ran to the end")
        wait_for(lambda: metric(base, args.api_key, "ubatch_requests_cancelled_total") > cancelled_before, 30,
                 "ubatch_requests_cancelled_total to rise")
        length = len(r["text"])
        time.sleep(1.0)
        check(len(last_reply()["text"]) == length, "the text kept growing after Stop")
        driver.find_element(By.ID, "ignore-eos").click()  # off again
        print(f"  stopped after {r['tokens']} tokens | {r['stats']}")

    def dashboard_moves_under_load():
        nonlocal load
        load = subprocess.Popen(
            [args.ubatch, "load", "--url", base, "--api-key", args.api_key, "--users", str(args.users),
             "--duration", str(args.load_seconds), "--prompt-tokens", "32:256", "--max-tokens", "16:128",
             "--urgent-share", "0.1", "--urgent-priority", "10", "-q"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        driver.find_element(By.ID, "tab-dashboard").click()
        wait_for(lambda: js("return location.hash") == "#dashboard", 5, "the dashboard tab")
        snap = lambda: js("return window.ubatchDashboard.snapshot()")
        wait_for(lambda: (snap() or {}).get("sequences", {}).get("running", 0) > 0, 120, "running sequences under load")
        first = snap()
        shown_first = driver.find_element(By.ID, "counts-requests").text
        time.sleep(6)
        wait_for(lambda: snap()["tokens"]["generated"] > first["tokens"]["generated"], 60, "generated tokens to grow")
        second = snap()
        check(second["tokens"]["steps"] > first["tokens"]["steps"], "steps did not move")
        check(second["now_ms"] > first["now_ms"], "the snapshot clock did not move")
        tiles = {i: driver.find_element(By.ID, i).text for i in ("t-tps", "t-seqs", "t-kv", "t-fill", "t-ttft", "t-itl")}
        check(all(v and v != "–" for v in tiles.values()), f"empty tiles: {tiles}")
        # Every tile's value fits its tile (a cut one ended in an ellipsis: "563 ms / 56…").
        cut = js("""return [...document.querySelectorAll('.tile .value')]
            .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.id + ': ' + e.textContent);""")
        check(not cut, f"tile values cut at the tile's width: {cut}")
        wait_for(lambda: float(driver.find_element(By.ID, "t-tps").text.replace(",", "") or 0) > 0, 30,
                 "output tokens/s above 0")
        # What the page shows moved too (generated tokens, steps, finished requests).
        check(driver.find_element(By.ID, "counts-requests").text != shown_first, "the request counters did not change")
        # The batch chart: both kinds of tokens in the last minute, and pixels of both colours.
        drawn = wait_for(lambda: (lambda d: d if d["decode"] > 0 and d["prefill"] > 0 else None)(
            js("return window.ubatchDashboard.drawn()")), 60, "decode and prefill tokens in the batch chart")
        pixels = js("""
            const c = document.getElementById('chart-batch');
            const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            const rgb = (name) => {
              const s = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
              return [1, 3, 5].map((i) => parseInt(s.slice(i, i + 2), 16));
            };
            const count = (col) => { let n = 0;
              for (let i = 0; i < px.length; i += 4)
                if (Math.abs(px[i] - col[0]) < 8 && Math.abs(px[i + 1] - col[1]) < 8 && Math.abs(px[i + 2] - col[2]) < 8) ++n;
              return n; };
            return {decode: count(rgb('--decode')), prefill: count(rgb('--prefill'))};""")
        check(pixels["decode"] > 100 and pixels["prefill"] > 100, f"batch chart pixels {pixels}")
        rows = wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#requests-body tr")), 30,
                        "rows in the requests table")
        states = set(js("return [...document.querySelectorAll('#requests-body .state')].map((e) => e.textContent)"))
        check(states <= {"waiting", "prefilling", "decoding", "preempted"}, f"states {states}")
        check("decoding" in states, f"no decoding request in the table: {states}")
        print(f"  drawn {drawn}, pixels {pixels}, {rows} table rows, states {sorted(states)}, tiles {tiles}")

    def page_keeps_up_under_load():
        # Main-thread responsiveness: gaps between animation frames over 3 s, and how long an
        # input-to-paint round trip (a click on a tab button's handler) takes, while snapshots
        # of the loaded server arrive 4 times a second.
        frames = driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const gaps = []; let last = performance.now(); const end = last + 3000;
            function tick(t) { gaps.push(t - last); last = t; if (t < end) requestAnimationFrame(tick); else done(gaps); }
            requestAnimationFrame(tick);""")
        frames = sorted(frames)
        stats = js("return window.ubatchDashboard.stats()")
        running = js("return window.ubatchDashboard.snapshot().sequences")
        check(stats["frames"] >= 8, f"only {stats['frames']} snapshots arrived")
        check(len(frames) >= 10, f"only {len(frames)} animation frames in 3 s")
        p = lambda a, q: a[min(len(a) - 1, int(q * len(a)))]
        print(f"  under load ({running}): snapshots {stats['frames']}, gap p50 {stats['gap_p50_ms']:.0f} ms, "
              f"max {stats['gap_max_ms']:.0f} ms; page update per snapshot p50 {stats['draw_p50_ms']:.1f} ms, "
              f"max {stats['draw_max_ms']:.1f} ms; animation frame gap p50 {p(frames, 0.5):.1f} ms, "
              f"p99 {p(frames, 0.99):.1f} ms, max {frames[-1]:.1f} ms over {len(frames)} frames")

    def screenshot_is_written():
        driver.execute_script("window.scrollTo(0, 0)")
        time.sleep(0.6)  # one more snapshot drawn
        check(driver.save_screenshot(args.screenshot), "save_screenshot failed")
        with open(args.screenshot, "rb") as f:
            data = f.read()
        check(data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
        width, height = struct.unpack(">II", data[16:24])
        check(width >= 800 and height >= 600, f"{width}x{height}")
        check(30_000 < len(data) < 3_000_000, f"{len(data)} bytes")
        print(f"  {args.screenshot}: {width}x{height}, {len(data)} bytes")

    def no_console_errors():
        logs()
        errors = [e for e in console if e["level"] == "SEVERE"]
        check(not errors, f"console errors: {json.dumps(errors, indent=1)}")

    checks = [page_loads_and_asks_for_the_key, chat_reply_streams_into_the_page, stop_button_cancels_a_long_reply,
              dashboard_moves_under_load, page_keeps_up_under_load, screenshot_is_written, no_console_errors]
    passed = failed = 0
    try:
        for fn in checks:
            try:
                fn()
                print(f"PASS {fn.__name__}", flush=True)
                passed += 1
            except Exception:  # noqa: BLE001 — report every failure, keep going
                print(f"FAIL {fn.__name__}", flush=True)
                traceback.print_exc(file=sys.stdout)
                failed += 1
    finally:
        if load is not None and load.poll() is None:
            load.send_signal(signal.SIGINT)
            try:
                load.wait(timeout=30)
            except subprocess.TimeoutExpired:
                load.kill()
                load.wait()
        driver.quit()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
