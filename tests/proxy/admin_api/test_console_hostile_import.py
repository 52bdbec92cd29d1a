"""The console's import page with hostile files: a lone surrogate in an entry's text makes only
that entry invalid (PostgreSQL could not store it), invalid UTF-8 and JSON nested too deep are
a message on the page — never a 500."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from proxy.models import Account
from tests.fakes.oauth import Identity, access_token_for
from tests.proxy.admin_api.test_console_pages import _operator


def _upload(body: bytes) -> SimpleUploadedFile:
    return SimpleUploadedFile("export.json", body, content_type="application/json")


def test_a_lone_surrogate_in_an_imported_label_makes_that_entry_invalid(admin):
    good = access_token_for(Identity("org-good", "user-good"), expires_in=3600)
    hostile = access_token_for(Identity("org-bad", "user-bad"), expires_in=3600)
    body = (
        f'[{{"token": "{good}", "label": "fine"}}, {{"token": "{hostile}", "label": "\\ud800"}}]'
    ).encode()

    page = _operator(admin).post("/admin/proxy/account/import/", {"file": _upload(body)})

    assert page.status_code == 200
    html = page.content.decode()
    assert ": 1 imported, 0 updated, 0 skipped, 1 invalid." in html
    assert "the label contains text that is not valid Unicode (a lone surrogate)" in html
    assert list(Account.objects.values_list("label", flat=True)) == ["fine"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'[{"type": "codex", "access_token": "\xff\xfe"}]', "That is not JSON."),
        (b"[" * 100_000 + b"]" * 100_000, "That JSON is nested too deep."),
    ],
    ids=["invalid-utf-8", "nested-too-deep"],
)
def test_an_unreadable_file_is_a_message_on_the_page(admin, body, message):
    page = _operator(admin).post("/admin/proxy/account/import/", {"file": _upload(body)})

    assert page.status_code == 200
    assert message in page.content.decode()
    assert Account.objects.count() == 0
