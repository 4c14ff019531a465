"""NATS ``.creds`` files: the user JWT and NKey seed a decentralized-auth
server asks for, and the signature of its nonce that ``CONNECT`` carries.

The ``nkeys`` package (the ``nats`` extra) signs; it is imported only when a
credentials file is given.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path

from liftbridge._errors import MissingDependencyError, UnavailableError


@dataclass(frozen=True)
class Credentials:
    """A ``.creds`` file's user JWT and NKey seed (the seed never printed).

    Args:
        jwt: the user JWT, sent as is in ``CONNECT``.
        seed: the NKey seed that signs the server's nonce.
    """

    jwt: str
    seed: bytes = field(repr=False)

    @classmethod
    def read(cls, path: str) -> Credentials:
        """Reads a ``.creds`` file: the first line of its first two
        ``-----BEGIN`` blocks are the JWT and the seed.

        Raises:
            MissingDependencyError: the nkeys package is not installed.
            UnavailableError: the file cannot be read or is not a creds file.
        """
        try:
            import nkeys  # noqa: F401
        except ImportError as e:
            raise MissingDependencyError(
                "NATS credentials files need the nkeys package: pip install 'liftbridge[nats]'"
            ) from e
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise UnavailableError(f"cannot read the NATS credentials file {path!r}: {e}") from e
        blocks: list[str] = []
        lines = iter(text.splitlines())
        for line in lines:
            if line.strip().startswith("-----BEGIN"):
                for inner in lines:
                    if inner.strip() and not inner.strip().startswith("---"):
                        blocks.append(inner.strip())
                        break
        if len(blocks) < 2:
            raise UnavailableError(f"{path!r} is not a NATS credentials file (JWT and NKey seed)")
        return cls(blocks[0], blocks[1].encode())

    def sign(self, nonce: str) -> dict[str, str]:
        """The ``jwt`` and ``sig`` fields of ``CONNECT`` for the server's ``nonce``."""
        import nkeys

        keys = nkeys.from_seed(bytearray(self.seed))
        signature = keys.sign(nonce.encode())
        return {
            "jwt": self.jwt,
            "sig": base64.urlsafe_b64encode(signature).decode().rstrip("="),
        }
