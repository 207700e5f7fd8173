"""moto's S3 server (as `moto_server -H HOST -p PORT` runs it) with its writes serialized.

Usage: python s3_server.py HOST PORT   (run by scripts/servers.sh with moto's virtualenv)

moto answers `If-None-Match: *` on PutObject, but it checks whether the key exists and
then stores the object in two steps without a lock, and its server is threaded: two
concurrent creates of one key can both succeed (seen with moto 5.2.5: two winners among
12 racing creates, about one run in fifteen). S3 decides a conditional create atomically,
and the WAL's fencing rests on that, so every request other than GET and HEAD runs here
under one lock: what moto then answers to racing creates is what S3 answers.
"""

import os
import signal
import sys
import threading

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import run_simple


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    writes = threading.Lock()

    def serialized(environ, start_response):
        if environ["REQUEST_METHOD"] in ("GET", "HEAD"):
            return app(environ, start_response)
        with writes:
            # The body is read and the whole answer produced under the lock.
            return list(app(environ, start_response))

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    run_simple(host, port, serialized, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
