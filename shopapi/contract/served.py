"""Each API version's contract at `{base}/openapi.json` and `{base}/openapi.yaml`: as written and
bundled, prepared once as bytes, with a strong `ETag` and gzip. Why: docs/contract.md."""

import base64
import functools
import gzip
import hashlib

import orjson
import yaml
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from shopapi.contract.operations import base_path_of

_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class Representation:
    """One document's bytes in one media type, plain and gzipped, each with its entity-tag; made
    when first asked for, so that a start-up does not dump YAML that nobody may ask for."""

    def __init__(self, make_body, media_type: str):
        self._make_body = make_body
        self.media_type = media_type

    @functools.cached_property
    def plain(self) -> tuple[bytes, str]:
        body = self._make_body()
        return body, _entity_tag(body)

    @functools.cached_property
    def gzipped(self) -> tuple[bytes, str]:
        zipped = gzip.compress(self.plain[0], compresslevel=9, mtime=0)
        return zipped, _entity_tag(zipped)

    @property
    def tags(self) -> set[str]:
        return {self.plain[1], self.gzipped[1]}


def _entity_tag(body: bytes) -> str:
    digest = hashlib.sha256(body).digest()
    return '"' + base64.urlsafe_b64encode(digest).rstrip(b"=").decode() + '"'


@functools.cache  # bounded: one entry per spec document served (v1, v2)
def _prepared(json_body: bytes) -> tuple[Representation, Representation]:
    # Cached by content: every app a process builds from the same spec files shares the bytes.
    def as_yaml() -> bytes:
        spec = orjson.loads(json_body)
        return yaml.dump(spec, Dumper=_Dumper, sort_keys=False, allow_unicode=True).encode()

    return Representation(lambda: json_body, "application/json"), Representation(
        as_yaml, "application/yaml"
    )


# The extensions by which Connexion finds our code (a handler's module, a security check's
# function): the app routes by them, but a client's document names no module of ours.
CODE_NAMES = frozenset(
    {
        "x-openapi-router-controller",
        "x-tokenInfoFunc",
        "x-apikeyInfoFunc",
        "x-bearerInfoFunc",
        "x-basicInfoFunc",
        "x-scopeValidateFunc",
    }
)


def without_code_names(node):
    """`node` as clients read it: a copy without the CODE_NAMES extensions."""
    if isinstance(node, dict):
        return {k: without_code_names(v) for k, v in node.items() if k not in CODE_NAMES}
    if isinstance(node, list):
        return [without_code_names(item) for item in node]
    return node


def documents(specs: list[dict]) -> dict[str, Representation]:
    """The served representations of each spec, by path (`/v1/openapi.json`, ...)."""
    served = {}
    for spec in specs:
        base = base_path_of(spec)
        as_json, as_yaml = _prepared(orjson.dumps(without_code_names(spec)))
        served[f"{base}/openapi.json"] = as_json
        served[f"{base}/openapi.yaml"] = as_yaml
    return served


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether `Accept-Encoding` (RFC 9110 12.5.3) admits gzip."""
    qualities = {}
    for item in (accept_encoding or "").split(","):
        coding, *parameters = (part.strip() for part in item.split(";"))
        quality = 1.0
        for parameter in parameters:
            name, _, value = parameter.partition("=")
            if name.strip().lower() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        qualities[coding.lower()] = quality
    return qualities.get("gzip", qualities.get("x-gzip", qualities.get("*", 0.0))) > 0


def _matches(if_none_match: str, tags: set[str]) -> bool:
    """Weak comparison (RFC 9110 13.1.2) of an If-None-Match list with the document's tags."""
    offered = {tag.strip().removeprefix("W/") for tag in if_none_match.split(",")}
    return "*" in offered or bool(offered & tags)


class ServedContractMiddleware:
    def __init__(self, app: ASGIApp, documents: dict[str, Representation]):
        self.app = app
        self.documents = documents

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        document = self.documents.get(scope["path"]) if scope["type"] == "http" else None
        if document is None or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        zipped = accepts_gzip(headers.get("accept-encoding"))
        body, tag = document.gzipped if zipped else document.plain
        response_headers = [
            (b"etag", tag.encode()),
            (b"cache-control", b"no-cache"),
            (b"vary", b"Accept-Encoding"),
        ]
        if_none_match = headers.get("if-none-match")
        if if_none_match is not None and _matches(if_none_match, document.tags):
            await send({"type": "http.response.start", "status": 304, "headers": response_headers})
            await send({"type": "http.response.body", "body": b""})
            return
        response_headers += [
            (b"content-type", document.media_type.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        if zipped:
            response_headers.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": response_headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )
