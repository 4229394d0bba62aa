"""A stand-in HTTP server on loopback for tests of a client (the dashboard page, the CLI): each GET is answered by
``answer(path, headers) -> (status, content_type, body, extra_headers)``."""
from __future__ import annotations

import http.server
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

Answer = Callable[[str, Mapping[str, str]], tuple[int, str, bytes, Mapping[str, str]]]


@contextmanager
def standin_server(answer: Answer) -> Iterator[str]:
    """The server's base URL while the block runs; shut down and closed after it."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            status, kind, body, extra = answer(self.path, self.headers)
            self.send_response(status)
            for name, value in {"Content-Type": kind, "Content-Length": str(len(body)), **extra}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
