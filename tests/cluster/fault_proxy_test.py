#!/usr/bin/env python3
"""Tests of fault_proxy.FaultProxy against a threaded echo server on
loopback: bytes through intact in every mode that forwards, latency and
rate caps at least what was asked (upper bounds only generous ones), a
black hole that keeps connections open and loses bytes, RST on reset,
ECONNREFUSED on refuse, and the control socket of the proxy as a process.
No sleeps: every wait is on a condition with a timeout."""
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fault_proxy import FaultProxy  # noqa: E402

GENEROUS = 20.0  # seconds: an upper bound no healthy run comes near


def wait_for(cond, timeout=GENEROUS, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.005)
    raise AssertionError(f"{what} not reached in {timeout} s")


class EchoServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True

    def __init__(self):
        self.received = 0
        self.lock = threading.Lock()

        class Handler(socketserver.BaseRequestHandler):
            def handle(h):
                while True:
                    try:
                        data = h.request.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    with self.lock:
                        self.received += len(data)
                    try:
                        h.request.sendall(data)
                    except OSError:
                        return

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self):
        return self.server_address[1]


def recv_exactly(sock, n, timeout=GENEROUS):
    sock.settimeout(timeout)
    out = bytearray()
    while len(out) < n:
        data = sock.recv(min(65536, n - len(out)))
        if not data:
            raise AssertionError(f"EOF after {len(out)} of {n} bytes")
        out += data
    return bytes(out)


def echo_through(port, payload):
    """Sends payload while receiving its echo; returns (echo, seconds)."""
    with socket.create_connection(("127.0.0.1", port), timeout=GENEROUS) as s:
        t0 = time.monotonic()
        sender = threading.Thread(target=s.sendall, args=(payload,))
        sender.start()
        got = recv_exactly(s, len(payload))
        sender.join()
        return got, time.monotonic() - t0


