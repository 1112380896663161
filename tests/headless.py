"""Debian's headless Chromium for the browser tests (``make test`` installs it when missing): ``--dump-dom`` of a
page (:func:`dump_dom`), or a page driven over the DevTools protocol (:class:`DevTools`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

#: Offline and quiet: no sandbox (root in CI), no GPU, no background connections this machine would refuse.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "Debian's chromium is not installed: `make test` installs "
            "it (apt-get install chromium) before running the tests."
        )
    return found


def dump_dom(url: str, profile: Path, *extra: str, timeout: float = 120) -> str:
    """The DOM of ``url`` after its scripts ran (``--dump-dom``), in a fresh profile folder."""
    command = [chromium(), *FLAGS, f"--user-data-dir={profile}", *extra, "--dump-dom", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout).stdout


class DevTools:
    """Headless Chromium driven over the Chrome DevTools protocol (one page, a fresh profile): load a URL,
    evaluate JavaScript, click and type as a user would. ``close()`` ends the browser it started."""

    def __init__(self, profile: Path, width: int = 1280, height: int = 900, timeout: float = 60):
        import json
        import time
        import urllib.request

        import websocket

        profile.mkdir(parents=True, exist_ok=True)
        command = [
            chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--remote-debugging-port=0",
            "about:blank",
        ]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        port_file, deadline = profile / "DevToolsActivePort", time.time() + timeout
        while not (port_file.is_file() and port_file.read_text().strip()):
            if time.time() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as answer:
            page = next(t for t in json.load(answer) if t["type"] == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout, suppress_origin=True)
        self.number = 0

    def send(self, method: str, **params):
        """One DevTools command; its result (events that arrive meanwhile are dropped)."""
        import json

        self.number += 1
        self.socket.send(json.dumps({"id": self.number, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.number:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:80]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 120, what: str = ""):
        """Poll until ``expression`` is truthy; its value."""
        import time

        deadline = time.time() + timeout
        while time.time() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.25)
        raise TimeoutError(f"waited {timeout:.0f} s for {what or expression}")

    def click(self, selector: str, count: int = 1) -> None:
        """Click (``count`` 2: double-click) the middle of the first element matching ``selector``."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect(); return [r.x + r.width "
            f"/ 2, r.y + Math.min(r.height / 2, 12)]; }})()"
        )
        for clicks in range(1, count + 1):
            for kind in ("mousePressed", "mouseReleased"):
                self.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=clicks)

    #: DevTools key descriptions: (key, code, Windows virtual key code).
    KEYS = {
        "Enter": ("Enter", "Enter", 13),
        "End": ("End", "End", 35),
        "Escape": ("Escape", "Escape", 27),
        "s": ("s", "KeyS", 83),
    }
    MODIFIERS = {"Alt": 1, "Control": 2, "Meta": 4, "Shift": 8}

    def press(self, combination: str) -> None:
        """Press a key with its modifiers, e.g. ``"Shift+Enter"`` or ``"Control+s"``."""
        *modifiers, name = combination.split("+")
        key, code, number = self.KEYS[name]
        flags = sum(self.MODIFIERS[m] for m in modifiers)
        for kind in ("rawKeyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent", type=kind, key=key, code=code, windowsVirtualKeyCode=number, modifiers=flags
            )

    def type(self, text: str) -> None:
        """Type ``text`` where the focus is (as an input method commits it)."""
        self.send("Input.insertText", text=text)

    def close(self) -> None:
        try:
            getattr(self, "socket", None) and self.socket.close()
        finally:
            if self.process.poll() is None:
                stop_group(self.process)


def stop_group(process: subprocess.Popen, grace: float = 20) -> None:
    """End a process started in its own session and everything it started: SIGTERM to the group, SIGKILL after
    ``grace`` seconds."""
    import os
    import signal

    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
