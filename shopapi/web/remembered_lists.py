"""What a list's revalidation found, kept so that the next revalidation of the same request is
answered before it reaches Flask (shopapi/pipeline/revalidation.py): the tables the list reads,
their versions then, and its weak ETag. `list_response` notes it. Why that answer is the
handler's own: docs/pipeline.md."""

import collections
import contextvars
import dataclasses
import hashlib
import threading

# Revalidated requests remembered per process, the least recently revalidated out first: about
# 350 bytes each (tracemalloc: a 16-byte key, the tables' set shared with the other lists of the
# same tables, a 16-byte digest of their versions, the tag), so 10,000 are about 3.5 MB. Only
# requests that revalidate (If-None-Match) are noted: a client that polls a list.
MAX_KNOWN = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class Known:
    tables: frozenset[str]
    versions: bytes  # a digest of the tables' versions when the tag was made
    tag: str


def digest_of(versions: str) -> bytes:
    # The versions name every shard of every table read: a kilobyte, kept as 16 bytes.
    return hashlib.blake2b(versions.encode(), digest_size=16).digest()


class RememberedLists:
    def __init__(self, max_known: int = MAX_KNOWN):
        self._known: collections.OrderedDict[bytes, Known] = collections.OrderedDict()
        self._tables: dict[frozenset[str], frozenset[str]] = {}
        self._max_known = max_known
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._known)

    def get(self, request: bytes) -> Known | None:
        with self._lock:
            known = self._known.get(request)
            if known is not None:
                self._known.move_to_end(request)
            return known

    def note(self, request: bytes, tables: frozenset[str], versions: str, tag: str) -> None:
        with self._lock:
            tables = self._tables.setdefault(tables, tables)
            self._known[request] = Known(tables, digest_of(versions), tag)
            self._known.move_to_end(request)
            while len(self._known) > self._max_known:
                self._known.popitem(last=False)


# The revalidating request being handled, and where to note what it found (set by the pipeline;
# the request's Flask thread runs in a copy of its context).
current: contextvars.ContextVar[tuple[RememberedLists, bytes] | None] = contextvars.ContextVar(
    "revalidation", default=None
)


def note(tables: frozenset[str], versions: str, tag: str) -> None:
    """Note the list's tables, their versions and its tag for the request being handled, if it
    revalidates."""
    revalidating = current.get()
    if revalidating is not None:
        remembered, request = revalidating
        remembered.note(request, tables, versions, tag)
