"""Reliability checks that are too slow or too heavy for ``make test``:
``make chaos`` runs them (see the README, Reliability)."""
