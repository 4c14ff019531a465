"""Liftbridge client SDK."""
