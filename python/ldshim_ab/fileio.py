"""ldshim_ab.fileio — the one way the project's Python tools touch files.

ldshim-ab, bench/ab/per_domain.py and tools/mkman.py open, create, replace and read files only
through this module (tests/ab/test_fileio.py greps them for any other open()). It exists
because the tools run as root from shared directories such as /tmp, where another user can
plant a link, a FIFO or a huge sparse file at a name the tool is about to use. The rules:

Writes
    A result is written to a new file created with O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC relative
    to a directory descriptor opened once (so a link planted at the name is never followed and
    the directory cannot be swapped between checks), then renamed over the target only when the
    target is absent or a regular file the user owns (lstat). Nothing is truncated in place.
    Modes: 0644 under the umask; private files 0600.
Output directories
    Created new (mkdir, which never follows a link) or an existing directory the user owns that
    is not writable by group or others, in a directory that others cannot write unless it is
    sticky (/tmp is fine, a 0777 directory is not). new_dir_name() gives default names another
    user cannot predict (a random suffix).
Reads
    O_RDONLY|O_NONBLOCK|O_CLOEXEC (a FIFO cannot block the open), fstat must say a regular file,
    the size must be at most the caller's cap (checked before reading, so a 10 GiB sparse file
    costs nothing) and so must every line. Anything else raises FileError, whose text is one
    line for the user; the tools print it and exit 2.

Standard library only, Python 3.8+. Imported as ldshim_ab.fileio from the pip-installed
package and from a checkout's python/; the copies of ldshim-ab that `make` builds and
`make install` installs carry it inlined (ldshim_build.py inline_fileio), so it is the same
code everywhere.
"""
import errno
import os
import secrets
import stat
import time

