#!/usr/bin/env python3
"""HTTP/3 client for tollgate's integration tests (tests/h3.rs), on aioquic 1.7.2.

The tests spawn it as ``python3 h3client.py --url URL [flags]``, read ONE JSON object from
stdout and look at the exit status; diagnostics go to stderr. aioquic is installed by
``.ci/run`` (``pip install aioquic==1.7.2``).

Modes
=====

Normal (requests)
-----------------
``--url https://HOST:PORT/PATH``  (required) the request target. HOST is the TLS server name
    (SNI, and the name the certificate is checked against) and, with PORT, the ``:authority``.
    IPv6 literals in brackets work: ``https://[::1]:4433/``.
``--connect ADDR:PORT``  connect to ADDR:PORT instead of HOST:PORT (``127.0.0.1:4433``,
    ``[::1]:4433``); SNI and ``:authority`` still come from the URL.
``--ca FILE``  trust the CA (or self-signed certificate) in PEM FILE.
``--insecure``  do not verify the server's certificate at all.
    (neither: the system's trust store.)
``--method M``  request method (default GET).
``--header 'Name: value'``  a request field (repeatable). Names are lower-cased. A name
    starting with ``:`` replaces that pseudo-header (``--header ':path: /x'``).
    ``user-agent: tollgate-h3client`` is sent unless a user-agent is given.
``--data-file FILE``  request body: FILE's bytes, streamed in 64 KiB chunks with flow-control
    back-pressure (never all buffered).
``--upload-bytes N``  request body: N deterministic pseudo-random bytes (64 KiB chunks of
    ``random.Random(0x70119a7e).randbytes``), generated while sending.
    With either body option ``upload_sha256`` is reported, and ``content-length: SIZE`` is sent
    unless ``--header`` gives one or ``--no-content-length`` is set.
``--no-content-length``  send a body without a content-length field.
``--count N``  number of requests (default 1), spread round-robin over the connections.
``--concurrency K``  requests in flight at once on each connection, each on its own stream
    (default 1). With K = 100 a connection has 100 streams open at once (aioquic waits for the
    server's MAX_STREAMS when its limit is lower).
``--connections C``  separate QUIC connections, run at the same time (default 1).
``--timeout SECONDS``  bound on the whole run (default 60): on expiry, ``ok`` is false,
    ``error`` says so, and what was answered so far is reported.
``--zero-rtt``  make one request on a first connection (connection 0) and keep its session
    ticket, then open a second connection (1) with the ticket and send its first request
    immediately, as 0-RTT early data when the ticket allows it; the ``--count`` requests go on
    that second connection. ``responses`` then holds 1 + count entries.
    ``early_data_attempted``: the ticket allowed early data (the server sent
    ``max_early_data_size``) so the request left in 0-RTT packets; ``early_data_accepted``: the
    server accepted it. Without --zero-rtt both are null.
``--migrate``  on each connection: after the first response, move the connection to a new
    UDP socket (a new local port, as a NAT rebinding would; the old socket is closed) and
    send the remaining requests from there. ``migrations`` reports the local ports (old, new).
``--body-out sha256|text|none``  (default sha256) response bodies are hashed while they
    stream (``bytes`` + ``sha256``; ``body`` null: a 100 MiB answer is never held);
    ``text``: the same plus ``body``, the body decoded as UTF-8 (invalid bytes replaced), for
    small answers; ``none``: only ``bytes`` counted, ``sha256`` and ``body`` null.
``--verbose``  progress on stderr.

Output (stdout, one line)::

    {"ok": bool, "error": str|null,
     "responses": [{"status": int, "headers": [[name, value], ...], "bytes": int,
                    "sha256": str|null, "body": str|null, "trailers": [[name, value], ...],
                    "interim": [int, ...], "stream_id": int, "connection": int,
                    "request": int}, ...],            # sorted by request index
     "errors": [{"request": int, "connection": int, "stream_id": int|null, "error": str,
                 "error_code": int|null}, ...],   # requests that got no complete response
     "alpn": "h3"|null, "early_data_attempted": bool|null, "early_data_accepted": bool|null,
     "upload_sha256": str|null, "migrations": [[old_port, new_port], ...],
     "max_in_flight": int, "elapsed_s": float}

``headers`` includes ``:status`` (first) as the server sent it; ``trailers`` is a HEADERS
frame after the body; ``interim`` lists 1xx statuses seen before the
final answer. A request counts as answered when its stream ended after a final status (any
status). A RESET_STREAM from the server or a connection close before that is an error entry
(``error_code``: the HTTP/3 / QUIC code); so is a request the timeout cut (``connection``
null). ``max_in_flight``: the most requests that were in flight at once (all connections).
A server that answers before the whole request body is sent without STOP_SENDING gets the
rest of the body aborted with RESET_STREAM(H3_NO_ERROR).

Exit status: 0 when every request got a complete response, 1 otherwise (errors, timeout),
2 for bad arguments.

Hostile modes
-------------
``--raw-datagrams FILE_OR_DIR``  send each file's bytes as one UDP datagram to the server
    (``--connect``, else the URL's host:port) and exit: FILE, or every regular file of DIR in
    name order (a malformed-packet corpus). ``--raw-interval MS`` (default 0) pauses between
    datagrams. Output ``{"ok": true, "error": null, "datagrams_sent": N, "bytes_sent": B,
    "elapsed_s": s}``, exit 0 (1 if a send failed).
``--qpack-bomb``  open a connection and send one request whose header section is abusive,
    then report how the server reacted. ``--bomb-mode``:
      ``fields`` (default): one HEADERS frame of ``--bomb-fields`` (1000) literal fields
          (literal names ``x-bomb-NNNN``, no Huffman, no dynamic table) of ``--bomb-field-size``
          (8192) bytes each: an ~8 MiB field section (``--bomb-fields 1 --bomb-field-size
          65536``: a single field far above 32 KiB);
      ``encoder``: on the QPACK encoder stream, a Set Dynamic Table Capacity of 1 GiB and
          ``--bomb-fields`` inserts of ``--bomb-field-size``-byte literal entries (beyond any
          capacity a server advertises, typically 0), then a HEADERS frame that refers to them.
    Output ``{"ok": bool, "error": str|null, "outcome": "reset"|"closed"|"status"|"timeout",
    "status": int|null, "error_code": int|null, "reason": str|null, "bytes_sent": int,
    "after_status": int|null, "after_error": str|null, "elapsed_s": s}``:
    ``reset`` = the server reset the request stream (RESET_STREAM or STOP_SENDING;
    error_code its code), ``closed`` = it closed the connection (error_code the CONNECTION_CLOSE
    code), ``status`` = it answered (status; 431 is the polite refusal). ``after_status``: a GET
    of the same URL on a fresh connection afterwards (does the server still serve?).
    ``--bomb-wait S`` (default 10) bounds the wait for the reaction (``timeout`` if none).
    Exit 0 when a reaction was seen and the follow-up GET was answered, 1 otherwise.
``--rapid-reset N``  on one connection, open N request streams (HEADERS and one DATA byte,
    no end) and reset each from the client side (RESET_STREAM + STOP_SENDING,
    H3_REQUEST_CANCELLED) right away; then wait up to ``--bomb-wait`` for the server to close
    the connection. Output ``{"ok", "error", "outcome": "closed"|"open", "error_code",
    "reason", "streams_reset", "after_status", "after_error", "elapsed_s"}``; exit 0 when the
    follow-up GET on a fresh connection was answered.
"""

