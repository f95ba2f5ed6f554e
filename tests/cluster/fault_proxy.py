#!/usr/bin/env python3
"""A fault-injecting TCP proxy for the cluster tests (asyncio, no
dependencies).

It listens on a loopback port and forwards every connection to one target,
byte for byte in both directions, until it is told to misbehave. Modes
(switched at run time; each applies to the connections open now and to new
ones):

  pass            forward at once (the default)
  blackhole       read and discard every byte in both directions; connections
                  stay open (a peer sees silence, not an error). Bytes were
                  lost, so when the mode changes again every connection that
                  lost bytes is reset: a proxy cannot retransmit the way TCP
                  over a healed partition would (use `stall` for that).
  stall           stop reading (TCP backpressure fills the kernel buffers);
                  nothing is lost, and forwarding resumes on the next mode
  delay MS        deliver every chunk MS milliseconds after it was read, in
                  order (added latency per direction, not a throughput cap)
  slow BYTES_S    cap each direction of each connection at BYTES_S bytes/s
  refuse          close the listening socket: new connections get
                  ECONNREFUSED; open ones keep forwarding (as in `pass`)
and one action:
  reset           close every open connection with a TCP RST (SO_LINGER 0),
                  both sides; the mode stays as it was

In-process: `FaultProxy(target_port).start()` runs the proxy on its own
thread's event loop; its methods (`set_mode`, `blackhole()`, `delay(ms)`,
..., `reset()`, `stats()`) may be called from any thread and return once
the change applies. As a separate process:

    python3 fault_proxy.py --target 127.0.0.1:50061 [--listen 127.0.0.1:0] \\
        [--control 127.0.0.1:0]

prints `listening on HOST:PORT control HOST:PORT`, and the control port
takes one command a line (`pass`, `blackhole`, `stall`, `delay 200`,
`slow 1000000`, `refuse`, `reset`, `stats`) and answers one line of JSON:
{"ok": true, "mode": ..., "stats": {...}} or {"ok": false, "error": ...}.
"""
import argparse
import asyncio
import json
import socket
import struct
import sys
import threading
import time

CHUNK = 65536          # bytes read at a time
QUEUE_CHUNKS = 256     # chunks in flight per direction before reads stop
MODES = ("pass", "blackhole", "stall", "delay", "slow", "refuse")


class _Direction:
    """One direction of one connection: a reader task that reads chunks and
    queues them with their due time, and a writer task that delivers them
    in order no earlier than due (delay) and no faster than the cap
    (slow)."""

    def __init__(self, proxy, conn, name, reader, writer):
        self.proxy, self.conn, self.name = proxy, conn, name
        self.reader, self.writer = reader, writer
        self.queue = asyncio.Queue(QUEUE_CHUNKS)
        self.next_free = 0.0   # slow: the earliest time the next byte may go

    async def read_loop(self):
        p = self.proxy
        try:
            while True:
                await p._flowing.wait()                      # stall
                data = await self.reader.read(CHUNK)
                if not data:
                    break
                # A stall that began while this read waited holds what it
                # read (at most a chunk) until the flow resumes.
                await p._flowing.wait()
                p.bytes_read[self.name] += len(data)
                if p.mode == "blackhole":
                    self.conn.lost_bytes = True
                    p.bytes_discarded[self.name] += len(data)
                    continue
                due = time.monotonic() + (p.delay_ms / 1000 if p.mode == "delay" else 0)
                await self.queue.put((due, data))
        except (ConnectionError, OSError):
            # A reset on one side is passed on as a reset to the other.
            p._abort(self.conn)
            return
        await self.queue.put((0.0, None))                    # end of stream

    async def write_loop(self):
        p = self.proxy
        try:
            while True:
                due, data = await self.queue.get()
                if data is None:
                    if self.writer.can_write_eof():
                        self.writer.write_eof()
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                view = memoryview(data)
                while view:
                    if p.mode == "slow":
                        # Pace in pieces of 1/50 s of the cap so the rate
                        # holds over short spans too.
                        piece = view[:max(1, p.bytes_per_s // 50)]
                        now = time.monotonic()
                        self.next_free = max(self.next_free, now) + len(piece) / p.bytes_per_s
                        await asyncio.sleep(self.next_free - now)
                    else:
                        piece = view
                    self.writer.write(piece)
                    await self.writer.drain()
                    p.bytes_written[self.name] += len(piece)
                    view = view[len(piece):]
        except (ConnectionError, OSError):
            p._abort(self.conn)


class _Connection:
    def __init__(self):
        self.lost_bytes = False
        self.writers = []      # client side, target side
        self.tasks = []


class FaultProxy:
    """A TCP proxy from 127.0.0.1:listen_port (0: any free port) to
    target_host:target_port with switchable faults. Thread-safe control;
    see the module's docstring for the modes."""

    def __init__(self, target_port, target_host="127.0.0.1", listen_port=0,
                 listen_host="127.0.0.1"):
        self.target = (target_host, target_port)
        self.listen_host, self.listen_port = listen_host, listen_port
        self.mode = "pass"
        self.delay_ms = 0
        self.bytes_per_s = 0
        self.connections = set()
        self.accepted = 0
        self.resets = 0
        self.bytes_read = {"up": 0, "down": 0}       # up: client -> target
        self.bytes_written = {"up": 0, "down": 0}
        self.bytes_discarded = {"up": 0, "down": 0}
        self._loop = None
        self._server = None
        self._thread = None
        self._flowing = None

    # ------------------------------------------------------------ lifecycle
    def start(self):
        """Starts the event loop thread and the listener; returns the port."""
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                        name=f"fault-proxy-{self.target[1]}")
        self._thread.start()
        if not ready.wait(30) or self._server is None:
            raise RuntimeError(f"fault proxy to {self.target}: listener did not start")
        return self.listen_port

    @property
    def address(self):
        return f"{self.listen_host}:{self.listen_port}"

    def _run(self, ready):
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()

        async def listen():
            await self._listen()
            ready.set()

        self._loop.run_until_complete(listen())
        self._loop.run_forever()

    async def _listen(self):
        self._server = await asyncio.start_server(self._accept, self.listen_host,
                                                  self.listen_port, reuse_address=True)
        self.listen_port = self._server.sockets[0].getsockname()[1]

    def close(self):
        if self._loop is None:
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        self._loop = None

    async def _close(self):
        if self._server is not None:
            self._server.close()
            self._server = None
        for c in list(self.connections):
            self._abort(c)
        for _ in range(3):   # let the aborted connections' tasks finish
            await asyncio.sleep(0)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    # -------------------------------------------------------------- control
    def _call(self, coro, timeout=30):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def set_mode(self, mode, value=None):
        """mode: one of MODES; value: milliseconds for delay, bytes/s for slow."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if mode in ("delay", "slow") and (value is None or int(value) <= 0):
            raise ValueError(f"{mode}: expected a positive value, got {value!r}")
        return self._call(self._set_mode(mode, int(value) if value is not None else None))

    async def _set_mode(self, mode, value):
        old = self.mode
        if old == "blackhole" and mode != "blackhole":
            # Their byte streams have holes: end them rather than forward
            # a corrupted stream.
            for c in [c for c in self.connections if c.lost_bytes]:
                self._abort(c)
        if mode == "delay":
            self.delay_ms = value
        if mode == "slow":
            self.bytes_per_s = value
        if mode == "refuse" and self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        if mode != "refuse" and self._server is None:
            await self._listen()
        self.mode = mode
        if mode == "stall":
            self._flowing.clear()
        else:
            self._flowing.set()
        return self.mode

    def pass_(self):
        return self.set_mode("pass")

    def blackhole(self):
        return self.set_mode("blackhole")

    def stall(self):
        return self.set_mode("stall")

    def delay(self, ms):
        return self.set_mode("delay", ms)

    def slow(self, bytes_per_s):
        return self.set_mode("slow", bytes_per_s)

    def refuse(self):
        return self.set_mode("refuse")

    def reset(self):
        """RSTs every open connection (both sides); returns how many."""
        return self._call(self._reset())

    async def _reset(self):
        conns = list(self.connections)
        for c in conns:
            self._abort(c)
        return len(conns)

    def stats(self):
        return self._call(self._stats())

    async def _stats(self):
        return {"mode": self.mode, "delay_ms": self.delay_ms, "bytes_per_s": self.bytes_per_s,
                "open": len(self.connections), "accepted": self.accepted,
                "resets": self.resets, "read": dict(self.bytes_read),
                "written": dict(self.bytes_written), "discarded": dict(self.bytes_discarded)}

    # ----------------------------------------------------------- forwarding
    def _abort(self, conn):
        """Both sockets closed with RST."""
        if conn not in self.connections:
            return
        self.connections.discard(conn)
        self.resets += 1
        for w in conn.writers:
            sock = w.get_extra_info("socket")
            try:
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
            except OSError:
                pass
            w.transport.abort()
        for t in conn.tasks:
            t.cancel()

    async def _accept(self, c_reader, c_writer):
        self.accepted += 1
        try:
            t_reader, t_writer = await asyncio.open_connection(*self.target)
        except OSError:
            # The target is down: the client sees its connection reset, as
            # it would connecting to the target itself.
            conn = _Connection()
            conn.writers = [c_writer]
            self.connections.add(conn)
            self._abort(conn)
            return
        for w in (c_writer, t_writer):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection()
        conn.writers = [c_writer, t_writer]
        self.connections.add(conn)
        up = _Direction(self, conn, "up", c_reader, t_writer)
        down = _Direction(self, conn, "down", t_reader, c_writer)
        conn.tasks = [asyncio.ensure_future(x) for x in
                      (up.read_loop(), up.write_loop(), down.read_loop(), down.write_loop())]
        try:
            await asyncio.gather(*conn.tasks, return_exceptions=True)
        finally:
            if conn in self.connections:
                self.connections.discard(conn)
                for w in conn.writers:
                    w.close()


# ---------------------------------------------------------------- process
def _control_command(proxy, line):
    words = line.split()
    if not words:
        raise ValueError("empty command")
    cmd, rest = words[0], words[1:]
    if cmd == "reset":
        proxy.reset()
    elif cmd == "stats":
        pass
    elif cmd in MODES:
        proxy.set_mode(cmd, rest[0] if rest else None)
    else:
        raise ValueError(f"unknown command {cmd!r}; expected one of "
                         f"{', '.join(MODES + ('reset', 'stats'))}")
    return proxy.stats()


async def _serve_control(proxy, host, port):
    async def handle(reader, writer):
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                st = await asyncio.get_running_loop().run_in_executor(
                    None, _control_command, proxy, line.decode().strip())
                answer = {"ok": True, "mode": st["mode"], "stats": st}
            except (ValueError, IndexError) as e:
                answer = {"ok": False, "error": str(e)}
            writer.write((json.dumps(answer) + "\n").encode())
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, host, port)
    return server, server.sockets[0].getsockname()[1]


def _split(hostport):
    host, _, port = hostport.rpartition(":")
    return host or "127.0.0.1", int(port)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="HOST:PORT to forward to")
    ap.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT [127.0.0.1:0]")
    ap.add_argument("--control", default="127.0.0.1:0", help="HOST:PORT [127.0.0.1:0]")
    args = ap.parse_args()
    th, tp = _split(args.target)
    lh, lp = _split(args.listen)
    ch, cp = _split(args.control)
    proxy = FaultProxy(tp, target_host=th, listen_port=lp, listen_host=lh)
    proxy.start()

    async def control():
        server, port = await _serve_control(proxy, ch, cp)
        print(f"listening on {proxy.address} control {ch}:{port}", flush=True)
        await server.serve_forever()

    try:
        asyncio.run(control())
    except KeyboardInterrupt:
        pass
    finally:
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
