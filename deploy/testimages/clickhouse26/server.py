"""Serve ClickHouse 26's engine (clickhouse-local from the chdb-core wheel)
on the native (9000) and HTTP (8123) ports, like clickhouse-server.

clickhouse-local opens real listeners with SYSTEM START LISTEN TCP/HTTP; they
live while the query that opened them runs, so this process runs one
keep-alive query until it is told to stop. Ports, listen_host, users and
system logs come from config.xml (with config.d/, users.xml, users.d/) in
CLICKHOUSE26_CONFIG_DIR, the working directory clickhouse-local reads its
configuration from; data lives in CLICKHOUSE26_DATA_DIR.

SIGTERM or SIGINT kills the keep-alive query over HTTP (KILL QUERY), so
clickhouse-local returns and shuts down cleanly; if that does not end it
within CLICKHOUSE26_STOP_TIMEOUT seconds the process exits anyway (every
acknowledged insert is already in its part on disk).

Other environment: CLICKHOUSE_USER / CLICKHOUSE_PASSWORD (credentials for
KILL QUERY), CLICKHOUSE26_HTTP_PORT (default 8123), CLICKHOUSE26_INIT_SQL (a
file of statements run once before the listeners open).
"""

import os
import signal
import socket
import sys
import threading

CHDB_DIR = os.environ.get("CLICKHOUSE26_CHDB_DIR", "/opt/chdb/chdb")
CONFIG_DIR = os.environ.get("CLICKHOUSE26_CONFIG_DIR", "/etc/clickhouse-server")
DATA_DIR = os.environ.get("CLICKHOUSE26_DATA_DIR", "/var/lib/clickhouse")
HTTP_PORT = int(os.environ.get("CLICKHOUSE26_HTTP_PORT", "8123"))
STOP_TIMEOUT = float(os.environ.get("CLICKHOUSE26_STOP_TIMEOUT", "20"))

# The keep-alive query: one row a second for ~31 years. Its text starts with
# a marker so that KILL QUERY finds exactly this query.
MARKER = "SELECT sleepEachRow(1) AS txsink_clickhouse26_keepalive"
KEEPALIVE = MARKER + " FROM numbers(1000000000) SETTINGS max_block_size = 1 FORMAT Null"

stopping = threading.Event()


def log(msg):
    print("clickhouse26: " + msg, file=sys.stderr, flush=True)


def kill_keepalive():
    """Asks the server, over HTTP on loopback, to kill the keep-alive query."""
    body = ("KILL QUERY WHERE startsWith(query, '%s') SYNC FORMAT Null" % MARKER).encode()
    user = os.environ.get("CLICKHOUSE_USER") or "default"
    password = os.environ.get("CLICKHOUSE_PASSWORD", "")
    req = (
        "POST / HTTP/1.0\r\nHost: 127.0.0.1\r\nX-ClickHouse-User: %s\r\nX-ClickHouse-Key: %s\r\n"
        "Content-Length: %d\r\n\r\n" % (user, password, len(body))
    ).encode() + body
    with socket.create_connection(("127.0.0.1", HTTP_PORT), timeout=10) as s:
        s.sendall(req)
        reply = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    status = reply.split(b"\r\n", 1)[0]
    if b" 200 " not in status:
        raise RuntimeError(reply.decode(errors="replace")[:500])


def watch():
    """Waits for SIGTERM/SIGINT (blocked in every thread), then stops the server."""
    sig = signal.sigwait({signal.SIGTERM, signal.SIGINT})
    log("signal %d: stopping" % sig)
    stopping.set()
    try:
        kill_keepalive()
    except Exception as e:  # the listener may be gone already
        log("KILL QUERY failed: %s" % e)
    t = threading.Timer(STOP_TIMEOUT, lambda: os._exit(0))
    t.daemon = True
    t.start()


def main():
    # Blocked before chdb starts its threads, so they inherit the mask and
    # only the watcher receives the signals (even as PID 1).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    # As chdb/__init__ does: RTLD_DEEPBIND, imported from its own directory.
    sys.setdlopenflags(os.RTLD_NOW | os.RTLD_DEEPBIND)
    sys.path.insert(0, CHDB_DIR)
    os.chdir(CHDB_DIR)
    import _chdb

    os.chdir(CONFIG_DIR)
    threading.Thread(target=watch, daemon=True).start()
    sql = ""
    init = os.environ.get("CLICKHOUSE26_INIT_SQL", "")
    if init:
        with open(init) as f:
            stmts = f.read().strip().rstrip(";")
        if stmts:
            sql += stmts + ";\n"
    sql += "SYSTEM START LISTEN TCP; SYSTEM START LISTEN HTTP; " + KEEPALIVE
    log("starting ClickHouse (chdb-core) with data in %s" % DATA_DIR)
    # The output format must not be Null: it would become the default of
    # the connections the listeners accept.
    _chdb.query(sql, "TabSeparated", path=DATA_DIR)
    if stopping.is_set():
        log("stopped")
        sys.exit(0)
    log("the keep-alive query ended without a stop signal (see the error above)")
    sys.exit(1)


if __name__ == "__main__":
    main()