import argparse
import asyncio
import hashlib
import ipaddress
import json
import os
import random
import socket
import ssl
import sys
import time
from urllib.parse import urlsplit

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StopSendingReceived, StreamReset

CHUNK = 64 * 1024
UPLOAD_SEED = 0x70119A7E
# Unacknowledged request-body bytes per stream before the sender waits for ACKs.
SEND_WINDOW = 1024 * 1024


def log(*a):
    print("h3client:", *a, file=sys.stderr, flush=True)


def body_chunks(args):
    """The request body as an iterator of chunks, and its size (None: no body)."""
    if args.data_file is not None:
        size = os.path.getsize(args.data_file)

        def gen():
            with open(args.data_file, "rb") as f:
                while True:
                    b = f.read(CHUNK)
                    if not b:
                        return
                    yield b

        return gen, size
    if args.upload_bytes is not None:
        n = args.upload_bytes

        def gen():
            rng = random.Random(UPLOAD_SEED)
            left = n
            while left > 0:
                k = min(CHUNK, left)
                yield rng.randbytes(k)
                left -= k

        return gen, n
    return None, None


class Answer:
    def __init__(self, request, connection, stream_id, body_out):
        self.request = request
        self.connection = connection
        self.stream_id = stream_id
        self.status = None
        self.headers = []
        self.trailers = []
        self.interim = []
        self.bytes = 0
        self.hash = hashlib.sha256() if body_out != "none" else None
        self.body = bytearray() if body_out == "text" else None
        self.done = asyncio.get_running_loop().create_future()
        self.stop_sending = None

    def fail(self, error, code=None):
        if not self.done.done():
            self.done.set_result((error, code))

    def to_json(self):
        return {
            "status": self.status,
            "headers": self.headers,
            "bytes": self.bytes,
            "sha256": self.hash.hexdigest() if self.hash is not None else None,
            "body": self.body.decode("utf-8", "replace") if self.body is not None else None,
            "trailers": self.trailers,
            "interim": self.interim,
            "stream_id": self.stream_id,
            "connection": self.connection,
            "request": self.request,
        }


