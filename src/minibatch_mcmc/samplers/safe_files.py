"""Files in a checkpoint directory: temporaries never opened through a planted link, one lock per run, clear disk errors.

Every file is written to a temporary created with ``tempfile.mkstemp`` in the directory (``O_CREAT | O_EXCL`` and,
where the platform has it, ``O_NOFOLLOW``, under a fresh random name: a link planted at any name is never followed),
flushed and renamed over its final name. A run holds ``fcntl.flock`` on ``.lock`` for its whole length (warm-up and
sampling), so a second run on the same directory is refused before it writes anything; the operating system drops the
lock when the process dies, so a killed run never blocks the next. Where ``flock`` is missing or unsupported (Windows,
some network file systems) the run goes on unlocked with a warning. A full disk (or any failed write) is one
``CheckpointWriteError`` naming the error, the directory and what is still safe there; the temporary is removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Callable, Iterator

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

LOCK_FILE = ".lock"


class CheckpointWriteError(OSError, ValueError):
    """A checkpoint or saved warm-up could not be written (its ``errno`` is the operating system's, e.g. ENOSPC)."""


def write_error(err: OSError, path: Path, what: str, safe: str) -> CheckpointWriteError:
    """One line for a failed write: the error (ENOSPC by name), the file, and what in the directory is still intact."""
    code = errno.errorcode.get(err.errno or 0, "unknown error")
    reason = "the disk is full" if err.errno == errno.ENOSPC else (err.strerror or str(err))
    return CheckpointWriteError(err.errno or 0, f"could not write {what} {path} ({code}: {reason}); {safe}")


def write_through_temp(path: Path, write: Callable[[Path], None], what: str, safe: str) -> Path:
    """Run ``write(tmp)`` on a fresh exclusive temporary beside ``path``, flush it and rename it to ``path``.

    The temporary is removed whatever fails; an ``OSError`` becomes one ``CheckpointWriteError`` (``what``: the kind of
    file, ``safe``: what the caller keeps).
    """
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise write_error(err, path, what, safe) from None
    tmp = Path(name)
    try:
        os.close(fd)
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise write_error(err, path, what, safe) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_bytes(path: Path, content: bytes, what: str, safe: str) -> Path:
    """``content`` written to ``path`` through an exclusive temporary (crash-safe; see ``write_through_temp``)."""
    return write_through_temp(path, lambda tmp: tmp.write_bytes(content), what, safe)


def remove_temporaries(directory: Path) -> None:
    """Remove the temporaries of a run that died while writing (links among them are removed, never followed)."""
    for stale in directory.glob(".*.tmp"):
        if stale.is_symlink() or stale.is_file():
            stale.unlink()


def _holder() -> str:
    """This thread's mark in a lock file: process and thread id."""
    return f"{os.getpid()} {threading.get_ident()}"


def _not_writable(directory: Path, err: OSError) -> ValueError:
    """The refusal of a checkpoint directory this process cannot write to."""
    why = err.strerror or err
    return ValueError(
        f"checkpoint directory {directory} is not writable ({why}); choose a directory this process can write to"
    )


@contextlib.contextmanager
def run_lock(directory: str | os.PathLike) -> Iterator[None]:
    """Hold the run lock of ``directory`` (created, and checked writable, first) for the ``with`` block.

    Taken again by the thread that holds it (``auto_sample`` calls ``sample``), it is a no-op; held by another
    process or thread, it is refused with one ``ValueError`` before anything is written.
    """
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-check-", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
        fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise ValueError(
                f"{path / LOCK_FILE} is a symbolic link; remove it (a checkpoint directory's lock is a plain file)"
            ) from None
        raise _not_writable(path, err) from None
    try:
        if not _lock(fd, path):
            os.lseek(fd, 0, os.SEEK_SET)
            holder = os.read(fd, 100).decode(errors="replace").strip()
            if holder == _holder():
                yield
                return
            raise ValueError(
                f"checkpoint directory {path} is in use by another run (process {holder.split(' ')[0] or 'unknown'} holds "
                f"{path / LOCK_FILE}); wait for it to finish, or choose another directory"
            )
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, _holder().encode())
        yield
    finally:
        os.close(fd)  # releases the flock


def _lock(fd: int, path: Path) -> bool:
    """Take ``flock`` on ``fd`` without waiting; ``False`` if another holds it (unsupported: warn, ``True``)."""
    if fcntl is None:
        warnings.warn(
            f"file locks are not available here: a second run started on {path} would not be refused", stacklevel=4
        )
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            return False
        warnings.warn(
            f"cannot lock {path / LOCK_FILE} ({err.strerror}): a second run started on {path} would not be refused",
            stacklevel=4,
        )
    return True
