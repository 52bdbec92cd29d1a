"""Challenge generation (spec §5.1): pure functions of a random source."""

from __future__ import annotations

import hashlib
import random
import re
import secrets
from dataclasses import dataclass

from bots import texts
from bots.selectors import MODE_BUTTON, MODE_MATH

CALLBACK_PAYLOAD = re.compile(r"v:([0-9]+)")
# The button challenge's only button carries this value, which is also its answer.
BUTTON_ANSWER = 0
SMALLEST_OPERAND = 1
LARGEST_OPERAND = 9
LARGEST_ANSWER = 2 * LARGEST_OPERAND  # answers and distractors are drawn from 0..18

_system_random = random.SystemRandom()


@dataclass(frozen=True)
class Challenge:
    text: str
    answer: int
    reply_markup: dict


def _button(label: str, value: int) -> dict:
    # The payload carries only the value, never whether it is the right one.
    return {"text": label, "callback_data": f"v:{value}"}


def math_challenge(rng: random.Random | None = None) -> Challenge:
    """``a + b = ?`` or ``a - b = ?`` (operands 1..9, never negative) with four options.

    Subtraction only when a ≥ b and a coin flip says so; three distinct wrong options from 0..18;
    the options are shuffled.
    """
    rng = rng or _system_random
    first = rng.randint(SMALLEST_OPERAND, LARGEST_OPERAND)
    second = rng.randint(SMALLEST_OPERAND, LARGEST_OPERAND)
    if first >= second and rng.random() < 0.5:
        question, answer = f"{first} - {second} = ?", first - second
    else:
        question, answer = f"{first} + {second} = ?", first + second
    wrong = rng.sample([value for value in range(LARGEST_ANSWER + 1) if value != answer], 3)
    options = [answer, *wrong]
    rng.shuffle(options)
    return Challenge(
        text=texts.challenge_math(question),
        answer=answer,
        reply_markup={"inline_keyboard": [[_button(str(value), value) for value in options]]},
    )


def button_challenge() -> Challenge:
    """One "I'm not a robot" button. Weak by design: any bot can click it."""
    return Challenge(
        text=texts.challenge_button(),
        answer=BUTTON_ANSWER,
        reply_markup={
            "inline_keyboard": [[_button(texts.challenge_button_label(), BUTTON_ANSWER)]]
        },
    )


def build_challenge(mode: str) -> Challenge | None:
    """The challenge of ``mode``; None for turnstile (a web page, not a message challenge)."""
    if mode == MODE_MATH:
        return math_challenge()
    if mode == MODE_BUTTON:
        return button_challenge()
    return None


def new_request_hash() -> str:
    """The SHA-256 hex of 32 fresh random bytes: a new challenge's fence identity."""
    return hashlib.sha256(secrets.token_bytes(32)).hexdigest()


def parse_callback_value(data: object) -> int | None:
    """The value of a ``v:<digits>`` payload, or None for anything else."""
    if not isinstance(data, str):
        return None
    match = CALLBACK_PAYLOAD.fullmatch(data)
    if match is None or len(match.group(1)) > 9:
        return None
    return int(match.group(1))
