"""Where requests go and how they authenticate: base URL checks and API keys from env vars.

A base URL may be given with or without ``/v1``; credentials inside it are refused (they would
end up in run.json and evidence records). API keys are read from an environment variable whose
*name* the user gives (``--api-key-env``); only the name is ever recorded.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from urllib.parse import urlsplit

from inferencekit.errors import OpError
from inferencekit.redact import MIN_SECRET_LEN, register

__all__ = ["Endpoint", "normalize_base_url", "read_api_key"]

_WARNED: set[str] = set()  # variables whose short value was warned about (once per process)
_SECRET_QUERY = re.compile(r"(key|token|secret|password|auth)", re.I)


def normalize_base_url(url: str) -> str:
    """The server root for ``url``: scheme://host[:port][/prefix] without a trailing ``/v1``.

    Raises:
        OpError: not http(s), no host, credentials in the URL (user:password@), a query string (a
            key would be written to the run dir, and no request would carry it), or a fragment.
    """
    if not url or not isinstance(url, str):
        raise OpError("--base-url is empty; give the server's URL, e.g. http://127.0.0.1:8000")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as e:  # bad port, unbalanced IPv6 brackets
        raise OpError(f"--base-url {url!r} is not a valid URL: {e}") from None
    if parts.scheme not in ("http", "https"):
        raise OpError(f"--base-url {url!r}: only http:// and https:// URLs are supported")
    if not parts.hostname:
        raise OpError(f"--base-url {url!r} has no host")
    if parts.username or parts.password:
        raise OpError("--base-url contains credentials (user:password@host); they would be written to the run "
                      "directory. Put the key in an environment variable and pass its name with --api-key-env")
    if parts.query and _SECRET_QUERY.search(parts.query):
        raise OpError("--base-url carries what looks like a credential in its query string; pass the key "
                      "through --api-key-env instead")
    if parts.query:  # it would be dropped from every request and written to run.json: refused, whatever it holds
        raise OpError("--base-url has a query string (?...), which inferencekit neither sends with its requests nor "
                      "keeps out of the run directory; remove it (a key goes in an environment variable named by "
                      "--api-key-env)")
    if parts.fragment:
        raise OpError(f"--base-url {url!r} has a fragment (#...); remove it")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    port_part = f":{port}" if port else ""
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme}://{host}{port_part}{path}"


def read_api_key(env_name: str | None) -> str | None:
    """The API key held by the environment variable *named* ``env_name`` (None when no name).

    Raises:
        OpError: the variable is unset or empty (its name is in the message, never a value).
    """
    if not env_name:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", env_name):
        raise OpError(f"--api-key-env takes the *name* of an environment variable, e.g. OPENAI_API_KEY; "
                      f"{env_name[:3]}... is not a variable name (never pass the key itself)")
    value = os.environ.get(env_name)
    if not value:
        raise OpError(f"environment variable {env_name} (from --api-key-env) is unset or empty")
    if "\r" in value or "\n" in value:
        raise OpError(f"environment variable {env_name} (from --api-key-env) holds a line break (CR or LF); an HTTP "
                      f"header cannot carry it")
    register(value)  # from here on, every writer scrubs it (redact.py)
    if len(value) < MIN_SECRET_LEN and env_name not in _WARNED:
        _WARNED.add(env_name)
        print(f"inferencekit: warning: {env_name} holds a value of {len(value)} characters, too short to scrub from "
              f"everything written (it would cut ordinary text); only its 'Bearer …' header form is scrubbed. A key "
              f"of {MIN_SECRET_LEN} characters or more is scrubbed everywhere", file=sys.stderr)
    return value


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A server root plus the name (not the value) of its API-key variable."""

    root: str
    api_key_env: str | None = None

    @classmethod
    def parse(cls, base_url: str, api_key_env: str | None = None) -> Endpoint:
        read_api_key(api_key_env)  # fail early, before anything is sent
        return cls(normalize_base_url(base_url), api_key_env)

    def url(self, path: str) -> str:
        return self.root + path

    def headers(self) -> dict[str, str]:
        key = read_api_key(self.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}
