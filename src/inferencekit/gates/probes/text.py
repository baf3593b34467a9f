"""Text material for the live probes: nonces, echo prompts, prompt tags and the rare-string pool.

Everything here is pure and draws its randomness from a ``random.Random`` the caller seeds, so a probe
plan is repeatable from its seed. The probe planner (``gates/probes/plan.py``) builds requests from
these pieces; the judges (``gates/judges/<gate>.py``) read the same helpers back (``rare_core``,
``reproduced``) so planning and judging agree on what a probe asked for.

Why each piece exists (the rules are the seed's; the strings
and phrasings here are new):

- a *nonce* is a random word from an alphabet with no look-alike characters, so a model that copies
  it cannot be excused by an ambiguous glyph, and no cache can have seen it;
- an *echo prompt* asks the model to copy a string; phrasing, delimiters and padding are drawn per
  probe so no fixed template marks a request as a probe;
- ``perturb`` changes exactly one character: a near-duplicate (semantic) cache answers the changed
  prompt with the old string;
- the *rare pool* holds strings from the parts of a vocabulary a pruned vocabulary or a logit mask
  would drop first; each is wrapped in nonces ``"<nonce> <string> <nonce>"`` so it is unpredictable.
"""

from __future__ import annotations

import random
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["ECHO_DELIMITERS", "ECHO_PADDING", "ECHO_TEMPLATES", "GENERATED_CLASSES", "NONCE_ALPHABET", "RARE_POOL",
           "EchoStyle", "echo_prompt", "echo_style", "interleave", "nonce", "perturb", "rare_core", "rare_targets",
           "reproduced", "stagger", "tag_prompt", "lead_tag"]

T = TypeVar("T")

# Letters and digits less the glyphs people and models confuse: 0/O/o, 1/I/l.
_LOOK_ALIKES = frozenset("0Oo1Il")
NONCE_ALPHABET = "".join(c for c in string.ascii_uppercase + string.ascii_lowercase + string.digits
                         if c not in _LOOK_ALIKES)

# Instruction phrasings of an echo probe. ``{o}``/``{c}`` are the delimiters, ``{s}`` the string to copy.
# Kept to wordings a 135M model follows. Measured on llama-server with SmolLM2-135M (30 Nov 2026): "Repeat
# exactly:" copied 5/8 rare strings verbatim where a string-first phrasing ("... Above, between ..., is a
# string") copied 0/9; then over 860 rare-string copies of the gate calibration runs, a "Task: copy. Input:
# ... Output: ..." phrasing copied 18%, the 〔〕, START>/<END and ``` markers 24-31%, and the fillers "Item
# <n> of today's list." and "Thanks in advance. <n>" 26-29%, against 34-53% for the wordings kept here.
ECHO_TEMPLATES = (
    "Reproduce the characters between {o} and {c} exactly as written. Reply with those characters only.\n{o}{s}{c}",
    "Your answer must be the text enclosed in {o}...{c}, copied without any change:\n\n{o}{s}{c}",
    "Repeat exactly: {o}{s}{c}",
    "Write out the following exactly, with no explanation, no quotes and no extra words: {o}{s}{c}",
    "Please repeat after me: {o}{s}{c}",
)
# Opening / closing marker pairs around the string to copy.
ECHO_DELIMITERS = (("<<", ">>"), ("[[", "]]"), ("|>", "<|"), ("«", "»"))
# Filler placed before or after the instruction; ``{n}`` becomes a short nonce.
ECHO_PADDING = ("", "", "Case {n}.", "(job {n})", "Ref: {n}")


@dataclass(frozen=True, slots=True)
class EchoStyle:
    """How one echo prompt is worded: a template, a delimiter pair and padding (before or after)."""

    template: str
    opening: str
    closing: str
    padding: str
    padding_first: bool


def nonce(rng: random.Random, n: int = 16) -> str:
    """``n`` characters drawn uniformly from ``NONCE_ALPHABET``."""
    return "".join(rng.choices(NONCE_ALPHABET, k=n))


def perturb(s: str, rng: random.Random) -> str:
    """``s`` with exactly one character (at a random position) replaced by another from ``NONCE_ALPHABET``.

    Raises:
        ValueError: ``s`` is empty (there is nothing to change).
    """
    if not s:
        raise ValueError("cannot perturb an empty string")
    pos = rng.randrange(len(s))
    replacement = rng.choice([c for c in NONCE_ALPHABET if c != s[pos]])
    return f"{s[:pos]}{replacement}{s[pos + 1:]}"


