"""Delivery to handlers: the consumers, runs of deliveries, calling the handler on its thread or
the loop, how a call ended, pacing."""
