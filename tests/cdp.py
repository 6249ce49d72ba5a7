"""Headless Chromium driven over the DevTools protocol, with nothing but the standard library: a minimal
WebSocket client (RFC 6455: text frames, masked from the client, fragments, ping) and a page that can be
loaded, evaluated, clicked with real mouse events and photographed, and that keeps every console error and
uncaught exception the page (or a frame in it) reports."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path


class WebSocket:
    def __init__(self, url: str, timeout: float = 60):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        assert m, url
        self.sock = socket.create_connection((m[1], int(m[2])), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(f"GET {m[3]} HTTP/1.1\r\nHost: {m[1]}:{m[2]}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            assert chunk, "the DevTools socket closed during the handshake"
            head += chunk
        assert head.split(b"\r\n")[0].split()[1] == b"101", head

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            assert chunk, "the DevTools socket closed"
            buf += chunk
        return buf

    def _frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode]) + (bytes([0x80 | n]) if n < 126 else
                                         bytes([0x80 | 126]) + struct.pack(">H", n) if n < 1 << 16 else
                                         bytes([0x80 | 127]) + struct.pack(">Q", n))
        mask = os.urandom(4)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def send(self, text: str) -> None:
        self._frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            n = struct.unpack(">H", self._exact(2))[0] if n == 126 else struct.unpack(">Q", self._exact(8))[0] if n == 127 else n
            mask = self._exact(4) if b1 & 0x80 else b""
            data = self._exact(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            opcode = b0 & 0x0F
            if opcode == 0x9:  # ping
                self._frame(0xA, data)
                continue
            if opcode == 0x8:
                raise ConnectionError("the DevTools socket was closed")
            message += data
            if b0 & 0x80:
                return message.decode()

    def close(self) -> None:
        self.sock.close()


class Page:
    """One tab of a fresh headless Chromium. `errors`: every console error, failed console.assert and uncaught
    exception so far, as text."""

    def __init__(self, width: int = 1400, height: int = 900):
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        assert browser, "headless Chromium is needed (apt-get install chromium)"
        self.profile = tempfile.mkdtemp(prefix="cdp-")
        self.proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--remote-debugging-port=0", f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.time() + 60
        while port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            port = m and m[1]
            assert line or self.proc.poll() is None, "Chromium exited before it listened"
        assert port, "Chromium did not say where DevTools listens"
        # Chromium goes on writing to stderr: read it away so that it never blocks on a full pipe
        self.drain = threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True)
        self.drain.start()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            target = next(t for t in json.load(r) if t["type"] == "page")
        self.ws = WebSocket(target["webSocketDebuggerUrl"])
        self.next_id = 0
        self.errors: list[str] = []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _event(self, msg: dict) -> None:
        method, p = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            self.errors.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}")

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        me = self.next_id
        self.ws.send(json.dumps({"id": me, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == me:
                assert "error" not in msg, f"{method}: {msg['error']}"
                return msg["result"]
            self._event(msg)

    def js(self, expression: str):
        """The value of a JavaScript expression (awaited if it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in r, f"{expression[:200]}: {r['exceptionDetails']}"
        return r["result"].get("value")

    def settle(self, ms: int = 100) -> None:
        """Let the page render what the last action set off (two frames, then `ms` more)."""
        self.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(r, %d))))" % ms)

    def load(self, url: str, ready: str, timeout: float = 60) -> None:
        """Open `url` and wait until the expression `ready` is true."""
        self.call("Page.navigate", url=url)
        self.wait(ready, timeout)

    def wait(self, condition: str, timeout: float = 30) -> None:
        deadline = time.time() + timeout
        while not self.js(f"!!({condition})"):
            assert time.time() < deadline, f"timed out waiting for {condition}; errors: {self.errors}"
            time.sleep(0.1)

    def click(self, element: str) -> None:
        """A real left click (mouse events at its centre) on the element the JavaScript expression names."""
        box = self.js(f"(() => {{ const el = {element}; if (!el) return null; el.scrollIntoView({{block: 'center'}});"
                      " const r = el.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        assert box, f"nothing to click: {element}"
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
        self.settle()

    def screenshot(self, png: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        png.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (ConnectionError, AssertionError, OSError):
            pass
        self.ws.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.drain.join(timeout=20)
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
