"""The UI's one URL grammar (evolve/ui/routes.py): every page key round-trips through its URL, malformed URLs are
no page, and the static report's link conversion reads links with the same grammar as the server."""
from __future__ import annotations

import pytest

from evolve.ui import freeze, routes

KEYS = [("overview",), ("runs_json",), ("static", "live.js"), ("curves", "wall"), ("compare", "evaluations"),
        ("run", "seed-0"), ("run", "a b/c?&#é"), ("training", "r"), ("problem", "r", "pbe/list-4"),
        ("problem", "r", "x&y=z?"), ("lineage", "r", None, 0, 0), ("lineage", "r", "pbe/int-1", 2, 3),
        ("program", "r", 17)]


@pytest.mark.parametrize("key", KEYS)
def test_every_key_round_trips_through_its_url(key):
    assert routes.parse_url(routes.url(key)) == key


@pytest.mark.parametrize("url", ["/curves?x=nope", "/run", "/run/r/problem", "/run/r/program/1x",
                                 "/run/r/program/١٢", "/run/r/lineage?island=zz", "/run/r/lineage?page=9999999999",
                                 "/elsewhere", "/run/r/unknown", "/static/a/b"])
def test_malformed_urls_are_no_page(url):
    assert routes.parse_url(url) is None


def test_the_report_reads_links_with_the_same_grammar():
    assert freeze.page_key("/") == freeze.page_key("/compare?x=wall") == ("compare",)
    assert freeze.page_key(routes.url(("program", "r", 3))) == ("program", "r", 3)
    assert freeze.page_key("/static/live.js") is None and freeze.page_key("/curves?x=nope") is None
