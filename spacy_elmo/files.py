"""Files read and written safely.

Reading: every reader opens its file through `open_regular` (or checks it with `regular_file` where
a library opens it by name): a regular file, or a symlink to one, of a bounded size. A FIFO, a
device or a directory is refused, naming what it is, before it is opened (a FIFO blocks, `/dev/zero`
never ends). A model directory is read from itself: every file a loader reads in it is named through
`inside_dir`, and checked once open to be inside it still (`opened_inside`: a symlink turned in
between). A message quotes what a file holds only as an `excerpt`.

Writing: files become visible only when complete: written under a new temporary name beside the
target, fsynced, renamed into place, the rename made durable; the temporary is removed on failure.
Where a write fails, `write_errors` says what went wrong in one error (a full disk above all).
"""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator, Optional, Union

from .errors import ElmoError, ElmoFileError, ElmoResourceError

PathLike = Union[str, Path]
# How every text file is decoded: UTF-8, a byte order mark at the start of the file (Windows editors
# write one) dropped
TEXT_ENCODING = "utf-8-sig"
# bound on manifests, configs and records of a run (JSON or text, KB to a few MB)
RECORD_BYTES = 64 << 20
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


# ----------------------------------------------------------------------------------------------
# reading
def regular_file(path: PathLike, what: str, max_bytes: Optional[int] = None) -> os.stat_result:
    """The status of `path` where it is a regular file (symlinks followed) of at most `max_bytes`;
    else ElmoFileError naming the file, `what` it should be and what it is."""
    path = no_nul(path, what)
    try:
        status = os.stat(path)
    except FileNotFoundError:
        target = os.readlink(path) if path.is_symlink() else None
        dangling = f" (a symlink to {target}, which does not exist)" if target else ""
        raise ElmoFileError(f"{what} not found: {path}{dangling}") from None
    except OSError as err:
        raise ElmoFileError(f"{path}: cannot read the {what} ({err.strerror})") from None
    _check_status(path, status, what, max_bytes)
    return status


def exists(path: PathLike, what: str) -> bool:
    """Whether `path` exists (symlinks followed); ElmoFileError naming it and `what` it should be
    where the system cannot say (a name too long, no permission, a NUL character)."""
    try:
        os.stat(no_nul(path, what))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as err:
        raise ElmoFileError(f"{path}: cannot use it as the {what} ({err.strerror})") from None
    return True


def no_nul(path: PathLike, what: str) -> Path:
    """`path` as a Path; ElmoFileError naming it (escaped) where it holds a NUL (no path can)."""
    text = os.fsdecode(path)
    if "\x00" in text:
        raise ElmoFileError(f"{excerpt(text, 999)}: a NUL character in the path of the {what}")
    return Path(path)


def _check_status(path: Path, status: os.stat_result, what: str, max_bytes: Optional[int]) -> None:
    if not stat.S_ISREG(status.st_mode):
        kind = next(
            (name for is_kind, name in _KINDS if is_kind(status.st_mode)), "not a regular file"
        )
        if path.is_symlink():
            kind = f"a symlink to {os.path.realpath(path)}, {kind}"
        raise ElmoFileError(f"{path}: the {what} must be a regular file, but this is {kind}")
    if max_bytes is not None and status.st_size > max_bytes:
        raise ElmoFileError(
            f"{path}: {status.st_size:,} bytes is too large for the {what} (at most {max_bytes:,})"
        )


def inside_dir(directory: PathLike, name: str, what: str) -> Path:
    """`directory / name`, where `name` is relative without `..` and the file, symlinks resolved, is
    inside `directory`; else ElmoFileError naming it. A file that does not exist is left to its
    reader to report."""
    path = Path(directory) / name
    if Path(name).is_absolute() or ".." in Path(name).parts:
        raise ElmoFileError(
            f"{path}: refused: the {what} must be named inside the model directory {directory}"
        )
    if os.path.lexists(path):
        target, root = os.path.realpath(path), os.path.realpath(directory)
        if os.path.commonpath([target, root]) != root:
            regular_file(path, what)  # a FIFO or a device is refused as what it is
            raise ElmoFileError(
                f"{path}: refused: the {what} is a symlink to {target}, outside the model "
                f"directory {directory} (a model directory's files are read from it only)"
            )
    return path


