"""Inputs given as URLs (``s3://``, ``gs://``, ``http(s)://``, ``file://``, ``memory://``, ...) read through fsspec.

``as_path`` turns a command-line or piece path into a ``Path`` (a local file: every reader keeps
its own code path, memory maps included) or a ``UrlPath``, which has the few ``Path`` methods the
readers use (``open``, ``stat().st_size``, ``is_dir``, ``name``) on an fsspec file system. A
``UrlPath`` is only its URL string, so pieces and tasks carry the URL and each worker opens it
itself. fsspec is imported on the first URL only (optional extra ``veotrace[remote]``); a missing
fsspec or protocol package, an unknown protocol, a missing object and a refused read each become
one error naming the URL.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from types import SimpleNamespace

from veotrace.errors import TraceFormatError, UsageError
from veotrace.outputs import URL_SCHEME, folded_url  # noqa: F401  (one pattern for inputs and outputs)

# arrow_file and local_path take a Path or a UrlPath alike, and sources.base needs them for every reader:
# they live there (base never imports this module) and stay importable from here.
from veotrace.sources.base import arrow_file, detail, local_path, natural_key  # noqa: F401

_URL = re.compile(rf"^{URL_SCHEME}://")
#: fsspec file systems by protocol, per process (workers build their own).
_FS: dict[str, object] = {}
#: fsspec ``info`` fields that change when an object is rewritten (S3/HTTP, GCS, local/SFTP, Azure, memory).
_VERSION_KEYS = ("ETag", "etag", "generation", "md5Hash", "mtime", "LastModified", "last_modified", "updated", "created")


def is_url(text: object) -> bool:
    return isinstance(text, (str, UrlPath)) and bool(_URL.match(str(text)))


def as_path(value: str | Path | UrlPath) -> Path | UrlPath:
    """A ``UrlPath`` for a URL, else a ``Path`` (given ``Path`` and ``UrlPath`` values pass through)."""
    if isinstance(value, (Path, UrlPath)):
        return value
    return UrlPath(value) if is_url(value) else Path(value)


def arrow_source(path: Path | UrlPath):
    """What pyarrow's readers (``pq.ParquetFile``, ``pa.OSFile`` users) take: the path, or an open file."""
    return path if isinstance(path, Path) else path.open("rb")


class UrlPath:
    """An object (or a "folder" prefix) at a URL, with the ``Path`` methods the readers use."""

    __slots__ = ("url",)

    def __init__(self, url: str) -> None:
        head, _, rest = url.partition("://")
        self.url = f"{head}://{rest.rstrip('/')}" if rest.rstrip("/") else url

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"UrlPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UrlPath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    def __reduce__(self):
        return UrlPath, (self.url,)

    @property
    def name(self) -> str:
        return self.url.partition("://")[2].rstrip("/").rpartition("/")[2]

    @property
    def parent(self) -> UrlPath:
        head, _, rest = self.url.partition("://")
        return UrlPath(f"{head}://{rest.rpartition('/')[0]}" if "/" in rest else self.url)

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix

    def _fs(self):
        try:
            import fsspec
        except ImportError:
            raise UsageError(f"reading URLs ({self.url}) needs fsspec",
                             hint="Install it: pip install 'veotrace[remote]'") from None
        protocol = self.url.partition("://")[0].lower()
        try:
            fs = _FS.get(protocol)
            if fs is None:
                fs = _FS[protocol] = fsspec.filesystem(protocol, skip_instance_cache=True)
            return fs, fs._strip_protocol(self.url)
        except ValueError as exc:  # "Protocol not known"
            raise UsageError(f"{self.url}: no fsspec file system for '{protocol}://' ({exc})",
                             hint="Use a protocol fsspec knows (file, memory, s3, gs, http, https, ...)") from None
        except ImportError as exc:  # e.g. "Install s3fs to access S3"
            raise UsageError(f"{self.url}: the '{protocol}://' protocol needs a package that is not installed ({exc})",
                             hint="Install the fsspec package for it (s3fs, gcsfs, aiohttp, ...)") from None

    def _call(self, fn, *args):
        fs, key = self._fs()
        try:
            return fn(fs, key, *args)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", self.url) from None
        except PermissionError as exc:
            raise PermissionError(errno.EACCES, f"access refused ({exc})", self.url) from None
        except Exception as exc:  # noqa: BLE001 - a store's own errors (no credentials, timeouts, ...)
            raise TraceFormatError(f"cannot read the object ({type(exc).__name__}: {detail(exc)})", path=self.url,
                                   hint="Check the URL, the credentials and the network") from None

    def open(self, mode: str = "rb"):
        if mode != "rb":
            raise ValueError("URLs are read only")
        return self._call(lambda fs, key: fs.open(key, "rb"))

    def stat(self) -> SimpleNamespace:
        """``st_size``, and ``st_version``: what changes when the object is rewritten (its ETag, generation or
        modified time, the first the store gives; None when it gives none), which readers that keep a decoded
        file (the snapshot readers) key it on, as they key a local file on its ``st_mtime_ns``."""
        info = self._call(lambda fs, key: fs.info(key))
        version = next((f"{k}={info[k]}" for k in _VERSION_KEYS if info.get(k) is not None), None)
        return SimpleNamespace(st_size=int(info.get("size") or 0), st_mtime=0.0, st_version=version)

    def is_dir(self) -> bool:
        return bool(self._call(lambda fs, key: fs.isdir(key)))

    def is_file(self) -> bool:
        return bool(self._call(lambda fs, key: fs.isfile(key)))

    def exists(self) -> bool:
        return bool(self._call(lambda fs, key: fs.exists(key)))

    def is_symlink(self) -> bool:
        return False

    def files(self) -> list[UrlPath]:
        """The objects under this "folder" prefix, as ``expand_paths`` lists a local folder: recursive,
        no dot-named parts, natural name order part by part (log.2 before log.10)."""
        _, key = self._fs()
        found = self._call(lambda fs, key: fs.find(key))
        base = key.rstrip("/") + "/"
        rel = [f[len(base):] for f in found if f.startswith(base)]
        rel = [r for r in rel if r and not any(part.startswith(".") for part in r.split("/"))]
        rel.sort(key=lambda r: [natural_key(Path(part)) for part in r.split("/")])
        prefix = self.url.rstrip("/") + "/"
        return [UrlPath(prefix + r) for r in rel]