def fields(hs):
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in hs]


class Client(QuicConnectionProtocol):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.h3 = H3Connection(self._quic)
        self.answers = {}
        self.progress = asyncio.Event()
        self.terminated = None  # (error_code, reason)
        self.stream_events = []  # (kind, stream_id, code) for the bomb mode

    def datagram_received(self, data, addr):
        super().datagram_received(data, addr)
        self.progress.set()

    def quic_event_received(self, event):
        if isinstance(event, ConnectionTerminated):
            self.terminated = (event.error_code, event.reason_phrase)
            for a in self.answers.values():
                a.fail(f"connection closed: code {event.error_code:#x} {event.reason_phrase!r}",
                       event.error_code)
        elif isinstance(event, StreamReset):
            self.stream_events.append(("reset", event.stream_id, event.error_code))
            a = self.answers.get(event.stream_id)
            if a is not None:
                a.fail(f"stream reset by the server: code {event.error_code:#x}", event.error_code)
        elif isinstance(event, StopSendingReceived):
            self.stream_events.append(("stop_sending", event.stream_id, event.error_code))
            a = self.answers.get(event.stream_id)
            if a is not None:
                a.stop_sending = event.error_code
        for ev in self.h3.handle_event(event):
            a = self.answers.get(getattr(ev, "stream_id", None))
            if a is None:
                continue
            if isinstance(ev, HeadersReceived):
                if a.status is None:
                    st = dict(ev.headers).get(b":status", b"0")
                    try:
                        st = int(st)
                    except ValueError:
                        a.fail(f"bad :status {st!r}")
                        continue
                    if 100 <= st < 200:
                        a.interim.append(st)
                        continue
                    a.status = st
                    a.headers = fields(ev.headers)
                else:
                    a.trailers = fields(ev.headers)
            elif isinstance(ev, DataReceived):
                a.bytes += len(ev.data)
                if a.hash is not None:
                    a.hash.update(ev.data)
                if a.body is not None:
                    a.body += ev.data
            if getattr(ev, "stream_ended", False):
                if a.status is None:
                    a.fail("stream ended without a final status")
                elif not a.done.done():
                    a.done.set_result(None)
        self.progress.set()

    async def wait_progress(self):
        self.progress.clear()
        try:
            await asyncio.wait_for(self.progress.wait(), 0.05)
        except asyncio.TimeoutError:
            pass

    def unacked(self, sid):
        st = self._quic._streams.get(sid)
        if st is None:
            return 0
        s = st.sender
        return s._buffer_stop - s._buffer_start

    async def request(self, args, req_headers, body, index, conn_index):
        sid = self._quic.get_next_available_stream_id()
        a = Answer(index, conn_index, sid, args.body_out)
        self.answers[sid] = a
        gen, _size = body
        self.h3.send_headers(sid, req_headers, end_stream=gen is None)
        self.transmit()
        if gen is not None:
            for chunk in gen():
                if a.done.done() or a.stop_sending is not None or self.terminated:
                    break
                self.h3.send_data(sid, chunk, end_stream=False)
                self.transmit()
                while self.unacked(sid) > SEND_WINDOW and not a.done.done() \
                        and a.stop_sending is None and not self.terminated:
                    await self.wait_progress()
            else:
                self.h3.send_data(sid, b"", end_stream=True)
                self.transmit()
                gen = None
            if gen is not None and not self.terminated and a.stop_sending is None:
                # Answered before the body was all sent, and not told to stop: abort the rest
                # of the body (RFC 9114 §4.1: H3_NO_ERROR once the response is complete).
                self._quic.reset_stream(sid, 0x100)
                self.transmit()
        err = await a.done
        del self.answers[sid]
        return a, err

    async def migrate(self):
        """A new dual-stack UDP socket (connect() uses one too): connection_made() swaps
        self._transport, so later datagrams leave from the new port; the old one is closed."""
        old = self._transport
        old_port = old.get_extra_info("sockname")[1]
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0, 0, 0))
        await loop.create_datagram_endpoint(lambda: self, sock=sock)
        new_port = self._transport.get_extra_info("sockname")[1]
        # Closing the old transport calls connection_lost() on this protocol, which does
        # nothing in aioquic; detach it first all the same.
        old._protocol = asyncio.DatagramProtocol()
        old.close()
        # Something on the new path now, so the server sees the new address at once.
        self.transmit()
        return old_port, new_port


