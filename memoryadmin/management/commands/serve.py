"""Serve the dashboard and the agents' API with waitress: what `make run` starts.

waitress reads every request whole (head and body, the body spilling to a temporary
file past 512 KB) on its own event loop before a worker thread sees it, so idle and
slowly-sent connections cost a socket each, never a thread: the threads stay free for
complete requests. Measured against gunicorn's threaded worker in docs/operations.md
("Web server").
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve the web app with waitress (threads, connection limit and timeouts from settings)."
    requires_system_checks = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--listen",
            action="append",
            default=[],
            help="host:port to listen on (repeatable; default 127.0.0.1:8000)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from django.core.wsgi import get_wsgi_application
        from django.urls import get_resolver
        from waitress.server import BaseWSGIServer, create_server

        from retrieval.warmup import warm

        listen = " ".join(options["listen"]) or "127.0.0.1:8000"
        # Not memoryadmin.wsgi, which loads the tokenizers and the embedding model before
        # it returns (for gunicorn --preload, which must not fork while a load holds its
        # lock). waitress never forks: it listens first and they load on a thread, so the
        # login page answers seconds sooner on a first start (docs/operations.md); a
        # search or write arriving meanwhile waits for the load it needs, as it would cold.
        application = get_wsgi_application()
        # Every view imported now, not by the first request racing the loads.
        get_resolver().url_patterns  # noqa: B018 (the property imports the URLconf)
        per_address = 0 if settings.WEB_TRUSTED_PROXY else int(settings.WEB_CONNECTIONS_PER_ADDRESS)
        self.stdout.write(
            f"Serving on {listen} with waitress ({settings.WEB_THREADS} threads, "
            f"{settings.WEB_CONNECTION_LIMIT} connections"
            + (f", {per_address} per client address)" if per_address else ")")
        )
        sockets: dict[int, Any] = {}
        server = create_server(application, map=sockets, listen=listen, **web_server_options())
        if per_address:
            channel = limited_channel(per_address)
            for dispatcher in list(sockets.values()):
                if isinstance(dispatcher, BaseWSGIServer):
                    dispatcher.channel_class = channel
        threading.Thread(target=warm, kwargs={"queries": True}, name="warm", daemon=True).start()
        server.run()


def limited_channel(per_address: int) -> type:
    """waitress's connection class, refusing a connection at once (closing it unread)
    when its client address already holds `per_address` open connections: one client
    cannot fill WEB_CONNECTION_LIMIT with idle connections and starve every other
    client (issue 34: 1,000 idle connections made every new request time out). Behind
    a reverse proxy every connection comes from the proxy, so it is off there: the
    proxy limits each client (docs/operations.md)."""
    import threading
    from collections import Counter

    from waitress.channel import HTTPChannel

    held: Counter[str] = Counter()
    lock = threading.Lock()
    refused = [0]

    class PerAddressLimitedChannel(HTTPChannel):
        counted: str | None = None

        def __init__(self, server: Any, sock: Any, addr: Any, adj: Any, map: Any = None) -> None:
            host = addr[0] if isinstance(addr, tuple) else str(addr)
            with lock:
                over = held[host] >= per_address
                if not over:
                    held[host] += 1
            if over:
                sock.close()  # never registered with the server: nothing else to undo
                refused[0] += 1
                if refused[0] in (1, 10, 100) or refused[0] % 1000 == 0:
                    server.logger.warning(
                        "refused %d connection(s) from addresses holding %d open (WEB_CONNECTIONS_PER_ADDRESS)",
                        refused[0],
                        per_address,
                    )
                return
            self.counted = host
            super().__init__(server, sock, addr, adj, map)

        def del_channel(self, map: Any = None) -> None:
            # Every way a connection closes ends here (waitress's handle_close calls the
            # base class's close, which calls this).
            host, self.counted = self.counted, None
            if host is not None:
                with lock:
                    held[host] -= 1
                    if held[host] <= 0:
                        del held[host]
            super().del_channel(map)

    return PerAddressLimitedChannel


def web_server_options() -> dict[str, Any]:
    options: dict[str, Any] = {
        "threads": settings.WEB_THREADS,
        "connection_limit": settings.WEB_CONNECTION_LIMIT,
        "channel_timeout": settings.WEB_CHANNEL_TIMEOUT,
        # a body is buffered whole before the app sees it: bound what one request may
        # park on disk, well above the API's own limit so the API answers its own 413
        "max_request_body_size": settings.WEB_MAX_REQUEST_BODY_BYTES,
        # poll(), not select(): select() cannot watch more than 1,024 descriptors
        "asyncore_use_poll": True,
        "ident": "memory",
    }
    if settings.WEB_TRUSTED_PROXY:
        # Behind a reverse proxy: the client's address and scheme come from its headers
        # (login throttling logs the address; CSRF and secure cookies need the scheme).
        options |= {
            "trusted_proxy": settings.WEB_TRUSTED_PROXY,
            "trusted_proxy_count": 1,
            "trusted_proxy_headers": {"x-forwarded-for", "x-forwarded-proto"},
            "clear_untrusted_proxy_headers": True,
        }
    return options