def excerpt(text: object, limit: int = 40) -> str:
    """`repr` of the first `limit` characters of `text` (escaped, one line), `...` where cut."""
    text = str(text)
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def opened_inside(fd: int, path: PathLike, directory: PathLike, what: str) -> None:
    """ElmoFileError naming `path` where the file open at `fd` is not inside `directory`: a symlink
    turned outside after `inside_dir` looked (else any file the process can read could be read). A
    file replaced since it was opened (a save's rename) is where it was."""
    root, where = os.path.realpath(directory), _opened_path(fd) or os.path.realpath(path)
    if os.path.commonpath([where, root]) != root:
        raise ElmoFileError(
            f"{path}: refused: the {what} opened is {where}, outside the model directory "
            f"{directory} (a symlink turned outside as it was opened; a model directory's files "
            "are read from it only)"
        )


def _opened_path(fd: int) -> Optional[str]:
    """Where the file open at `fd` is (Linux: `/proc/self/fd`; one replaced since keeps its name,
    marked deleted); None where the system does not say (then: where its path leads now)."""
    try:
        where = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
    except OSError:
        return None
    return where if os.path.isabs(where) else None


def open_regular(
    path: PathLike, what: str, max_bytes: Optional[int] = None, inside: Optional[PathLike] = None
) -> BinaryIO:
    """`path` opened to read, in binary, once `regular_file` accepts it; checked again once open (it
    may have been replaced in between). `inside`: the model directory `path` was named in
    (`inside_dir`), which the file open must be inside (`opened_inside`)."""
    path = Path(path)
    regular_file(path, what, max_bytes)
    try:
        # never blocks, even on a FIFO
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise ElmoFileError(f"{path}: cannot read the {what} ({err.strerror})") from None
    try:
        _check_status(path, os.fstat(fd), what, max_bytes)
        if inside is not None:
            opened_inside(fd, path, inside, what)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(
    path: PathLike, what: str, max_bytes: int, inside: Optional[PathLike] = None
) -> bytes:
    """The bytes of `path`, read whole (see `open_regular`, `inside` too): at most `max_bytes`."""
    with open_regular(path, what, max_bytes, inside) as f:
        data = f.read(os.fstat(f.fileno()).st_size)
        if f.read(1):
            raise ElmoFileError(
                f"{path}: the {what} grew while it was read (is it still being written?)"
            )
    return data


def sha256_fd(fd: int) -> str:
    """The sha256 of the whole file open at `fd` (read with `pread`: its offset does not move)."""
    h, offset = hashlib.sha256(), 0
    while block := os.pread(fd, 1 << 20, offset):
        h.update(block)
        offset += len(block)
    return h.hexdigest()


def sha256_file(path: PathLike, what: str = "file", inside: Optional[PathLike] = None) -> str:
    """The sha256 of a regular file (see `open_regular`: `what` it is, for the message, and
    `inside`)."""
    with open_regular(path, what, inside=inside) as f:
        return sha256_fd(f.fileno())


def parse_json(data: Union[str, bytes], source: PathLike, what: str) -> Any:
    """`data` (bytes: see `TEXT_ENCODING`) parsed as JSON; ElmoFileError naming `source` where it is
    not text or not JSON (nested too deep, an integer of more digits than Python converts)."""
    try:
        return json.loads(data.decode(TEXT_ENCODING) if isinstance(data, bytes) else data)
    except (ValueError, RecursionError) as err:  # JSONDecodeError, UnicodeDecodeError: ValueErrors
        detail = str(err).split("; use sys.set_int_max_str_digits")[0]
        raise ElmoFileError(
            f"{source}: not a valid JSON {what} ({type(err).__name__}: {detail})"
        ) from None


def hdf5_dataset(f, name: str, path: PathLike, what: str):
    """The dataset `name` (`a/b/c`) of the open h5py File `f`, checked from its metadata alone
    (nothing is read); None where it is missing. ElmoFileError naming `path` where it is reached
    through a soft or an external link, is not a dataset, or keeps its data outside the file
    (external storage, a virtual dataset): `what` must hold its datasets itself and make no other
    file read."""
    import h5py

    node = f
    for part in name.split("/"):
        link = node.get(part, getlink=True)
        if link is None:
            return None
        if not isinstance(link, h5py.HardLink):
            target = (
                f"{link.filename}:{link.path}" if isinstance(link, h5py.ExternalLink) else link.path
            )
            raise ElmoFileError(
                f"{path}: '{name}' is reached through a {type(link).__name__} to {target}; {what} "
                "holds its datasets itself, never through links (dangling, or external to the file)"
            )
        node = node[part]
    if not isinstance(node, h5py.Dataset):
        raise ElmoFileError(f"{path}: '{name}' is a {type(node).__name__}, not a dataset")
    if node.is_virtual or node.id.get_create_plist().get_external_count():
        raise ElmoFileError(
            f"{path}: dataset '{name}' keeps its data outside the file (external or virtual "
            f"storage); {what} must not read other files"
        )
    return node