def parse_target(url, connect_to):
    u = urlsplit(url)
    if u.scheme != "https" or not u.hostname:
        raise ValueError(f"--url must be https://HOST[:PORT]/PATH, not {url!r}")
    port = u.port or 443
    host, cport = u.hostname, port
    if connect_to:
        c = urlsplit("//" + connect_to)
        host, cport = c.hostname, c.port or port
    path = u.path or "/"
    if u.query:
        path += "?" + u.query
    return u, host, cport, path


def make_config(args, server_name):
    cfg = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=server_name,
                            max_data=32 * 1024 * 1024, max_stream_data=8 * 1024 * 1024,
                            idle_timeout=max(5.0, args.timeout))
    if args.insecure:
        cfg.verify_mode = ssl.CERT_NONE
    elif args.ca:
        cfg.load_verify_locations(cafile=args.ca)
    else:
        paths = ssl.get_default_verify_paths()
        if paths.cafile or paths.capath:
            cfg.load_verify_locations(cafile=paths.cafile, capath=paths.capath)
    return cfg


def request_headers(args, u, path, body_size):
    pseudo = {":method": args.method, ":scheme": "https", ":authority": u.netloc,
              ":path": path}
    regular = []
    for h in args.header:
        if h.startswith(":"):
            name, sep, value = h[1:].partition(":")
            name = ":" + name
        else:
            name, sep, value = h.partition(":")
        if not sep:
            raise ValueError(f"--header wants 'Name: value', not {h!r}")
        name, value = name.strip().lower(), value.strip()
        if name.startswith(":"):
            pseudo[name] = value
        else:
            regular.append((name, value))
    names = {n for n, _ in regular}
    if "user-agent" not in names:
        regular.append(("user-agent", "tollgate-h3client"))
    if body_size is not None and "content-length" not in names and not args.no_content_length:
        regular.append(("content-length", str(body_size)))
    return [(k.encode(), v.encode()) for k, v in list(pseudo.items()) + regular]


