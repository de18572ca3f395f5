from __future__ import annotations

import time

import pytest

from queuelog.sanitize import MAX_ERROR_CHARS, sanitize_error


def test_credentials_in_urls_are_redacted() -> None:
    text = sanitize_error("failed: postgresql://app:s3cr3t@db:5432/prod and redis://:pw@cache")
    assert "s3cr3t" not in text and "pw@" not in text
    assert "postgresql://[redacted]@db:5432" in text


def test_bearer_tokens_and_api_keys_are_redacted() -> None:
    text = sanitize_error(
        "Authorization: Bearer eyJhbGciOi.payload.sig; key ql_" + "A" * 38 + " sk_live_abcdef123456"
    )
    assert "eyJhbGciOi" not in text and "ql_AAAA" not in text and "sk_live" not in text


def test_password_secret_token_values_are_redacted() -> None:
    text = sanitize_error('password=hunter2 secret: "x y" token=abc&api_key=zzz passwd=1')
    for value in ["hunter2", "x y", "abc", "zzz"]:
        assert value not in text
    assert "password=[redacted]" in text


def test_absolute_paths_are_redacted() -> None:
    text = sanitize_error('File "/home/app/src/worker.py", line 4; C:\\Users\\bob\\app.py')
    assert "/home/app" not in text and "bob" not in text
    assert text.count("[path]") == 2


def test_relative_words_and_fractions_are_kept() -> None:
    assert (
        sanitize_error("ratio 1/2 failed: timeout after 30s")
        == "ratio 1/2 failed: timeout after 30s"
    )


def test_control_characters_are_removed_but_newlines_kept() -> None:
    assert sanitize_error("a\x00b\x1b[31mc\nd\te") == "ab[31mc\nd\te"


def test_text_is_cut_to_2000_characters() -> None:
    assert len(sanitize_error("x" * 5000)) == MAX_ERROR_CHARS == 2000


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("DB_PASSWORD=hunter2", "hunter2"),
        ("PGPASSWORD=abc123", "abc123"),
        ("client_secret=xyz987", "xyz987"),
        ("refresh_token=rt-1234", "rt-1234"),
        ("GET https://api.example.com/items?access_token=abcdef123456", "abcdef123456"),
        ("{'password': 'hunter2'}", "hunter2"),
        ('{"password": "hunter2", "api_key": "k-123456"}', "k-123456"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI", "wJalrXUtnFEMI"),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig123", "eyJzdWIiOiIxMjM0In0"),
        ("Authorization: Basic YWRtaW46aHVudGVyMg==", "YWRtaW46aHVudGVyMg"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIabc\n-----END RSA PRIVATE KEY-----", "MIIabc"),
        ("slack xoxb-123456789012-abcdef", "123456789012"),
        ("mysql://app:p@ssw0rd@db:3306/x", "ssw0rd"),
        ("C:/Users/bob/AppData/creds.json", "bob"),
        ("\\\\fileserver\\share\\hr\\salaries.xlsx", "salaries"),
        ("database file:/var/lib/app/prod.db", "prod.db"),
        ("C:\\Program Files\\Acme\\secrets\\db.ini failed", "Acme"),
    ],
)
def test_common_secrets_and_paths_are_redacted(text: str, secret: str) -> None:
    assert secret not in sanitize_error(text)


def test_format_characters_that_disguise_text_are_removed() -> None:
    assert sanitize_error("evil\u202etxt\u200b") == "eviltxt"


@pytest.mark.parametrize("unit", ["a.", "a-", "a:", "/a", "C:\\a"])
def test_adversarial_text_is_cut_before_the_rules_run(unit: str) -> None:
    # A quadratic rule on 64 KiB took tens of seconds; the text is now cut first.
    started = time.perf_counter()
    sanitize_error(unit * 32_768)
    assert time.perf_counter() - started < 2


def test_lone_surrogates_become_replacement_characters() -> None:
    # No database stores a lone surrogate and no encoder writes one out.
    assert sanitize_error("bad \ud800 byte \udfff") == "bad \ufffd byte \ufffd"
    assert sanitize_error("smile \U0001f600") == "smile \U0001f600"