class FaultProxyTest(unittest.TestCase):
    def setUp(self):
        self.echo = EchoServer()
        self.proxy = FaultProxy(self.echo.port)
        self.port = self.proxy.start()

    def tearDown(self):
        self.proxy.close()
        self.echo.shutdown()
        self.echo.server_close()

    def test_pass_forwards_every_byte(self):
        payload = os.urandom(4 << 20)
        got, _ = echo_through(self.port, payload)
        self.assertEqual(got, payload)
        st = self.proxy.stats()
        self.assertEqual(st["written"], {"up": len(payload), "down": len(payload)})
        self.assertEqual(st["accepted"], 1)

    def test_delay_adds_latency_each_way_and_keeps_order(self):
        self.proxy.delay(200)
        with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s:
            msgs = [f"message {i};".encode() for i in range(20)]
            t0 = time.monotonic()
            for m in msgs:
                s.sendall(m)
            got = recv_exactly(s, sum(map(len, msgs)))
            rtt = time.monotonic() - t0
        self.assertEqual(got, b"".join(msgs))       # in order, nothing lost
        # Up and down each add 200 ms; chunks are pipelined, not 20 x 400.
        self.assertGreaterEqual(rtt, 0.4)
        self.assertLess(rtt, 0.4 + GENEROUS / 4)
        self.proxy.pass_()
        _, t = echo_through(self.port, b"x" * 100)
        self.assertLess(t, 0.4, "pass after delay: no latency added to new chunks")

    def test_slow_caps_the_rate(self):
        rate = 500_000
        payload = os.urandom(400_000)
        self.proxy.slow(rate)
        got, t = echo_through(self.port, payload)
        self.assertEqual(got, payload)
        # Up and down are paced at once (the echo streams back as it
        # reads), so the whole takes about len / rate: 0.8 s.
        self.assertGreaterEqual(t, 0.95 * len(payload) / rate)
        self.assertLess(t, GENEROUS)

    def test_blackhole_keeps_connections_and_loses_bytes(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s:
            s.sendall(b"before")
            self.assertEqual(recv_exactly(s, 6), b"before")
            self.proxy.blackhole()
            s.sendall(b"into the hole")
            wait_for(lambda: self.proxy.stats()["discarded"]["up"] == 13, what="13 bytes discarded")
            self.assertEqual(self.echo.received, 6)   # the target never saw them
            s.setblocking(False)
            with self.assertRaises(BlockingIOError):  # open, silent: no EOF, no data
                s.recv(1)
            s.setblocking(True)
            # A new connection is accepted and swallowed too.
            with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s2:
                s2.sendall(b"new")
                wait_for(lambda: self.proxy.stats()["discarded"]["up"] == 16,
                         what="the new connection's bytes discarded")
            # Healing resets the connections that lost bytes ...
            self.proxy.pass_()
            s.settimeout(GENEROUS)
            with self.assertRaises(ConnectionResetError):
                s.recv(1)
        # ... and new ones forward again.
        got, _ = echo_through(self.port, b"after")
        self.assertEqual(got, b"after")

    def test_stall_holds_bytes_and_loses_none(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s:
            s.sendall(b"a")
            self.assertEqual(recv_exactly(s, 1), b"a")
            self.proxy.stall()
            s.sendall(b"held")
            s.setblocking(False)
            with self.assertRaises(BlockingIOError):
                s.recv(1)
            s.setblocking(True)
            self.assertEqual(self.echo.received, 1)
            self.proxy.pass_()
            self.assertEqual(recv_exactly(s, 4), b"held")

    def test_reset_sends_rst_to_both_sides(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s:
            s.sendall(b"hello")
            self.assertEqual(recv_exactly(s, 5), b"hello")
            self.assertEqual(self.proxy.reset(), 1)
            s.settimeout(GENEROUS)
            with self.assertRaises(ConnectionResetError):
                s.recv(1)
        self.assertEqual(self.proxy.stats()["open"], 0)
        got, _ = echo_through(self.port, b"again")           # mode unchanged: pass
        self.assertEqual(got, b"again")

    def test_refuse_new_connections_keep_old_ones(self):
        with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s:
            s.sendall(b"first")             # accepted by the proxy, not just the kernel
            self.assertEqual(recv_exactly(s, 5), b"first")
            self.proxy.refuse()
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS)
            s.sendall(b"still here")
            self.assertEqual(recv_exactly(s, 10), b"still here")
        self.proxy.pass_()
        got, _ = echo_through(self.port, b"open again")
        self.assertEqual(got, b"open again")

    def test_target_down_is_a_reset(self):
        self.echo.shutdown()
        self.echo.server_close()
        # The proxy resets the client once its dial of the target fails; on a
        # loaded machine that RST can come before connect() returns, so the
        # reset may surface from the connect or from the first recv.
        with self.assertRaises(ConnectionResetError):
            with socket.create_connection(("127.0.0.1", self.port), timeout=GENEROUS) as s:
                s.settimeout(GENEROUS)
                s.recv(1)
        self.echo = EchoServer()       # for tearDown

    def test_bad_mode_names_itself(self):
        with self.assertRaisesRegex(ValueError, "mode: expected one of"):
            self.proxy.set_mode("jitter")
        with self.assertRaisesRegex(ValueError, "delay: expected a positive value"):
            self.proxy.set_mode("delay", 0)


class FaultProxyProcessTest(unittest.TestCase):
    def test_control_socket(self):
        echo = EchoServer()
        p = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "fault_proxy.py"), "--target", f"127.0.0.1:{echo.port}"],
            stdout=subprocess.PIPE, text=True)
        try:
            words = p.stdout.readline().split()
            self.assertEqual(words[:2], ["listening", "on"])
            port = int(words[2].rsplit(":", 1)[1])
            control = int(words[4].rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", control), timeout=GENEROUS) as c:
                f = c.makefile("rw")

                def ask(line):
                    f.write(line + "\n")
                    f.flush()
                    return json.loads(f.readline())

                self.assertEqual(ask("delay 150")["mode"], "delay")
                got, t = echo_through(port, b"ping")
                self.assertEqual(got, b"ping")
                self.assertGreaterEqual(t, 0.3)
                a = ask("warp 9")
                self.assertFalse(a["ok"])
                self.assertIn("unknown command 'warp'", a["error"])
                st = ask("pass")["stats"]
                self.assertEqual(st["written"], {"up": 4, "down": 4})
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
            echo.shutdown()
            echo.server_close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
