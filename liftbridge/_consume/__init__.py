"""Consuming: subscriptions, pull consumers, direct reads, cursors and the
activity stream, all over the router's public methods."""
