from __future__ import annotations

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