class Run:
    def __init__(self, args):
        self.args = args
        self.u, self.host, self.port, self.path = parse_target(args.url, args.connect)
        self.body = body_chunks(args)
        self.headers = request_headers(args, self.u, self.path, self.body[1])
        self.responses = []
        self.errors = []
        self.alpn = None
        self.early_attempted = None
        self.early_accepted = None
        self.migrations = []
        self.ticket = None
        self.in_flight = 0
        self.max_in_flight = 0

    async def connection(self, conn_index, requests, zero_rtt_ticket=None, keep_ticket=False):
        a = self.args
        cfg = make_config(a, self.u.hostname)
        wait = True
        if zero_rtt_ticket is not None:
            cfg.session_ticket = zero_rtt_ticket
            wait = False
        tickets = []
        kw = {"session_ticket_handler": tickets.append} if keep_ticket else {}
        made = []  # the protocol, to read why a failed handshake failed

        def make(*pa, **pkw):
            made.append(Client(*pa, **pkw))
            return made[-1]

        if a.verbose:
            log(f"connection {conn_index}: connecting to {self.host}:{self.port}")
        try:
            async with connect(self.host, self.port, configuration=cfg, create_protocol=make,
                               wait_connected=wait, **kw) as client:
                if zero_rtt_ticket is not None:
                    # aioquic offers early data exactly when the ticket carries a size.
                    self.early_attempted = zero_rtt_ticket.max_early_data_size is not None
                sem = asyncio.Semaphore(max(1, a.concurrency))

                async def one(i):
                    async with sem:
                        self.in_flight += 1
                        self.max_in_flight = max(self.max_in_flight, self.in_flight)
                        try:
                            await one_inner(i)
                        finally:
                            self.in_flight -= 1

                async def one_inner(i):
                    if True:
                        try:
                            ans, err = await client.request(a, self.headers, self.body, i,
                                                            conn_index)
                        except Exception as e:  # noqa: BLE001 - reported per request
                            self.errors.append({"request": i, "connection": conn_index,
                                                "stream_id": None, "error": repr(e),
                                                "error_code": None})
                            return
                        if err is None:
                            self.responses.append(ans.to_json())
                        else:
                            self.errors.append({"request": i, "connection": conn_index,
                                                "stream_id": ans.stream_id, "error": err[0],
                                                "error_code": err[1]})

                rest = list(requests)
                if a.migrate and rest:
                    await one(rest.pop(0))
                    ports = await client.migrate()
                    self.migrations.append(list(ports))
                    if a.verbose:
                        log(f"connection {conn_index}: migrated from port {ports[0]} to {ports[1]}")
                await asyncio.gather(*(one(i) for i in rest))
                self.alpn = client._quic.tls.alpn_negotiated or self.alpn
                if zero_rtt_ticket is not None:
                    self.early_accepted = bool(client._quic.tls.early_data_accepted)
                if keep_ticket:
                    # A ticket comes after the handshake; give it a moment if not there yet.
                    for _ in range(40):
                        if tickets:
                            break
                        await asyncio.sleep(0.05)
                    self.ticket = tickets[-1] if tickets else None
        except Exception as e:  # noqa: BLE001 - the whole connection failed
            why = repr(e)
            if made and made[-1].terminated is not None:
                code, reason = made[-1].terminated
                why = f"connection closed: code {code:#x} {reason!r}"
            done = {r["request"] for r in self.responses} | {e_["request"] for e_ in self.errors}
            for i in requests:
                if i not in done:
                    self.errors.append({"request": i, "connection": conn_index,
                                        "stream_id": None,
                                        "error": f"connection failed: {why}",
                                        "error_code": made[-1].terminated[0]
                                        if made and made[-1].terminated else None})

    async def run(self):
        a = self.args
        if a.zero_rtt:
            await self.connection(0, [0], keep_ticket=True)
            if self.ticket is None:
                raise RuntimeError("no session ticket from the first connection")
            await self.connection(1, list(range(1, a.count + 1)), zero_rtt_ticket=self.ticket)
            return
        c = max(1, a.connections)
        per = [list(range(k, a.count, c)) for k in range(c)]
        await asyncio.gather(*(self.connection(k, per[k]) for k in range(c) if per[k]))

    def result(self, error, elapsed):
        total = self.args.count + (1 if self.args.zero_rtt else 0)
        if error is not None:
            # Cut by the timeout (or a failure): every request without an outcome is an error.
            seen = {r["request"] for r in self.responses} | {e["request"] for e in self.errors}
            for i in range(total):
                if i not in seen:
                    self.errors.append({"request": i, "connection": None, "stream_id": None,
                                        "error": f"not answered: {error}", "error_code": None})
        ok = error is None and not self.errors and len(self.responses) == total
        if error is None and not ok and not self.errors:
            error = f"{len(self.responses)} of {total} requests answered"
        elif error is None and self.errors:
            error = f"{len(self.errors)} request(s) failed; first: {self.errors[0]['error']}"
        self.responses.sort(key=lambda r: r["request"])
        self.errors.sort(key=lambda r: r["request"])
        gen = self.body[0]
        up = None
        if gen is not None:
            h = hashlib.sha256()
            for c in gen():
                h.update(c)
            up = h.hexdigest()
        return ok, {
            "ok": ok, "error": error, "responses": self.responses, "errors": self.errors,
            "alpn": self.alpn, "early_data_attempted": self.early_attempted,
            "early_data_accepted": self.early_accepted, "upload_sha256": up,
            "migrations": self.migrations, "max_in_flight": self.max_in_flight,
            "elapsed_s": round(elapsed, 6),
        }


