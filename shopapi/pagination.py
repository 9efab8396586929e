"""Pages of a list: the `{"data", "meta", "links"}` envelope and its RFC 8288 `Link` header."""

import math
from urllib.parse import urlencode

import flask


def _page_link(page: int) -> str:
    # Relative references (RFC 3986 §4.2) stay right behind any proxy or gateway prefix.
    query = flask.request.args.to_dict(flat=False)
    query["page"] = [str(page)]
    return f"{flask.request.path}?{urlencode(query, doseq=True)}"


def page_of(query, represent, *, page: int, per_page: int, fetch=list):
    """The handler's answer for one page of `query`, each row shown by `represent`; `fetch`
    runs the page's query (to load related rows along with it)."""
    total = query.count()
    total_pages = math.ceil(total / per_page)
    rows = fetch(query.paginate(page, per_page))
    links = {"self": _page_link(page), "first": _page_link(1)}
    if page > 1:
        links["prev"] = _page_link(min(page - 1, max(total_pages, 1)))
    if page < total_pages:
        links["next"] = _page_link(page + 1)
    links["last"] = _page_link(max(total_pages, 1))
    body = {
        "data": [represent(row) for row in rows],
        "meta": {"page": page, "per_page": per_page, "total": total, "total_pages": total_pages},
        "links": links,
    }
    header = ", ".join(f'<{url}>; rel="{rel}"' for rel, url in links.items() if rel != "self")
    return body, 200, {"Link": header}
