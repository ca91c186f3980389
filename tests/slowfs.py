"""A slow disk for the slow-disk drill: a FUSE passthrough of a folder whose writes stall.

    python tests/slowfs.py BACKING MOUNTPOINT CONTROL

mounts BACKING at MOUNTPOINT (through libfuse 3 and mfusepy) and serves it until unmounted
(``fusermount3 -u MOUNTPOINT``). Every write() first reads CONTROL: a number is a delay in
seconds added to that write; ``hold`` blocks the write until CONTROL says otherwise. Reads,
metadata and the rest pass straight through. The kernel sends each write() of the process
under test to this server as it is made (no write-back cache), so a delay here is a disk
that stalls, seen by the real system calls of the real tts-knee process.
"""

from __future__ import annotations

import errno
import os
import sys
import time

import mfusepy as fuse

POLL_S = 0.05


class SlowPassthrough(fuse.Operations):
    use_ns = True

    def __init__(self, root: str, control: str):
        self.root, self.control = root, control

    def _path(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _mode(self) -> str:
        try:
            with open(self.control, encoding="ascii") as f:
                return f.read().strip()
        except OSError:
            return ""

    def _stall(self) -> None:
        mode = self._mode()
        while mode == "hold":
            time.sleep(POLL_S)
            mode = self._mode()
        try:
            delay = float(mode or 0)
        except ValueError:
            delay = 0.0
        if delay > 0:
            time.sleep(delay)

    def getattr(self, path, fh=None):
        try:
            st = os.lstat(self._path(path))
        except OSError as e:
            raise fuse.FuseOSError(e.errno) from None
        return {
            "st_mode": st.st_mode,
            "st_nlink": st.st_nlink,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_size": st.st_size,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._path(path))]

    def mkdir(self, path, mode):
        os.mkdir(self._path(path), mode)
        return 0

    def rmdir(self, path):
        os.rmdir(self._path(path))
        return 0

    def create(self, path, mode, fi=None):
        return os.open(self._path(path), os.O_WRONLY | os.O_CREAT, mode)

    def open(self, path, flags):
        return os.open(self._path(path), flags & ~os.O_APPEND)  # the kernel gives each write its offset

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        self._stall()
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        if fh is None:
            os.truncate(self._path(path), length)
        else:
            os.ftruncate(fh, length)
        return 0

    def release(self, path, fh):
        os.close(fh)
        return 0

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        return 0

    def unlink(self, path):
        os.unlink(self._path(path))
        return 0

    def rename(self, old, new):
        os.rename(self._path(old), self._path(new))
        return 0

    def chmod(self, path, mode):
        os.chmod(self._path(path), mode)
        return 0

    def utimens(self, path, times=None):
        os.utime(self._path(path), ns=times)
        return 0

    def statfs(self, path):
        sv = os.statvfs(self._path(path))
        return {
            k: getattr(sv, k)
            for k in (
                "f_bavail",
                "f_bfree",
                "f_blocks",
                "f_bsize",
                "f_favail",
                "f_ffree",
                "f_files",
                "f_flag",
                "f_frsize",
                "f_namemax",
            )
        }

    def access(self, path, amode):
        if not os.access(self._path(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0


if __name__ == "__main__":
    root, mountpoint, control = sys.argv[1:4]
    fuse.FUSE(SlowPassthrough(root, control), mountpoint, foreground=True)