# -- hostile modes


def raw_datagrams(args):
    u, host, port, _ = parse_target(args.url, args.connect) if args.url else (None, None, None, None)
    if args.connect and not args.url:
        c = urlsplit("//" + args.connect)
        host, port = c.hostname, c.port
    if host is None or port is None:
        raise ValueError("--raw-datagrams needs --url or --connect ADDR:PORT")
    p = args.raw_datagrams
    files = [p] if os.path.isfile(p) else sorted(
        os.path.join(p, n) for n in os.listdir(p) if os.path.isfile(os.path.join(p, n)))
    fam = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    t0 = time.monotonic()
    sent = nbytes = 0
    err = None
    with socket.socket(fam, socket.SOCK_DGRAM) as s:
        for f in files:
            with open(f, "rb") as fh:
                data = fh.read()
            try:
                s.sendto(data, (host, port))
            except OSError as e:
                err = f"{f}: {e}"
                log("send failed:", err)
                continue
            sent += 1
            nbytes += len(data)
            if args.raw_interval:
                time.sleep(args.raw_interval / 1000)
    return err is None, {"ok": err is None, "error": err, "datagrams_sent": sent,
                         "bytes_sent": nbytes, "elapsed_s": round(time.monotonic() - t0, 6)}


def qpack_int(value, prefix_bits, first_byte_flags):
    """RFC 7541 §5.1 integer with an N-bit prefix; first_byte_flags holds the bits above it."""
    mx = (1 << prefix_bits) - 1
    if value < mx:
        return bytes([first_byte_flags | value])
    out = bytearray([first_byte_flags | mx])
    value -= mx
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def qpack_literal(name, value):
    """Literal Field Line with Literal Name (RFC 9204 §4.5.6): 001NHxxx, no Huffman."""
    return qpack_int(len(name), 3, 0x20) + name + qpack_int(len(value), 7, 0x00) + value


def qpack_prefix(required_insert_count_encoded, delta_base):
    return qpack_int(required_insert_count_encoded, 8, 0) + qpack_int(delta_base, 7, 0)


async def follow_up_get(args, res):
    """A plain GET of the URL on a fresh connection after an attack: its status (or error)
    into ``res["after_status"]`` (``res["after_error"]``)."""
    sub = argparse.Namespace(**vars(args))
    sub.count, sub.concurrency, sub.connections = 1, 1, 1
    sub.migrate = sub.zero_rtt = False
    sub.data_file = sub.upload_bytes = None
    sub.method, sub.header, sub.body_out = "GET", [], "none"
    r = Run(sub)
    try:
        await r.run()
    except Exception as e:  # noqa: BLE001
        res["after_error"] = repr(e)
    if r.responses:
        res["after_status"] = r.responses[0]["status"]
    elif r.errors:
        res["after_error"] = r.errors[0]["error"]


