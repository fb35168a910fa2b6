"""The brokers on this machine, and a skip that names the one that is absent."""

import socket

import pytest

NATS = ("NATS", "127.0.0.1", 4222)
REDIS = ("Redis", "127.0.0.1", 6379)
RABBITMQ = ("RabbitMQ", "127.0.0.1", 5672)


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def require(broker: tuple[str, str, int]) -> None:
    """Skip the calling test, naming the broker, when nothing answers on its port."""
    name, host, port = broker
    if not answers(host, port):
        pytest.skip(f"{name} is not answering on {host}:{port}")
