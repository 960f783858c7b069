"""The agent side's retry queue: turns the memory could not take wait here and go out,
oldest first, before the next one. `Outbox` keeps them in the process (`LocalMemory`,
tests); `DurableOutbox` in a SQLite file shared by threads and processes, so turns
queued while the service is down outlive the agent process (`MemoryClient`).
`deliver` sends a turn through a memory's outbox without ever raising.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import filelock

from .memory_protocol import Memory, MemoryContext, MemoryRejected

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    ctx: MemoryContext
    messages: list[dict[str, Any]]
    flush: bool
    attempts: int = 0
    not_before: float = 0.0


class Outbox:
    """In-memory outbox (`LocalMemory`, tests): turns that could not be delivered,
    retried before the next delivery (oldest first) and by `retry()`. Bounded: when
    full, the oldest turn is dropped and logged. Lost with the process: `MemoryClient`
    uses `DurableOutbox`."""

    def __init__(self, maxlen: int = 1000, base_delay: float = 1.0, max_delay: float = 300.0) -> None:
        self._items: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self.maxlen = maxlen
        self.base_delay = base_delay
        self.max_delay = max_delay

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: _Pending) -> None:
        with self._lock:
            if len(self._items) >= self.maxlen:
                dropped = self._items.popleft()
                log.error("memory outbox full; dropped a turn of %s", dropped.ctx.user_id)
            item.attempts += 1
            item.not_before = time.monotonic() + min(self.max_delay, self.base_delay * 2 ** (item.attempts - 1))
            self._items.append(item)

    def retry(self, memory: Memory, *, force: bool = False) -> int:
        """Deliver what is due; returns how many were delivered."""
        delivered = 0
        now = time.monotonic()
        with self._lock:
            due = [item for item in self._items if force or item.not_before <= now]
            for item in due:
                self._items.remove(item)
        for index, item in enumerate(due):
            try:
                memory.record_turn(item.ctx, item.messages, flush=item.flush)
                delivered += 1
            except MemoryRejected as exc:
                log.error("memory refused a queued turn of %s: %s", item.ctx.user_id, exc)
            except Exception as exc:
                log.warning("memory still unavailable (%s); %d turns stay queued", exc, len(due) - index)
                for rest in due[index:]:
                    self.put(rest)
                break
        return delivered

    def deliver(self, memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool) -> bool:
        if len(self):
            self.retry(memory)
        return _send_or_log(memory, ctx, messages, flush=flush, queue=self)


class DurableOutbox:
    """`MemoryClient`'s outbox: every turn is written to a small local SQLite file first
    and deleted only once the memory service took it, so turns queued while the service
    is down survive the agent process exiting or being killed.

    - **Where**: `path`, else ``$MEMORY_OUTBOX_PATH``, else
      ``$XDG_STATE_HOME/memoryadmin/outbox.sqlite3`` (``~/.local/state/…``); folder 0700,
      file 0600 (it holds conversations).
    - **Whose**: each row is tagged with its destination (the server URL and a
      fingerprint of the API key, never the key); a client delivers only its own rows,
      so agents of several servers can share the file.
    - **Order and once**: rows go out oldest first, under a cross-process file lock
      (one deliverer at a time, threads and processes alike); a row is deleted after the
      server accepted it. A process killed between the two resends it next time, which
      the server ignores (it skips message ids it has already seen).
    - **When**: at each new turn (one attempt, whatever the backoff), when a client
      starts (`MemoryClient` delivers what an earlier process left, in a background
      thread), and by `retry()` (due rows only: exponential backoff per destination).
    - **Bounded**: at most `max_turns` rows and `max_bytes` of turn bodies in the file;
      beyond that the oldest rows are dropped with a warning naming how many.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        destination: str,
        url: str = "",
        max_turns: int | None = None,
        max_bytes: int | None = None,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
        lock_timeout: float = 15.0,
    ) -> None:
        self.path = Path(path) if path else default_outbox_path()
        self.destination = destination
        self.url = url
        self.max_turns = max_turns if max_turns is not None else _env_int("MEMORY_OUTBOX_MAX_TURNS", 1000)
        self.max_bytes = max_bytes if max_bytes is not None else _env_int("MEMORY_OUTBOX_MAX_BYTES", 32 * 2**20)
        self.base_delay = base_delay
        self.max_delay = max_delay
        # One deliverer at a time; filelock's default is per thread, so two threads of
        # one process exclude each other as two processes do (flock on separate fds).
        self._delivery = filelock.FileLock(f"{self.path}.lock", timeout=lock_timeout, mode=0o600)
        self._local = threading.local()
        self._create()

    # storage

    def _create(self) -> None:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Created 0600 before SQLite opens it; the -wal and -shm files take its mode.
        # O_EXCL: an existing file is never opened here, since closing that descriptor
        # would drop the SQLite locks of this process's other connections to it.
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600))
        conn = self._connect()
        # Switching a new file to WAL can fail at once with "database is locked" while
        # another process is switching it too (SQLite calls no busy handler there): the
        # switch is retried, and skipped when the file already is in WAL mode.
        deadline = time.monotonic() + 30
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        with conn:
            conn.executescript(_OUTBOX_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection (opened again in a forked child), in autocommit mode:
        transactions are explicit. Kept open: closing the last connection of a WAL file
        checkpoints and removes it, milliseconds on every call. FULL: a queued turn
        survives a power cut too, not just a kill."""
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            # A connection inherited through fork is left alone, never used nor closed.
            self._local.inherited = conn
            conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def close(self) -> None:
        """Closes this thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid == os.getpid():
            conn.close()
        self._local.conn = None

    def __len__(self) -> int:
        """Turns of this destination waiting in the file."""
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM turns WHERE destination = ?", (self.destination,)).fetchone()[0]

    def put(self, ctx: MemoryContext, messages: Sequence[Mapping[str, Any]], *, flush: bool) -> int | None:
        """Queue a turn behind the others; returns its row id (None if the bound dropped it)."""
        body = json.dumps(
            {"ctx": asdict(ctx), "messages": [dict(m) for m in messages], "flush": flush},
            ensure_ascii=False,
            allow_nan=False,
        )
        size = len(body.encode("utf-8"))
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                seq = conn.execute(
                    "INSERT INTO turns (destination, url, queued_at, body, size) VALUES (?, ?, ?, ?, ?)",
                    (self.destination, self.url, time.time(), body, size),
                ).lastrowid
                dropped = self._enforce_bound(conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        return None if dropped and seq is not None and seq <= dropped else seq

    def _enforce_bound(self, conn: sqlite3.Connection) -> int:
        """Drop the oldest rows beyond the bound (all destinations: it bounds the file);
        returns the highest dropped row id, 0 when nothing was dropped."""
        over = conn.execute(
            "SELECT MAX(seq), COUNT(*), MIN(queued_at), MAX(queued_at), COALESCE(SUM(size), 0) FROM ("
            "  SELECT seq, queued_at, size, ROW_NUMBER() OVER newest AS n, SUM(size) OVER newest AS total"
            "  FROM turns WINDOW newest AS (ORDER BY seq DESC)"
            ") WHERE n > ? OR total > ?",
            (self.max_turns, self.max_bytes),
        ).fetchone()
        cutoff, count, first, last, size = over
        if not count:
            return 0
        conn.execute("DELETE FROM turns WHERE seq <= ?", (cutoff,))
        log.warning(
            "memory outbox %s is full (at most %d turns, %d bytes): dropped the %d oldest undelivered turns "
            "(%d bytes, queued %s to %s)",
            self.path,
            self.max_turns,
            self.max_bytes,
            count,
            size,
            _when(first),
            _when(last),
        )
        return int(cutoff)

    def _pending(self, conn: sqlite3.Connection, limit: int = 50) -> list[tuple[int, str, int, float]]:
        return conn.execute(
            "SELECT seq, body, attempts, not_before FROM turns WHERE destination = ? ORDER BY seq LIMIT ?",
            (self.destination, limit),
        ).fetchall()

    def _delete(self, seq: int) -> None:
        with self._connect() as conn:
            conn.execute("DELETE FROM turns WHERE seq = ?", (seq,))

    def _postpone(self, seq: int, attempts: int, error: str) -> None:
        delay = min(self.max_delay, self.base_delay * 2 ** min(attempts, 30))
        with self._connect() as conn:
            conn.execute(
                "UPDATE turns SET attempts = ?, not_before = ?, last_error = ? WHERE seq = ?",
                (attempts + 1, time.time() + delay, error[:500], seq),
            )

    def queued_elsewhere(self) -> int:
        """Rows for this server queued under another API key (not ours to send)."""
        with self._connect() as conn:
            return conn.execute(
                "SELECT COUNT(*) FROM turns WHERE url = ? AND destination != ?", (self.url, self.destination)
            ).fetchone()[0]

    # delivery

    def retry(self, memory: Memory, *, force: bool = False) -> int:
        """Deliver this destination's rows in order until one fails; returns how many went.
        Without `force`, nothing is tried before the oldest row's backoff has passed."""
        try:
            self._delivery.acquire()
        except filelock.Timeout:
            # Someone else is delivering (and will take our rows too, oldest first).
            return 0
        delivered = 0
        try:
            while True:
                with self._connect() as conn:
                    rows = self._pending(conn)
                if not rows or (not force and rows[0][3] > time.time()):
                    return delivered
                for seq, body, attempts, _ in rows:
                    try:
                        data = json.loads(body)
                        ctx = MemoryContext(**data["ctx"])
                    except (ValueError, TypeError, KeyError) as exc:
                        log.error("memory outbox %s: row %d cannot be read (dropped): %s", self.path, seq, exc)
                        self._delete(seq)
                        continue
                    try:
                        memory.record_turn(ctx, data["messages"], flush=data["flush"])
                    except MemoryRejected as exc:
                        log.error("memory refused a queued turn of %s (dropped): %s", ctx.user_id, exc)
                    except Exception as exc:
                        self._postpone(seq, attempts, str(exc))
                        log.warning("memory unavailable (%s); %d turns stay queued in %s", exc, len(self), self.path)
                        return delivered
                    else:
                        delivered += 1
                    self._delete(seq)
                force = True  # the service answers again: keep going until the queue is empty
        finally:
            self._delivery.release()

    def deliver(self, memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool) -> bool:
        """Queue the turn, then send the queue (this turn last). True when it is delivered."""
        try:
            seq = self.put(ctx, messages, flush=flush)
        except (sqlite3.Error, OSError, ValueError) as exc:
            log.error("memory outbox %s cannot queue the turn (%s): sending the turn without it", self.path, exc)
            return _send_or_log(memory, ctx, messages, flush=flush, queue=None)
        try:
            self.retry(memory, force=True)
            if seq is None:
                return False
            with self._connect() as conn:
                return conn.execute("SELECT 1 FROM turns WHERE seq = ?", (seq,)).fetchone() is None
        except Exception as exc:  # never into the agent's turn: the row is safe in the file
            log.error("memory outbox %s: delivery failed (%s); the turn stays queued", self.path, exc)
            return False


_OUTBOX_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- delivery order; AUTOINCREMENT: never reused
    destination TEXT NOT NULL,              -- server URL + API key fingerprint
    url TEXT NOT NULL,
    queued_at REAL NOT NULL,
    body TEXT NOT NULL,                     -- {"ctx", "messages", "flush"}
    size INTEGER NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    not_before REAL NOT NULL DEFAULT 0,
    last_error TEXT
);
-- retry(): the oldest rows of one destination
CREATE INDEX IF NOT EXISTS turns_destination_seq ON turns (destination, seq);
"""


def default_outbox_path() -> Path:
    """``$MEMORY_OUTBOX_PATH``, else the XDG state folder: agents' runtime state that
    must outlive the process, not configuration and not a cache."""
    explicit = os.environ.get("MEMORY_OUTBOX_PATH")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "memoryadmin" / "outbox.sqlite3"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


def _when(timestamp: float | None) -> str:
    return "?" if timestamp is None else datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _send_or_log(
    memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool, queue: Outbox | None
) -> bool:
    try:
        memory.record_turn(ctx, messages, flush=flush)
        return True
    except MemoryRejected as exc:
        log.error("memory refused the turn of %s: %s", ctx.user_id, exc)
    except Exception as exc:
        if queue is None:
            log.error("memory unavailable and no outbox: the turn of %s is lost: %s", ctx.user_id, exc)
        else:
            log.warning("memory unavailable, turn queued for retry: %s", exc)
            queue.put(_Pending(ctx, messages, flush))
    return False


def deliver(memory: Memory, ctx: MemoryContext, messages: list[dict[str, Any]], *, flush: bool) -> bool:
    """Send a turn without ever raising; queued turns go first, failures are queued."""
    return memory.outbox.deliver(memory, ctx, messages, flush=flush)