async def qpack_bomb(args):
    u, host, port, path = parse_target(args.url, args.connect)
    res = {"ok": False, "error": None, "outcome": None, "status": None, "error_code": None,
           "reason": None, "bytes_sent": 0, "after_status": None, "after_error": None}
    base = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", u.netloc.encode()),
            (b":path", path.encode()), (b"user-agent", b"tollgate-h3client-bomb")]
    cfg = make_config(args, u.hostname)
    async with connect(host, port, configuration=cfg, create_protocol=Client) as client:
        quic, h3 = client._quic, client.h3
        sid = quic.get_next_available_stream_id()
        a = Answer(0, 0, sid, "none")
        client.answers[sid] = a
        n, size = args.bomb_fields, args.bomb_field_size
        value = b"a" * size
        if args.bomb_mode == "fields":
            section = bytearray(qpack_prefix(0, 0))
            for k, v in base:
                section += qpack_literal(k, v)
            for i in range(n):
                section += qpack_literal(b"x-bomb-%04d" % i, value)
        else:
            # Encoder stream (RFC 9204 §4.3): Set Dynamic Table Capacity (001xxxxx, 5-bit
            # prefix) far above anything advertised, then Insert with Literal Name (01Hxxxxx,
            # 5-bit name length; value 7-bit), n times.
            enc = bytearray(qpack_int(1 << 30, 5, 0x20))
            for i in range(n):
                name = b"x-bomb-%04d" % i
                enc += qpack_int(len(name), 5, 0x40) + name + qpack_int(len(value), 7, 0) + value
            quic.send_stream_data(h3._local_encoder_stream_id, bytes(enc))
            res["bytes_sent"] += len(enc)
            # Refer to every insert: Required Insert Count = n, encoded modulo 2*MaxEntries,
            # which the server cannot even compute with capacity 0 (the encoded value alone is
            # an error then). Base = n (delta 0), post-base none; indexed field lines relative
            # to Base (1xxxxxxx with T=0: 10xxxxxx, 6-bit index).
            max_entries = (1 << 30) // 32
            section = bytearray(qpack_prefix(n % (2 * max_entries) + 1, 0))
            for k, v in base:
                section += qpack_literal(k, v)
            for i in range(n):
                section += qpack_int(n - 1 - i, 6, 0x80)
        frame = encode_uint_var(FrameType.HEADERS) + encode_uint_var(len(section)) + bytes(section)
        quic.send_stream_data(sid, frame, end_stream=True)
        res["bytes_sent"] += len(frame)
        client.transmit()
        log(f"bomb ({args.bomb_mode}): {n} fields of {size} B, HEADERS frame {len(frame)} B "
            f"on stream {sid}")
        deadline = time.monotonic() + args.bomb_wait
        stop_seen = None
        while time.monotonic() < deadline:
            if client.terminated is not None:
                res["outcome"] = "closed"
                res["error_code"], res["reason"] = client.terminated
                break
            if a.status is not None:
                res["outcome"], res["status"] = "status", a.status
                break
            resets = [e for e in client.stream_events if e[1] == sid and e[0] == "reset"]
            if resets:
                res["outcome"], res["error_code"] = "reset", resets[0][2]
                break
            stops = [e for e in client.stream_events if e[1] == sid]
            if stops and stop_seen is None:
                stop_seen = time.monotonic()
            if stop_seen is not None and time.monotonic() - stop_seen > 0.5:
                # STOP_SENDING alone (no RESET_STREAM within 0.5 s): the server refused the
                # request stream all the same.
                res["outcome"], res["error_code"] = "reset", stops[0][2]
                break
            await client.wait_progress()
        else:
            res["outcome"] = "timeout"
            res["error"] = f"no reaction within {args.bomb_wait} s"
        client.close()
    # Does the server still serve? A plain GET on a fresh connection.
    await follow_up_get(args, res)
    res["ok"] = res["outcome"] != "timeout" and res["after_status"] is not None
    return res["ok"], res


