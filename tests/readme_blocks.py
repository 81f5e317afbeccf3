"""The fenced blocks of README.md, each with the `readme-test: skip` mark on the line before it."""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional

from .helpers import REPO

README = REPO / "README.md"
MARK = re.compile(r"<!--\s*readme-test:\s*skip\s+(network|hours)\b(.*?)-->")


class Block(NamedTuple):
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    skip: Optional[str]  # the mark's reason, or None


def readme_blocks(text: str) -> List[Block]:
    """The fenced blocks of a markdown text, with the skip mark on the line before each."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```\s*([\w-]*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start, lang, body = i, fence.group(2).lower(), []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(fence.group(1)) :])
            i += 1
        if i == len(lines):
            raise ValueError(f"README.md:{start + 1}: fenced block never closed")
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.search(previous)
        skip = f"{mark.group(1)}{mark.group(2).rstrip()}" if mark else None
        blocks.append(Block(start + 1, lang, "\n".join(body) + "\n", skip))
        i += 1
    return blocks
