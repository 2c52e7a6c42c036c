"""A model-file host on the loopback interface for the download tests: direct files with Range
support, a connection cut part-way, an HTML page where a file should be, and Google Drive's two
steps (a confirmation page whose form leads to the file; a quota page)."""
from __future__ import annotations

import re
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional, Tuple

CONFIRM_PAGE = """<!DOCTYPE html><html><head><title>Google Drive - Virus scan warning</title></head><body>
<p>Google Drive can't scan this file for viruses.</p>
<form id="download-form" action="{action}" method="get"><input type="submit" value="Download anyway"/><input type="hidden" name="id" value="{file_id}"><input type="hidden" name="export" value="download"><input type="hidden" name="confirm" value="t"><input type="hidden" name="uuid" value="0b6c2f2e"></form>
</body></html>"""
QUOTA_PAGE = """<!DOCTYPE html><html><head><title>Google Drive - Quota exceeded</title></head><body>
<p class="uc-error-caption">Sorry, you can't view or download this file at this time.</p>
<p class="uc-error-subcaption">Too many users have viewed or downloaded this file recently. Please try accessing the file again later.</p>
</body></html>"""


class FileServer:
    """Serves ``files`` (path -> bytes) on 127.0.0.1; ``cut`` paths send only their first half on
    a request that starts at byte 0 (then close); ``html`` paths answer an HTML page; Drive ids in
    ``drive`` answer ``/uc?export=download&id=ID`` with the confirmation page (``/download`` then
    serves the file), the id ``QUOTA`` with the quota page. ``requests`` records (path, Range header)."""

    def __init__(self) -> None:
        self.files: Dict[str, bytes] = {}
        self.cut: set = set()
        self.html: set = set()
        self.drive: Dict[str, bytes] = {}
        self.ignore_range = False
        self.requests: List[Tuple[str, Optional[str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                server.requests.append((url.path, self.headers.get("Range")))
                if url.path == "/uc":
                    file_id = query.get("id", "")
                    if file_id == "QUOTA":
                        return self._page(QUOTA_PAGE)
                    if file_id not in server.drive:
                        return self.send_error(404)
                    return self._page(CONFIRM_PAGE.format(action=f"{server.url}/download", file_id=file_id))
                if url.path == "/download":
                    if query.get("confirm") != "t" or query.get("id") not in server.drive:
                        return self.send_error(403)
                    return self._file(server.drive[query["id"]], cut=False)
                if url.path in server.html:
                    return self._page("<html><body>Sign in to continue</body></html>")
                if url.path not in server.files:
                    return self.send_error(404)
                return self._file(server.files[url.path], cut=url.path in server.cut)

            def _page(self, text: str) -> None:
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _file(self, data: bytes, cut: bool) -> None:
                match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
                start = int(match.group(1)) if match and not server.ignore_range else 0
                if start >= len(data) and start:
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.end_headers()
                    return
                self.send_response(206 if start else 200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                body = data[start:]
                if cut and start == 0:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FileServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