async def rapid_reset(args):
    """Opens one connection and N request streams, each reset by the client (RESET_STREAM and
    STOP_SENDING) right after its HEADERS: the rapid-reset attack. Reports whether the server
    closed the connection and with which code, and whether a fresh connection is served."""
    u, host, port, path = parse_target(args.url, args.connect)
    res = {"ok": False, "error": None, "outcome": None, "error_code": None, "reason": None,
           "streams_reset": 0, "after_status": None, "after_error": None}
    cfg = make_config(args, u.hostname)
    async with connect(host, port, configuration=cfg, create_protocol=Client) as client:
        quic, h3 = client._quic, client.h3
        headers = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", u.netloc.encode()),
                   (b":path", path.encode()), (b"user-agent", b"tollgate-h3client-reset")]
        deadline = time.monotonic() + args.bomb_wait
        for _ in range(args.rapid_reset):
            if client.terminated is not None:
                break
            sid = quic.get_next_available_stream_id()
            h3.send_headers(stream_id=sid, headers=headers, end_stream=False)
            quic.send_stream_data(sid, encode_uint_var(FrameType.DATA) + encode_uint_var(1) + b"x")
            client.transmit()
            await asyncio.sleep(0.002)
            quic.reset_stream(sid, 0x10C)  # H3_REQUEST_CANCELLED
            quic.stop_stream(sid, 0x10C)
            client.transmit()
            res["streams_reset"] += 1
        while client.terminated is None and time.monotonic() < deadline:
            await client.wait_progress()
        if client.terminated is not None:
            res["outcome"] = "closed"
            res["error_code"], res["reason"] = client.terminated
        else:
            res["outcome"] = "open"
        client.close()
    await follow_up_get(args, res)
    res["ok"] = res["after_status"] is not None
    return res["ok"], res


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url")
    p.add_argument("--connect")
    p.add_argument("--ca")
    p.add_argument("--insecure", action="store_true")
    p.add_argument("--method", default="GET")
    p.add_argument("--header", action="append", default=[])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--data-file")
    g.add_argument("--upload-bytes", type=int)
    p.add_argument("--no-content-length", action="store_true")
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--zero-rtt", action="store_true")
    p.add_argument("--migrate", action="store_true")
    p.add_argument("--body-out", choices=("sha256", "text", "none"), default="sha256")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--raw-datagrams")
    p.add_argument("--raw-interval", type=float, default=0.0)
    p.add_argument("--qpack-bomb", action="store_true")
    p.add_argument("--bomb-mode", choices=("fields", "encoder"), default="fields")
    p.add_argument("--bomb-fields", type=int, default=1000)
    p.add_argument("--bomb-field-size", type=int, default=8192)
    p.add_argument("--bomb-wait", type=float, default=10.0)
    p.add_argument("--rapid-reset", type=int, default=0)
    try:
        args = p.parse_args()
    except SystemExit as e:
        sys.exit(2 if e.code else 0)

    def emit(ok, obj):
        print(json.dumps(obj), flush=True)
        sys.exit(0 if ok else 1)

    def bad(msg):
        print(json.dumps({"ok": False, "error": msg}), flush=True)
        log(msg)
        sys.exit(2)

    if args.raw_datagrams:
        try:
            emit(*raw_datagrams(args))
        except (ValueError, OSError) as e:
            bad(str(e))
    if not args.url:
        bad("--url is required")
    if args.count < 0 or args.concurrency < 1 or args.connections < 1:
        bad("--count >= 0, --concurrency >= 1, --connections >= 1")
    t0 = time.monotonic()
    if args.rapid_reset:
        try:
            ok, res = asyncio.run(asyncio.wait_for(rapid_reset(args), args.timeout))
        except Exception as e:  # noqa: BLE001
            ok, res = False, {"ok": False, "error": repr(e), "outcome": None}
        res["elapsed_s"] = round(time.monotonic() - t0, 6)
        emit(ok, res)
    if args.qpack_bomb:
        try:
            ok, res = asyncio.run(asyncio.wait_for(qpack_bomb(args), args.timeout))
        except asyncio.TimeoutError:
            ok, res = False, {"ok": False, "error": f"timeout after {args.timeout} s",
                              "outcome": "timeout", "status": None, "error_code": None}
        except Exception as e:  # noqa: BLE001
            ok, res = False, {"ok": False, "error": repr(e), "outcome": None, "status": None,
                              "error_code": None}
        res["elapsed_s"] = round(time.monotonic() - t0, 6)
        emit(ok, res)
    try:
        run = Run(args)
    except (ValueError, OSError) as e:
        bad(str(e))

    async def bounded():
        try:
            await asyncio.wait_for(run.run(), args.timeout)
            return None
        except asyncio.TimeoutError:
            return f"timeout after {args.timeout} s"
        except Exception as e:  # noqa: BLE001
            return repr(e)

    error = asyncio.run(bounded())
    if error:
        log(error)
    emit(*run.result(error, time.monotonic() - t0))


if __name__ == "__main__":
    main()
