"""The README's Python blocks, as a script that runs them in order (shared by the
README test and the installed-wheel test). A block may be left out only with a
``<!-- readme-test: not run (reason) -->`` line just before it."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```$", re.DOTALL | re.MULTILINE)
_NOT_RUN = re.compile(r"<!-- readme-test: not run \((.+?)\) -->\s*$")


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    not_run: str | None  # the reason given in the README, or None: it runs


def blocks(text: str | None = None) -> list[Block]:
    """Every ```python block of the README, dedented, in order."""
    text = README.read_text() if text is None else text
    found = []
    for match in _BLOCK.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        reason = _NOT_RUN.search(before)
        found.append(
            Block(
                line=text.count("\n", 0, match.start()) + 1,
                code=textwrap.dedent(match.group(2)),
                not_run=reason.group(1) if reason else None,
            )
        )
    return found


def script(address: str, nats_url: str) -> str:
    """The runnable blocks as one script, against ``address`` and ``nats_url``
    instead of the README's 127.0.0.1:9292 and nats://127.0.0.1:4222."""
    parts = []
    for block in blocks():
        if block.not_run is None:
            code = block.code.replace('"127.0.0.1:9292"', repr(address))
            code = code.replace('"nats://127.0.0.1:4222"', repr(nats_url))
            parts.append(f"# --- README.md line {block.line}\n{code}")
    return "\n".join(parts)
