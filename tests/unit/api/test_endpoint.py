import pytest

from inferencekit.api.endpoint import Endpoint, normalize_base_url, read_api_key
from inferencekit.errors import OpError


@pytest.mark.parametrize("url,root", [
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000"),
    ("https://api.example.com/v1/", "https://api.example.com"),
    ("http://host/prefix/v1", "http://host/prefix"),
    ("http://[::1]:9000/v1", "http://[::1]:9000"),
])
def test_base_url_with_or_without_v1(url, root):
    assert normalize_base_url(url) == root


@pytest.mark.parametrize("url,msg", [
    ("http://user:secret@host:8000", "credentials"),
    ("http://host:8000/v1?api_key=abc", "credential"),
    ("ftp://host", "only http"),
    ("localhost:8000", "only http"),
    ("", "empty"),
])
def test_bad_urls_are_refused(url, msg):
    with pytest.raises(OpError, match=msg):
        normalize_base_url(url)


def test_api_key_comes_from_the_named_variable(monkeypatch):
    monkeypatch.setenv("IK_TEST_KEY", "sk-value-123")
    assert read_api_key("IK_TEST_KEY") == "sk-value-123"
    assert Endpoint.parse("http://h:1", "IK_TEST_KEY").headers() == {"Authorization": "Bearer sk-value-123"}
    assert read_api_key(None) is None


def test_unset_key_variable_names_the_variable_not_a_value(monkeypatch):
    monkeypatch.delenv("IK_MISSING", raising=False)
    with pytest.raises(OpError, match="IK_MISSING"):
        read_api_key("IK_MISSING")


def test_a_key_passed_instead_of_a_name_is_refused_without_echoing_it():
    with pytest.raises(OpError) as e:
        read_api_key("sk-live-abcdef1234567890")
    assert "abcdef1234567890" not in str(e.value)


def test_a_key_with_a_line_break_is_refused_in_one_line_without_echoing_it(monkeypatch, tmp_path):
    # an HTTP header cannot carry CR or LF; it was a traceback (ValueError) before
    from inferencekit.cli import main

    monkeypatch.setenv("IK_TEST_KEY", "sk-test-abcdefgh\r\nX-Injected: 1")
    with pytest.raises(OpError, match="IK_TEST_KEY .* holds a line break") as e:
        read_api_key("IK_TEST_KEY")
    assert "abcdefgh" not in str(e.value)
    assert main(["bench", "serve", "--base-url", "http://127.0.0.1:9", "--api-key-env", "IK_TEST_KEY",
                 "--run-dir", str(tmp_path / "run"), "--quiet"]) == 2
    assert not (tmp_path / "run").exists()
