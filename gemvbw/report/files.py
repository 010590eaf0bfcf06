"""Result files written as a careful Unix tool writes them: atomically, with the permissions a shell
redirect would give, never replacing what is not a regular file.

A temporary file in the destination's directory is written, flushed to disk, given the mode
(an existing file's own, else 0666 less the umask, where mkstemp alone gives 0600) and renamed
over the destination, so a crash leaves the old file or none, never a truncated one. A symlink
is followed (the file it points to is replaced and the link kept, as `>` does); a directory, a
device node, a FIFO or a socket is refused, since a rename would replace the node itself.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile


def dumps(doc: dict) -> str:
    """The JSON text of a result, as written to files and the screen."""
    return json.dumps(doc, indent=2) + "\n"


class UnwritablePath(OSError):
    """The path is not, or does not lead to, a regular file gemvbw may replace."""


def destination(path: str) -> str:
    """Where writing ``path`` lands: the file a symlink leads to; refuses paths that are not regular files."""
    real = os.path.realpath(path)  # follows every link, also a dangling one to where it points
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "a device node")
        raise UnwritablePath(f"{path!r} is {kind}, not a regular file: gemvbw writes its results atomically "
                             "(a new file renamed over the old one), which would replace it; choose a file name")
    return real


def _mode_for(real: str) -> int:
    try:
        return stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        umask = os.umask(0)  # the only way to read it: set any value (which one does not matter), restore it
        os.umask(umask)
        return 0o666 & ~umask


def write_atomic(path: str, text: str) -> None:
    real = destination(path)
    directory = os.path.dirname(real)  # realpath is absolute: never empty
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".gemvbw-", suffix=".tmp")
    try:
        # (an explicit codec, whatever the locale; Python reads codec names in any case, so "UTF-8" is the same)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(real))
        os.replace(tmp, real)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and not isinstance(exc, UnwritablePath):  # name the result file, not the tmp
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise
