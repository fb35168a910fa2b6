"""A TCP proxy in front of a broker or a database, which a test cuts, closes or makes deaf (as
psycopg_pool's tests do with theirs): a real outage for a process under test, with no mock in
between."""

import contextlib
import socket
import threading


class TcpProxy:
    """Listens on 127.0.0.1:`port` (0: any free one) and forwards to `target`: a host and
    port, or the path of a Unix socket (the embedded PostgreSQL listens on one only).

    `cut()` drops every open connection, as a broker killing its clients does; `refuse()`
    also stops listening, so connects are refused until `accept()`. `blackhole()` keeps every
    connection open and accepts new ones, but forwards nothing either way: a peer that stops
    answering (a network partition), which no error ever reports. `bytes_to_clients` counts
    what the target has sent its clients: what they read from it.
    """

    def __init__(self, target: tuple[str, int] | str, port: int = 0) -> None:
        self._target = target
        self._holding = False
        self.held_from: set[int] = set()
        """The connections (by id) that sent something the blackhole dropped."""
        self.bytes_to_clients = 0
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

    def blackhole(self) -> None:
        self._holding = True

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
            if self._holding:
                with self._lock:
                    self._sockets.append(client)  # open, and never a byte back
                threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
                continue
            try:
                upstream = self._connect_upstream()
            except OSError:
                client.close()
                continue
            # No Nagle on either leg: a pipe that holds a small write back until the previous
            # one is acknowledged (delayed ACKs: 40 ms) caps a client that pipelines small
            # publishes and waits for their confirms at ~100 messages a second, which made
            # the relay fault tests wait minutes for the broker to catch up.
            for end in (client, upstream):
                if end.family != socket.AF_UNIX:
                    end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink, to_client in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(source, sink, to_client), daemon=True
                ).start()

    def _connect_upstream(self) -> socket.socket:
        if isinstance(self._target, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.settimeout(5)
            upstream.connect(self._target)
        else:
            upstream = socket.create_connection(self._target, timeout=5)
        upstream.settimeout(None)
        return upstream

    def _swallow(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while client.recv(65536):
                self.held_from.add(id(client))

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self._holding:  # read and dropped, so the sender never hears back
                    self.held_from.add(id(source))
                else:
                    if to_client:
                        with self._lock:
                            self.bytes_to_clients += len(data)
                    sink.sendall(data)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