# ----------------------------------------------------------------------------------------------
# writing
def fsync_dir(path: PathLike) -> None:
    """Make the directory entries of `path` (new, renamed or removed files) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_temporary(name: str, target: str) -> bool:
    """Whether the file `name` is one of `atomic_path`'s temporary files for `target` (a name)."""
    return name.startswith(f".{target}.") and name.endswith(".tmp")


def _running(pid: int) -> bool:
    """Whether a process `pid` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's
        return True
    return True


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """Yield a new, empty temporary file beside `path` to write, `.NAME.PID.RANDOM.tmp` (created
    here, never through a symlink; those that killed processes left for `path` are removed first);
    on success it is fsynced and renamed to `path` (readers see the old file or the whole new one,
    even after a crash); on failure it is removed."""
    path = Path(path)
    for left in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = left.name[len(path.name) + 2 :].split(".")[0]
        if pid.isascii() and pid.isdigit() and not _running(int(pid)):
            left.unlink(missing_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_atomic(path: PathLike, data: Union[str, bytes]) -> None:
    """Write `data` (str as UTF-8) to `path` whole (see `atomic_path`)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)


def append_whole(path: PathLike, data: bytes) -> None:
    """Append `data` to `path` (made if absent) whole or not at all: a failed write is cut off
    again."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except BaseException:
            os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


@contextmanager
def atomic_dir(path: PathLike) -> Iterator[Path]:
    """Yield a new temporary directory beside `path` (`.`, a symlink: the directory it names) to
    fill; on success every file in it and it are fsynced and it is renamed to `path`, so `path`
    appears complete or not at all (a directory there before is removed once the new one is in
    place); on failure it is removed."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, old = (path.with_name(f".{path.name}.{os.getpid()}.{end}") for end in ("tmp", "old"))
    for left in (tmp, old):  # left by a killed run of this process id
        shutil.rmtree(left, ignore_errors=True)
    try:
        tmp.mkdir()
        yield tmp
        for file in tmp.rglob("*"):
            if file.is_file():
                with open(file, "rb+") as f:
                    os.fsync(f.fileno())
        fsync_dir(tmp)
        if path.is_dir() and any(path.iterdir()):
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not path.exists():
            os.replace(old, path)
        raise
    fsync_dir(path.parent)
    shutil.rmtree(old, ignore_errors=True)


def write_error(
    err: BaseException, path: PathLike, retry: str = "free space and run again"
) -> Optional[ElmoError]:
    """What went wrong writing `path`, as one error: a full disk (ElmoResourceError, then `retry`),
    a read-only file system or a permission (ElmoFileError), else the system's words; None where
    `err` is no failed write. torch reports a failed write as a RuntimeError raised while handling
    the OSError; HDF5 may name the errno in its text only."""
    cause: Optional[BaseException] = err
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__context__
    named = re.search(r"errno = (\d+)", str(err))
    code = (cause.errno if cause is not None else None) or (int(named.group(1)) if named else None)
    if cause is None and code is None:
        return None
    text = str(cause if cause is not None else err)
    if (
        code in (errno.ENOSPC, errno.EDQUOT)
        or "No space left on device" in text
        or "quota" in text.lower()
    ):
        return ElmoResourceError(f"disk full while writing {path}: {retry}")
    if code == errno.EROFS or "Read-only file system" in text:
        return ElmoFileError(f"cannot write {path}: read-only file system")
    if code in (errno.EACCES, errno.EPERM):
        return ElmoFileError(f"cannot write {path}: permission denied (read-only for this user)")
    return ElmoFileError(f"cannot write {path}: {os.strerror(code) if code else text}")


def output_dir(directory: PathLike, writer: str) -> Path:
    """`directory`, made where missing (parents too), for `writer` to write files into;
    ElmoFileError where it is something else than a directory or cannot be made."""
    directory = no_nul(directory, "output directory")
    if os.path.lexists(directory) and not directory.is_dir():
        raise ElmoFileError(f"{directory} exists and is not a directory: {writer} writes one")
    with write_errors(directory):
        directory.mkdir(parents=True, exist_ok=True)
    return directory


@contextmanager
def write_errors(path: PathLike, retry: str = "free space and run again") -> Iterator[None]:
    """Failed writes in the block -> one error (see `write_error`) naming `path`."""
    try:
        yield
    except ElmoError:
        raise
    except (OSError, RuntimeError) as err:
        error = write_error(err, path, retry)
        if error is None:
            raise
        raise error from None