def echo_style(rng: random.Random) -> EchoStyle:
    """A random wording for one echo probe (or one original/perturbed pair, which must share it)."""
    template = rng.choice(ECHO_TEMPLATES)
    opening, closing = rng.choice(ECHO_DELIMITERS)
    padding = rng.choice(ECHO_PADDING).replace("{n}", nonce(rng, 5))
    return EchoStyle(template, opening, closing, padding, rng.random() < 0.5)


def echo_prompt(s: str, style: EchoStyle) -> str:
    """The user message asking the model to copy ``s``, worded by ``style``."""
    core = style.template.replace("{o}", style.opening).replace("{c}", style.closing).replace("{s}", s)
    if not style.padding:
        return core
    parts = (style.padding, core) if style.padding_first else (core, style.padding)
    return "\n".join(parts)


# the tag forms of a probe prompt ({t} the tag, {x} the text); the leading ones put the tag before the text
_TAG_FORMS = ("({t}) {x}", "{x}\n\n-- {t}", "Ticket {t}\n{x}", "{x} [{t}]", "#{t}\n{x}")
_LEAD_FORMS = tuple(f for f in _TAG_FORMS if f.startswith(("(", "Ticket", "#")))


def tag_prompt(text: str, rng: random.Random) -> str:
    """``text`` with a random tag in one of several forms, so a probe is never a prompt seen before."""
    tag = nonce(rng, 8)
    return rng.choice(_TAG_FORMS).format(t=tag, x=text)


def lead_tag(text: str, rng: random.Random) -> str:
    """``text`` under a fresh random tag that comes first (one of ``tag_prompt``'s leading forms): a control
    request of the caching gate shares no prefix with another tagging of the same text beyond the chat template's
    own header, so no prefix cache serves it, while its length and content match."""
    tag = nonce(rng, 8)
    return rng.choice(_LEAD_FORMS).format(t=tag, x=text)


# Strings to copy verbatim, by the part of the vocabulary they exercise. Written for inferencekit;
# every one is NFC-normalised (tests check it). ZWJ sequences are spelled with escapes so the joiners
# stay visible in review.
_ZWJ = "\u200d"
RARE_POOL: dict[str, tuple[str, ...]] = {
    "cjk": ("龍門石窟の磨崖仏", "饂飩と蕎麦の老舗", "蟋蟀在堂歲聿其莫", "鰻重と鰯の蒲焼", "鬣狗與麝香貓"),
    "hangul": ("햇살 가득한 골목길", "겨울바람에 흩날리는 눈꽃", "삶은 옥수수와 감자떡", "꿩 대신 닭"),
    "emoji": ("🦦🪸🧊🪁", "🫐🥥🪻🦚", "🪗🛼🧲🪤", "🦑🪲🫚🪷"),
    "emoji_zwj": (f"🧑{_ZWJ}🍳 👩🏾{_ZWJ}🎤", f"🐻{_ZWJ}❄️ 🧑{_ZWJ}⚕️", f"👨{_ZWJ}👨{_ZWJ}👧 🧑🏼{_ZWJ}🔧",
                  f"🏃🏻{_ZWJ}♀️ 🧑🏽{_ZWJ}🦯"),
    "devanagari": ("हिमालय की चोटियाँ", "विज्ञान और प्रौद्योगिकी", "श्रृंखला प्रतिक्रिया", "पुस्तकालय में शांति"),
    "arabic": ("مكتبة الإسكندرية القديمة", "خريطة النجوم الشمالية", "الطقس مشمس اليوم", "قهوة بالهيل"),
    # uncommon scripts (the seed's pool had the class): one string per script, the first a vocabulary drops
    "script": ("ᚠᚢᚦᚨᚱᚲ ᚷᚹᚺ", "ᏣᎳᎩ ᎦᏬᏂᎯᏍᏗ", "ⰀⰁⰂⰃ ⰄⰅⰆ", "ꓡꓲ ꓢꓴ ꓟꓬꓲ"),
    "math": ("∇×𝐁 = μ₀𝐉 + μ₀ε₀∂𝐄/∂t", "∫₀^∞ e^(−x²) dx = √π⁄2", "∀ε>0 ∃δ>0: |x−a|<δ ⇒ |f(x)−L|<ε",
             "ℤ ⊂ ℚ ⊂ ℝ ⊂ ℂ ≅ ℝ²"),
}
GENERATED_CLASSES = ("code", "number")  # made fresh by every call of ``rare_targets``


