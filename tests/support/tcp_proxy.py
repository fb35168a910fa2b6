"""A TCP proxy in front of a broker, which a test cuts or closes (as psycopg_pool's tests do
with theirs): a real outage for a relay in another process, with no mock in between."""

import contextlib
import socket
import threading


class TcpProxy:
    """Listens on 127.0.0.1:`port` (0: any free one) and forwards to `target`.

    `cut()` drops every open connection, as a broker killing its clients does; `refuse()`
    also stops listening, so connects are refused until `accept()`.
    """

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self._target = target
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.port = port
        self.accept()

    def accept(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._serve, args=(listener,), daemon=True).start()

    def refuse(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.cut()

    def cut(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for connection in sockets:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
            connection.close()

    def close(self) -> None:
        self.refuse()

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _serve(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # refused or closed
            try:
                upstream = socket.create_connection(self._target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            # No Nagle on either leg: a pipe that holds a small write back until the previous
            # one is acknowledged (delayed ACKs: 40 ms) caps a client that pipelines small
            # publishes and waits for their confirms at ~100 messages a second, which made
            # the relay fault tests wait minutes for the broker to catch up.
            for end in (client, upstream):
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
