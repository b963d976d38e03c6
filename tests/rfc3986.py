"""RFC 3986 §5.2 reference resolution, written from the RFC's pseudo-code: the oracle the
tests hold the product's resolvers (cycles.urls.link_resolver, resolve_location and
Normalizer.normalize with a base) against. Not product code: the crawler resolves only
http(s) references, by WHATWG's rules where they differ from the RFC's."""

from __future__ import annotations

from cycles.urls import _RFC3986_SPLIT, _merge, remove_dot_segments



def resolve_reference(ref: str, base: str) -> str:
    """Resolve ``ref`` against ``base`` by RFC 3986 §5.2 alone, for any scheme.

    No normalisation beyond dot-segment removal. Uses the non-strict variant of §5.2.2
    (a reference with the base's scheme and no authority is relative), as browsers do.
    :func:`cycles.urls.normalize_url` resolves http(s) links by the same rules plus the browser
    leniencies listed in the module docstring.
    """
    r_scheme, r_auth, r_path, r_query, r_frag = _RFC3986_SPLIT.fullmatch(ref).groups()
    b_scheme, b_auth, b_path, b_query, _ = _RFC3986_SPLIT.fullmatch(base).groups()
    if r_scheme is not None and b_scheme is not None and r_auth is None \
            and r_scheme.lower() == b_scheme.lower():
        r_scheme = None  # §5.2.2: "if ((not strict) and (R.scheme == Base.scheme))"
    if r_scheme is not None:
        t = (r_scheme, r_auth, remove_dot_segments(r_path), r_query)
    elif r_auth is not None:
        t = (b_scheme, r_auth, remove_dot_segments(r_path), r_query)
    elif r_path == "":
        t = (b_scheme, b_auth, b_path, r_query if r_query is not None else b_query)
    elif r_path.startswith("/"):
        t = (b_scheme, b_auth, remove_dot_segments(r_path), r_query)
    else:
        t = (b_scheme, b_auth, remove_dot_segments(_merge(b_auth, b_path, r_path)), r_query)
    scheme, auth, path, query = t
    # §5.3 recomposition.
    out = []
    if scheme is not None:
        out.append(scheme + ":")
    if auth is not None:
        out.append("//" + auth)
    out.append(path)
    if query is not None:
        out.append("?" + query)
    if r_frag is not None:
        out.append("#" + r_frag)
    return "".join(out)