def _code_identifier(rng: random.Random) -> str:
    """A fresh identifier-heavy line no tokenizer has seen: snake, dunder and camel case pieces."""
    stem = "".join(rng.choices(string.ascii_lowercase, k=6))
    return (f"{stem}_{nonce(rng, 5)}.__{stem[:3]}_cache__ = Make{stem.title()}Pool{rng.randint(10, 999)}"
            f"(max_{stem[3:]}=0x{rng.getrandbits(12):03x})")


def _long_decimal(rng: random.Random) -> str:
    """30 to 45 random digits, the first non-zero."""
    n = rng.randint(30, 45)
    return str(rng.randint(1, 9)) + "".join(rng.choices(string.digits, k=n - 1))


def _hex_and_float(rng: random.Random) -> str:
    """A 64-bit hex literal and a float with a negative exponent, e.g. ``0x1f... 3.14159265e-27``."""
    mantissa = f"{rng.randint(1, 9)}.{rng.randint(0, 10**9 - 1):09d}"
    return f"0x{rng.getrandbits(64):016X} {mantissa}e-{rng.randint(11, 39)}"


def rare_targets(rng: random.Random, per_class: int = 1) -> list[tuple[str, str]]:
    """Rare strings to copy, each wrapped as ``"<nonce> <string> <nonce>"`` (4-character nonces).

    Args:
        rng: the plan's random source.
        per_class: strings drawn from each class of ``RARE_POOL``, without replacement up to the class's size and
            then the same draw again in turn (each copy a new attempt: fresh nonces, and the caller's framing); also
            the number of fresh ``code`` identifiers, and of each of the two ``number`` forms (30-45 digits; a hex
            literal with a float in exponent notation).

    Returns:
        ``[(class, target), ...]`` covering every class of ``RARE_POOL`` plus ``code`` and ``number``.
    """
    picked: list[tuple[str, str]] = []
    for cls, pool in RARE_POOL.items():
        drawn = rng.sample(pool, min(per_class, len(pool)))
        picked.extend((cls, drawn[i % len(drawn)]) for i in range(per_class))
    for _ in range(per_class):
        picked.append(("code", _code_identifier(rng)))
        picked.append(("number", _long_decimal(rng)))
        picked.append(("number", _hex_and_float(rng)))
    return [(cls, f"{nonce(rng, 4)} {s} {nonce(rng, 4)}") for cls, s in picked]


def rare_core(target: str) -> str:
    """The rare string of a target, without the nonce word at each end (the target itself when it has
    no such wrapping).

    A pruned vocabulary or a logit mask loses rare characters, not plain ASCII letters, so a slip in a
    nonce says nothing about the vocabulary: the judge decides on the core.
    """
    words = target.split(" ")
    if len(words) < 3 or not "".join(words[1:-1]):
        return target
    return " ".join(words[1:-1])


def reproduced(target: str, text: str) -> bool:
    """``target`` occurs in ``text`` verbatim, or after Unicode NFC normalisation of both."""
    if target in text:
        return True
    return unicodedata.normalize("NFC", target) in unicodedata.normalize("NFC", text)


def stagger(first: Sequence[T], then: Sequence[T]) -> list[T]:
    """``[f0, f1, t0, f2, t1, ..., t_last]``: each follow-up goes out right after the next first request.

    A repeat thus follows its own first request closely (at most two other requests between them, as long
    as the run is sent as one: ``plan.py`` keeps it together), so slow drift (clock, other tenants, an
    engine speeding up after a load) touches a first request and its follow-up alike. Leftovers of the
    longer list come last, in order.
    """
    out: list[T] = list(first[:1])
    pairs = list(zip(first[1:], then))
    for f, t in pairs:
        out += [f, t]
    out += first[1 + len(pairs):]
    out += then[len(pairs):]
    return out


def interleave(chains: Sequence[Sequence[T]], rng: random.Random) -> list[T]:
    """A uniformly random merge of ``chains`` that keeps each chain's own order.

    Shuffling the multiset of chain labels (one label per element) picks every order-preserving merge
    with the same probability; each label is then replaced by the next element of its chain.
    """
    labels = [i for i, chain in enumerate(chains) for _ in chain]
    rng.shuffle(labels)
    cursors = [iter(chain) for chain in chains]
    return [next(cursors[i]) for i in labels]