# Bounds a caller may pass; each input states its own (see the tools' --help and doc/ab.md).
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Longest path accepted before any system call: PATH_MAX on Linux. A longer one (the 4 KiB+
# case of the hostile-path matrix) gets FileError instead of an OSError deep inside.
PATH_MAX = 4096


class FileError(Exception):
    """A file the tool cannot use as asked. str(e) is one line naming the file and the reason,
    control characters escaped (printable())."""


def printable(s, limit=512):
    """`s` with control characters (terminal escapes among them) shown as \\xNN and cut to
    `limit` characters: safe to print whatever a file name or a program's output holds."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    s = str(s)
    cut = len(s) > limit
    if cut:
        s = s[:limit]
    out = []
    for ch in s:
        o = ord(ch)
        if o < 0x20 or o == 0x7f or 0x80 <= o < 0xa0:
            out.append("\\x%02x" % o if o != 0x09 else "\\t")
        elif 0x2028 <= o <= 0x202e or 0x2066 <= o <= 0x2069:    # line breaks, bidi overrides
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    return "".join(out) + ("..." if cut else "")


def _why(e):
    return e.strerror or str(e)


def _check_path(path, what):
    if not isinstance(path, str) or not path:
        raise FileError("%s: empty path" % what)
    if "\0" in path:
        raise FileError("%s: path holds a NUL byte" % what)
    if len(os.fsencode(path)) >= PATH_MAX:
        raise FileError("%s: path longer than %d bytes: %s" % (what, PATH_MAX - 1, printable(path, 80)))


def _kind(mode):
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


# ----------------------------------------------------------------------------- reads

def _read_fd(fd, st, cap, what, shown):
    if not stat.S_ISREG(st.st_mode):
        raise FileError("%s %s is %s, not a regular file" % (what, shown, _kind(st.st_mode)))
    if st.st_size > cap:
        raise FileError("%s %s is %d bytes, more than the %d this input may hold"
                        % (what, shown, st.st_size, cap))
    chunks, got = [], 0
    while got <= cap:
        b = os.read(fd, min(1 << 20, cap + 1 - got))
        if not b:
            break
        chunks.append(b)
        got += len(b)
    if got > cap:                          # it grew after fstat
        raise FileError("%s %s holds more than the %d bytes this input may hold" % (what, shown, cap))
    return b"".join(chunks)


def _check_lines(data, line_cap, what, shown):
    if line_cap is None:
        return
    start, n = 0, len(data)
    while start < n:
        end = data.find(b"\n", start)
        if end < 0:
            end = n
        if end - start > line_cap:
            raise FileError("%s %s has a line longer than %d bytes" % (what, shown, line_cap))
        start = end + 1


def read_bytes(path, cap, what="file", line_cap=None, dir_fd=None, nofollow=False):
    """The whole content of the regular file at `path` (relative to `dir_fd` when given), at
    most `cap` bytes, every line at most `line_cap` bytes. FileError for anything else: a FIFO,
    a device, a directory, a file too large, a line too long, an open that fails."""
    if dir_fd is None:
        _check_path(path, what)
    shown = printable(path, 200)
    flags = os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC | (_O_NOFOLLOW if nofollow else 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP and nofollow:
            raise FileError("%s %s is a symbolic link; refused" % (what, shown))
        raise FileError("cannot open %s %s: %s" % (what, shown, _why(e)))
    try:
        data = _read_fd(fd, os.fstat(fd), cap, what, shown)
    except OSError as e:
        raise FileError("cannot read %s %s: %s" % (what, shown, _why(e)))
    finally:
        os.close(fd)
    _check_lines(data, line_cap, what, shown)
    return data


def read_text(path, cap, what="file", line_cap=None, dir_fd=None, nofollow=False):
    """read_bytes() decoded as UTF-8; FileError when it is not UTF-8."""
    data = read_bytes(path, cap, what, line_cap, dir_fd, nofollow)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise FileError("%s %s is not UTF-8 text" % (what, printable(path, 200)))


def check_regular(path, cap, what="file", magic=None):
    """Raise FileError unless `path` opens (without blocking) as a readable regular file of at
    most `cap` bytes, starting with the bytes `magic` when given. For a file the tool passes on
    (a policy, a library) rather than reads."""
    _check_path(path, what)
    shown = printable(path, 200)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC)
    except OSError as e:
        raise FileError("cannot open %s %s: %s" % (what, shown, _why(e)))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileError("%s %s is %s, not a regular file" % (what, shown, _kind(st.st_mode)))
        if st.st_size > cap:
            raise FileError("%s %s is %d bytes, more than the %d this input may hold"
                            % (what, shown, st.st_size, cap))
        if magic is not None and os.pread(fd, len(magic), 0) != magic:
            raise FileError("%s %s is not a %s" % (what, shown, "shared object (ELF)"
                                                   if magic == b"\x7fELF" else "file of its kind"))
    except OSError as e:
        raise FileError("cannot read %s %s: %s" % (what, shown, _why(e)))
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- directories

def new_dir_name(prefix):
    """'<prefix>-YYYYmmdd-HHMMSS-<16 random hex digits>': a default output directory name that
    another user cannot create first."""
    return "%s-%s-%s" % (prefix, time.strftime("%Y%m%d-%H%M%S"), secrets.token_hex(8))


def _check_dir_fd(fd, shown):
    st = os.fstat(fd)
    if not stat.S_ISDIR(st.st_mode):
        raise FileError("%s is not a directory" % shown)
    if st.st_uid != os.geteuid():
        raise FileError("%s belongs to uid %d, not to you (uid %d); refused: pick a "
                        "directory of your own" % (shown, st.st_uid, os.geteuid()))
    if st.st_mode & 0o022:
        raise FileError("%s is writable by %s (mode %04o); refused: another user "
                        "could plant files there" % (shown, "group and others" if st.st_mode & 0o022 == 0o022
                                                     else "group" if st.st_mode & 0o020 else "others",
                                                     stat.S_IMODE(st.st_mode)))


def _open_dir(name, dir_fd, shown):
    try:
        return os.open(name, os.O_RDONLY | os.O_NONBLOCK | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC,
                       dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise FileError("%s is not a directory (or is a symbolic link); refused" % shown)
        raise FileError("cannot open directory %s: %s" % (shown, _why(e)))


class OutDir:
    """A directory the tool writes into, opened once; every name below is relative to its
    descriptor. Use OutDir.open(); close() (or `with`) releases the descriptor."""

    def __init__(self, fd, path):
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, path, create=True, mode=0o755, what="output directory"):
        """The directory at `path`: created new (`mode` under the umask) when absent and
        `create`, else an existing one the user owns that is not group/other-writable. Its last
        component must not be a symbolic link."""
        _check_path(path, what)
        path = os.path.abspath(path)
        shown = "%s %s" % (what, printable(path, 200))
        parent, base = os.path.split(path)
        if not base:
            base, parent = ".", path
        try:
            pfd = os.open(parent, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except OSError as e:
            raise FileError("cannot open the directory above %s: %s" % (shown, _why(e)))
        try:
            pst = os.fstat(pfd)
            if pst.st_mode & 0o002 and not pst.st_mode & stat.S_ISVTX:
                # anyone may rename or replace the entry for `path` there, swapping the
                # directory between the tool and the programs it passes the path to
                raise FileError("the directory above %s is writable by others and not sticky "
                                "(mode %04o); refused" % (shown, stat.S_IMODE(pst.st_mode)))
            return cls._at(pfd, base, path, create, mode, shown)
        finally:
            os.close(pfd)

    @classmethod
    def _at(cls, pfd, base, path, create, mode, shown):
        if create:
            try:
                os.mkdir(base, mode, dir_fd=pfd)
            except FileExistsError:
                pass
            except OSError as e:
                raise FileError("cannot create %s: %s" % (shown, _why(e)))
        fd = _open_dir(base, pfd, shown)
        try:
            _check_dir_fd(fd, shown)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def subdir(self, name, create=True, mode=0o755):
        """The directory `name` in this one, with the same checks as open()."""
        return self._at(self.fd, name, os.path.join(self.path, name), create, mode,
                        "directory %s" % printable(os.path.join(self.path, name), 200))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def join(self, name):
        return os.path.join(self.path, name)

    def _shown(self, name):
        return printable(self.join(name), 200)

    # -- inspection
    def listdir(self):
        try:
            return os.listdir(self.fd)
        except OSError as e:
            raise FileError("cannot list %s: %s" % (printable(self.path, 200), _why(e)))

    def lstat(self, name):
        """os.stat_result of `name` without following a link, None when absent."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise FileError("cannot stat %s: %s" % (self._shown(name), _why(e)))

    def exists(self, name):
        return self.lstat(name) is not None

    def unlink(self, name):
        """Remove `name` (a link itself, never its target); absent is fine."""
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise FileError("cannot remove %s: %s" % (self._shown(name), _why(e)))

    def rmdir(self, name):
        """Remove the directory `name` and the files in it (one level: what a tool wrote);
        a link at `name` is removed, never followed."""
        st = self.lstat(name)
        if st is None:
            return
        if not stat.S_ISDIR(st.st_mode):
            return self.unlink(name)
        with self.subdir(name, create=False) as d:
            for f in d.listdir():
                d.unlink(f)
        try:
            os.rmdir(name, dir_fd=self.fd)
        except OSError as e:
            raise FileError("cannot remove %s: %s" % (self._shown(name), _why(e)))

    # -- writes
    def create(self, name, private=False, readable=False):
        """A new file `name` opened for writing (O_CREAT|O_EXCL|O_NOFOLLOW: fails when anything,
        a planted link included, is there), and reading with `readable`. Returns the
        descriptor; the caller closes it."""
        acc = os.O_RDWR if readable else os.O_WRONLY
        try:
            return os.open(name, acc | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                           0o600 if private else 0o644, dir_fd=self.fd)
        except FileExistsError:
            raise FileError("cannot create %s: something is already there; refused"
                            % self._shown(name))
        except OSError as e:
            raise FileError("cannot create %s: %s" % (self._shown(name), _why(e)))

    def create_file(self, name, private=False, mode="w"):
        """create() wrapped as a Python file object ('w' text, 'wb' binary, 'w+' read back)."""
        fd = self.create(name, private, readable="+" in mode)
        kw = {} if "b" in mode else dict(encoding="utf-8", newline="")
        return os.fdopen(fd, mode, **kw)

    def _replaceable(self, name):
        st = self.lstat(name)
        if st is None:
            return
        if not stat.S_ISREG(st.st_mode):
            raise FileError("refusing to replace %s: it is %s" % (self._shown(name), _kind(st.st_mode)))
        if st.st_uid != os.geteuid():
            raise FileError("refusing to replace %s: it belongs to uid %d, not to you"
                            % (self._shown(name), st.st_uid))

    def write(self, name, data, private=False):
        """Replace `name` with `data` (str as UTF-8, or bytes): a new temporary file, then a
        rename over `name` when that is absent or a regular file the user owns."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._replaceable(name)
        tmp = ".%s.%s.tmp" % (name[:64], secrets.token_hex(8))
        fd = self.create(tmp, private)
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            self._replaceable(name)
            os.rename(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except OSError as e:
            self.unlink(tmp)
            raise FileError("cannot write %s: %s" % (self._shown(name), _why(e)))
        except BaseException:
            self.unlink(tmp)
            raise

    def read_bytes(self, name, cap, what="file", line_cap=None):
        """read_bytes() of `name` in this directory, a link at `name` refused."""
        return read_bytes(name, cap, "%s %s" % (what, printable(self.path, 200) + "/"),
                          line_cap, dir_fd=self.fd, nofollow=True)

    def read_text(self, name, cap, what="file", line_cap=None):
        return read_text(name, cap, "%s %s" % (what, printable(self.path, 200) + "/"),
                         line_cap, dir_fd=self.fd, nofollow=True)


class Appender:
    """A file created new in an OutDir and appended to line by line (runs.csv, runs.jsonl):
    what was written stays on disk however the tool ends, and nothing is rewritten."""

    def __init__(self, outdir, name, private=False):
        self.name = name
        self.fd = outdir.create(name, private)
        self._shown = outdir._shown(name)

    def write(self, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
        except OSError as e:
            raise FileError("cannot write %s: %s" % (self._shown, _why(e)))

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def write_file(path, data, private=False, what="file"):
    """Replace the file at `path` the OutDir.write() way; the directory above it must be the
    user's own and not group/other-writable (the current directory included)."""
    _check_path(path, what)
    parent, base = os.path.split(os.path.abspath(path))
    with OutDir.open(parent or "/", create=False, what="directory of the %s" % what) as d:
        d.write(base, data, private)
