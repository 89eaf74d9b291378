"""A headless Chromium driven over the DevTools protocol on a pipe (standard library only).

``--remote-debugging-pipe`` makes Chromium read commands on fd 3 and write replies and events
on fd 4, each a JSON message ended by a NUL byte. ``open_page`` loads a file and returns what a
test needs: uncaught exceptions, console errors, log errors (CSP violations land there),
JavaScript dialogs (``alert``), every network request, and a way to evaluate expressions.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--disable-extensions", "--mute-audio",
         "--remote-debugging-pipe")


def find_chromium() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class Browser:
    """One Chromium process; use as a context manager."""

    def __init__(self, executable: str, timeout: float = 30.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="trainprof-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Move the child's ends above 4, so that placing them at 3 and 4 cannot clobber one.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w)]
        for fd in (to_child_r, from_child_w):
            os.close(fd)

        def pipe_to_3_and_4() -> None:  # in the child, before exec
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self._proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile}", "about:blank"],
            preexec_fn=pipe_to_3_and_4, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for fd in high:
            os.close(fd)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.send("Browser.close", wait=False)
            self._proc.wait(timeout=10)
        except Exception:
            self._proc.kill()
            self._proc.wait(timeout=10)
        finally:
            for fd in (self._to_child, self._from_child):
                with contextlib.suppress(OSError):
                    os.close(fd)
            shutil.rmtree(self._profile, ignore_errors=True)

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             wait: bool = True) -> dict[str, Any]:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        if not wait:
            return {}
        reply = self._until(lambda m: m.get("id") == self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str) -> dict[str, Any]:
        for m in self.events:
            if m.get("method") == method:
                return m
        return self._until(lambda m: m.get("method") == method)

    def _until(self, wanted) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "method" in msg:
                    self.events.append(msg)
                    if msg["method"] == "Page.javascriptDialogOpening":
                        self.send("Page.handleJavaScriptDialog", {"accept": True},
                                  msg.get("sessionId"), wait=False)
                if wanted(msg):
                    return msg
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self._buf += chunk

    def pump(self, seconds: float) -> None:
        """Collect events for a while (late errors, timers)."""
        try:
            old, self.timeout = self.timeout, seconds
            self._until(lambda m: False)
        except TimeoutError:
            pass
        finally:
            self.timeout = old


class Page:
    """A loaded page: its session, and the events seen while it loaded."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def _events(self, method: str) -> list[dict[str, Any]]:
        return [m["params"] for m in self.browser.events
                if m.get("method") == method and m.get("sessionId") == self.session]

    @property
    def exceptions(self) -> list[str]:
        return [json.dumps(p["exceptionDetails"]) for p in self._events("Runtime.exceptionThrown")]

    @property
    def console_errors(self) -> list[str]:
        out = [json.dumps(p) for p in self._events("Runtime.consoleAPICalled")
               if p.get("type") in ("error", "assert")]
        out += [p["entry"].get("text", "") for p in self._events("Log.entryAdded")
                if p["entry"].get("level") == "error"]
        return out

    @property
    def dialogs(self) -> list[str]:
        return [p.get("message", "") for p in self._events("Page.javascriptDialogOpening")]

    @property
    def requests(self) -> list[str]:
        return [p["request"]["url"] for p in self._events("Network.requestWillBeSent")]

    def evaluate(self, expression: str) -> Any:
        result = self.browser.send("Runtime.evaluate",
                                   {"expression": expression, "returnByValue": True},
                                   self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.browser.send("Page.captureScreenshot", {"format": "png"}, self.session)
        path.write_bytes(base64.b64decode(data["data"]))
        return path


def open_page(browser: Browser, path: Path, settle: float = 0.5) -> Page:
    """Load ``path`` in a fresh tab with every event domain on; wait for its load event."""
    target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})
    sid = session["sessionId"]
    for domain in ("Runtime", "Log", "Page", "Network"):
        browser.send(f"{domain}.enable", session=sid)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False}, sid)
    browser.events.clear()
    browser.send("Page.navigate", {"url": path.resolve().as_uri()}, sid)
    browser._until(lambda m: m.get("method") == "Page.loadEventFired"
                   and m.get("sessionId") == sid)
    browser.pump(settle)
    return Page(browser, sid)
