"""Unicode's tag characters (U+E0000-E007F) are drawn with no width at all: a payload's
"invoice.pdf" followed by tags spelling a sentence looks like "invoice.pdf" alone. They
are hidden characters like the zero-width ones (hardening 23): written as JSON escapes."""

from __future__ import annotations

import html
import json
import re

from tests.conftest import Api, enqueue
from tests.dashboard.conftest import Browser

HIDDEN = "".join(chr(0xE0000 + ord(c)) for c in "rm -rf")


def test_hardening_92_a_payload_s_tag_characters_are_shown_escaped(
    browser: Browser, producer: Api
) -> None:
    payload = {"file": "invoice.pdf" + HIDDEN, "note": "x\ufff9hid\ufffbden"}
    job = enqueue(producer, payload=payload)
    page = browser.get(f"/ui/jobs/{job['id']}").text
    assert not any(c in page for c in HIDDEN + "\ufff9\ufffb")
    # Escaped as JSON escapes them (a surrogate pair each): the text shown is the payload.
    shown = re.search(r'<pre class="json" id="payload">(.*?)</pre>', page, re.S)
    assert shown is not None
    assert json.loads(html.unescape(shown.group(1))) == payload
    assert "invoice.pdf\\udb40\\udc72\\udb40\\udc6d" in page


def test_hardening_92_tag_characters_from_a_link_are_shown_escaped(browser: Browser) -> None:
    page = browser.get("/ui/jobs", params={"type": "noop" + HIDDEN}).text
    assert not any(c in page for c in HIDDEN)
