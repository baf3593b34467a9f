"""The dev prompt set's text, as plain Python data (see ``scripts/make_dev_set.py``).

Each module holds ``PROMPTS``: a list of ``(task, user_text)`` or ``(task, user_text,
system_text)`` tuples. The order inside a module fixes the ids, so append new prompts at the end
of a task's run rather than inserting, to keep the existing ids stable.
"""

from . import long_a, long_b, long_c, long_d, medium_a, medium_b, short, very_short

BUCKET_SOURCES: dict[str, list[tuple[str, ...]]] = {
    "very_short": very_short.PROMPTS,
    "short": short.PROMPTS,
    "medium": medium_a.PROMPTS + medium_b.PROMPTS,
    "long": long_a.PROMPTS + long_b.PROMPTS + long_c.PROMPTS + long_d.PROMPTS,
}
