"""`embed`'s scan of a text input (`scan_input`): one pass over the bytes, in memory bounded by its
block, however long a line; UTF-8 errors named by line and byte offset wherever they fall."""

from __future__ import annotations

import hashlib
import tracemalloc

import pytest

from spacy_elmo import ElmoFileError
from spacy_elmo.embed.sentences import scan_input

BLOCK = 1 << 20  # what the scan reads at a time


def scan_peak(path) -> tuple:
    """`scan_input(path)` and the most bytes Python objects held at once while it ran."""
    tracemalloc.start()
    try:
        info = scan_input(path)
        return info, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_one_long_line_is_scanned_in_memory_bounded_by_the_block(tmp_path):
    """The scan re-joined the bytes after the last \\n with each new block: a line without \\n
    was copied and searched again per MiB, quadratic in its length (200 MB: 40 s against 0.6 s in
    lines), holding the whole line twice. Now the same bytes in one line or in many hold about the
    same: a few blocks."""
    one, many = tmp_path / "one.txt", tmp_path / "many.txt"
    one.write_bytes(b"word " * (20 * BLOCK // 5))
    many.write_bytes((b"word " * 6 + b"word\n") * (20 * BLOCK // 35))
    (one_info, one_peak), (many_info, many_peak) = scan_peak(one), scan_peak(many)
    assert one_info["lines"] == 1 and many_info["lines"] == 20 * BLOCK // 35
    assert one_info["input_sha256"] == hashlib.sha256(one.read_bytes()).hexdigest()
    assert one_peak < 8 * BLOCK and many_peak < 8 * BLOCK, (one_peak, many_peak)


@pytest.mark.parametrize(
    "head, bad, reason",
    [
        (b"a\n" + b"x" * (BLOCK - 1), b"\xc3\x28", "invalid continuation byte"),  # at a block's end
        (b"a\n" + b"x" * (3 * BLOCK), b"\xff", "invalid start byte"),  # deep in a long line
        (b"a\nb\n" + b"x" * (BLOCK + 5), b"\xe2\x82", "unexpected end of data"),  # cut at the end
        # a character cut two bytes in by the block's end, then a bad byte just before a \n: the
        # line counted in the block from the bad byte, not from two bytes after it
        (b"a\n" + b"x" * (BLOCK - 4), b"\xc3\n", "invalid continuation byte"),
    ],
)
def test_invalid_utf8_in_a_long_line_names_its_line_and_byte(tmp_path, head, bad, reason):
    path = tmp_path / "in.txt"
    path.write_bytes(head + "€".encode() * 3 + bad + (b"" if "end" in reason else b" z\nlast"))
    with pytest.raises(ElmoFileError) as err:
        scan_input(path)
    line = head.count(b"\n") + 1
    expected = f"invalid UTF-8 on line {line}, byte {len(head) + 9} of the file ({reason})"
    assert expected in str(err.value), str(err.value)


def test_a_character_split_between_blocks_is_valid(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"x" * (BLOCK - 1) + "€".encode() + b"\n" + b"y" * (BLOCK - 2) + "€".encode())
    assert scan_input(path)["lines"] == 2
