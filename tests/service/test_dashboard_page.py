"""The dashboard page as a browser first fetches it: its icon and a viewport for phone widths."""

from __future__ import annotations

from .conftest import Running


def test_the_page_links_an_icon_that_is_served(service: Running) -> None:
    page = service.client.get("/")
    assert page.status_code == 200
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page.text
    assert '<meta name="viewport" content="width=device-width' in page.text  # phones lay it out at their width
    icon = service.client.get("/static/favicon.svg")
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert icon.text.lstrip().startswith("<svg")
