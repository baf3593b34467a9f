"""The request-body policy every operation follows: ``--extra-body``, chat_template_kwargs, refused fields.

docs/design.md, "Options every request-sending operation takes": ``--extra-body`` is merged into every
request, but it cannot override a field the operation sets itself. Such a field is *refused*: it is
not sent, and the refusal is recorded in the operation's evidence record (``limitations`` and
``data.request_policy``) and said on its card. ``chat_template_kwargs`` layer per key, lowest
first: ``--extra-body``'s own ``chat_template_kwargs``, then ``--chat-template-kwargs``; a run dir's
pin and a prompt record's own field come after (``rundir.RunDir.pin``, ``data/prompts.py``).

One function, ``body_policy``, applies the rule; every command calls it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from inferencekit.errors import OpError
from inferencekit.redact import register_fields

__all__ = ["BodyPolicy", "body_policy", "parse_json_object"]


def parse_json_object(text: str | None, flag: str) -> dict[str, Any]:
    """``{}`` for None or empty text, else the parsed JSON object.

    The values of credential-like fields in it are registered as secrets (``redact.register_fields``).

    Raises:
        OpError: the text is not JSON, or not a JSON object (the message names ``flag``).
    """
    if not text:
        return {}
    try:
        val = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise OpError(f"{flag} is not valid JSON: {e}") from None
    if not isinstance(val, dict):
        raise OpError(f"{flag} must be a JSON object, got {type(val).__name__}")
    register_fields(val)  # a credential-like field's value is sent, never written (redact.py)
    return val


@dataclass(frozen=True, slots=True)
class BodyPolicy:
    """What an operation adds to every request body, and what it refused.

    Attributes:
        operation: the operation's name as a user types it (``"bench serve"``), for the refusal's sentence.
        extra: the ``--extra-body`` fields sent with every request (refused ones and
            ``chat_template_kwargs`` removed).
        chat_template_kwargs: the layered chat_template_kwargs (``{}``: none).
        refused: ``--extra-body`` field names the operation sets itself and therefore did not send, sorted.
    """

    operation: str
    extra: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    refused: tuple[str, ...] = ()

    def limitations(self) -> list[str]:
        """The refusal as one sentence for a record's ``limitations`` and the card (``[]`` when nothing was refused)."""
        if not self.refused:
            return []
        return [f"--extra-body fields {', '.join(self.refused)} were not sent: {self.operation} sets "
                f"{'it' if len(self.refused) == 1 else 'them'} itself"]

    def to_json(self) -> dict[str, Any]:
        """``{"operation", "extra_body", "chat_template_kwargs", "refused_fields"}`` for ``data.request_policy``."""
        return {"operation": self.operation, "extra_body": dict(self.extra),
                "chat_template_kwargs": dict(self.chat_template_kwargs), "refused_fields": list(self.refused)}

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> BodyPolicy:
        """The policy stored by ``to_json`` (an empty one for None: nothing was added or refused)."""
        d = d or {}
        return cls(str(d.get("operation") or ""), dict(d.get("extra_body") or {}),
                   dict(d.get("chat_template_kwargs") or {}), tuple(d.get("refused_fields") or ()))

    def with_extra(self, extra: dict[str, Any]) -> BodyPolicy:
        """The same policy with ``extra`` as the fields sent (a stored run replays its own)."""
        return BodyPolicy(self.operation, dict(extra), dict(self.chat_template_kwargs), self.refused)


def body_policy(extra_body: str | dict[str, Any] | None, chat_template_kwargs: str | dict[str, Any] | None, *,
                fixed: Collection[str], operation: str) -> BodyPolicy:
    """Apply the request-body policy to the ``--extra-body`` and ``--chat-template-kwargs`` flags.

    Args:
        extra_body: the flag's JSON text (or an already parsed object).
        chat_template_kwargs: the flag's JSON text (or an already parsed object).
        fixed: the fields the operation sets itself; ``--extra-body`` cannot override them.
        operation: how the user names the operation (``"gates order"``).

    Returns:
        the ``BodyPolicy``: fields to send, layered chat_template_kwargs, and the refused names.

    Raises:
        OpError: either flag is not a JSON object, or ``--extra-body``'s ``chat_template_kwargs`` is not one.
    """
    extra = dict(extra_body) if isinstance(extra_body, dict) else parse_json_object(extra_body, "--extra-body")
    flag_ctk = (dict(chat_template_kwargs) if isinstance(chat_template_kwargs, dict)
                else parse_json_object(chat_template_kwargs, "--chat-template-kwargs"))
    inner = extra.get("chat_template_kwargs")
    if inner is not None and not isinstance(inner, dict):
        raise OpError(f"--extra-body: chat_template_kwargs must be a JSON object, got {type(inner).__name__}")
    ctk = {**(inner or {}), **flag_ctk}
    refused = tuple(sorted(k for k in extra if k in fixed))
    kept = {k: v for k, v in extra.items() if k not in fixed and k != "chat_template_kwargs"}
    return BodyPolicy(operation, kept, ctk, refused)
