"""Seeded generators of conversations: lengths from distributions, text from the project's data.

Lengths are in tokens. Each is drawn from a log-normal distribution given by its mean and its
log-space spread ``sigma`` (request lengths are right-skewed: most are short, a few long), then
scaled by the workload's ``length_scale`` and clipped to ``[minimum, maximum]``. The text is cut
from a fixed corpus (the project's own data files: a licence text and the fine-tune's facts), so
nothing is downloaded and the same seed gives the same prompts on every machine. With the
model's tokenizer the text is cut to exactly the drawn number of tokens; without one, words stand
in for tokens (close for these BPE vocabularies; the server's usage gives the true count).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from quantbench.errors import UserError
from quantbench.textfile import read_utf8
from quantbench.workloads.marker import Room
from quantbench.workloads.plan import Conversation, Turn

Cut = Callable[[str, int], str]
"""(text, n_tokens) -> the first n_tokens tokens of text, as text."""


@dataclass(frozen=True)
class LengthDist:
    """A log-normal length in tokens with the given mean, clipped to [minimum, maximum]."""

    mean: float
    sigma: float = 0.0
    minimum: int = 1
    maximum: int | None = None

    def sample(self, rng: random.Random, scale: float = 1.0) -> float:
        """One draw, scaled and clipped, not rounded (think times are seconds)."""
        mean = self.mean * scale
        if self.sigma <= 0:
            value = mean
        else:
            # mean of a log-normal is exp(mu + sigma^2 / 2)
            mu = math.log(max(mean, 1e-9)) - self.sigma**2 / 2
            value = rng.lognormvariate(mu, self.sigma)
        value = max(float(self.minimum), value)
        if self.maximum is not None:
            value = min(value, max(float(self.minimum), self.maximum * scale))
        return value

    def draw(self, rng: random.Random, scale: float = 1.0) -> int:
        """One length in tokens."""
        return max(self.minimum, round(self.sample(rng, scale)))


class Corpus:
    """An endless, deterministic supply of text: windows of the project's data files."""

    def __init__(self, paths: Sequence[Path], cut: Cut | None = None) -> None:
        words: list[str] = []
        for path in paths:
            if not Path(path).is_file():
                # a file left out silently would change every prompt, and say nothing
                raise UserError(
                    f"data.corpus: {path} does not exist; give existing text files (paths are "
                    "relative to the repository root)"
                )
            words += read_utf8(path, "data.corpus").split()
        if not words:
            raise ValueError(f"no text to make prompts from in {[str(p) for p in paths]}")
        self.words = words
        self.cut = cut

    def text(self, n_tokens: int, rng: random.Random) -> str:
        """About ``n_tokens`` tokens of running text from a random place (exact with a tokenizer)."""
        n_tokens = max(1, n_tokens)
        start = rng.randrange(len(self.words))
        # a word is one token or more: a tokenizer cut needs no more words than tokens
        picked = [self.words[(start + i) % len(self.words)] for i in range(n_tokens)]
        text = " ".join(picked)
        return self.cut(text, n_tokens) if self.cut is not None else text


@dataclass(frozen=True)
class SingleTurn:
    """One question (or instruction with a text to work on) and one answer."""

    input: LengthDist
    output: LengthDist
    instruction: str = "Continue the following text."


@dataclass(frozen=True)
class Rag:
    """A question over a few documents pasted into the prompt; a short answer."""

    documents: int
    document: LengthDist
    question: LengthDist
    output: LengthDist


@dataclass(frozen=True)
class MultiTurn:
    """Conversations of several turns behind a system prompt every user shares."""

    turns: LengthDist
    user: LengthDist
    output: LengthDist
    think_s: LengthDist
    """Seconds between an answer and the next turn (drawn per turn; lengths here are seconds)."""
    system: int
    """Tokens of the shared system prompt (the same text for every conversation)."""


Shape = SingleTurn | Rag | MultiTurn


def _as_is(text: str, tail: str = "") -> str:
    return text + tail


def conversations(
    shape: Shape,
    count: int,
    seed: int,
    corpus: Corpus,
    *,
    scenario: str,
    length_scale: float = 1.0,
    room: Room | None = None,
) -> list[Conversation]:
    """``count`` conversations of ``shape``, the same for the same seed; with ``room``, each
    first message makes room for the unique marker within its length (:mod:`.marker`)."""
    mark: Callable[..., str] = room if room is not None else _as_is
    rng = random.Random(seed)
    out: list[Conversation] = []
    system_text = None
    if isinstance(shape, MultiTurn):
        system_rng = random.Random(seed ^ 0x5EED)
        system_text = (
            "You are a helpful assistant for the people of Quorvath. Follow these notes. "
            + corpus.text(max(1, round(shape.system * length_scale)), system_rng)
        )
    for i in range(count):
        cid = f"{scenario}-{i:05d}"
        if isinstance(shape, SingleTurn):
            n_in = shape.input.draw(rng, length_scale)
            # one newline: two are one token more before text than at the end of a message
            # (SmolLM2), so a text the marker's room used up would leave a length not met
            text = mark(f"{shape.instruction}\n{corpus.text(n_in, rng)}")
            turns = [Turn(text, shape.output.draw(rng, length_scale))]
        elif isinstance(shape, Rag):
            docs = [
                f"Document {d + 1}:\n{corpus.text(shape.document.draw(rng, length_scale), rng)}"
                for d in range(shape.documents)
            ]
            question = corpus.text(shape.question.draw(rng, length_scale), rng)
            # the marker's room comes out of the documents: the question stays whole
            text = mark(
                "\n\n".join(["Answer the question using only these documents.", *docs]),
                f"\n\nQuestion: {question}?",
            )
            turns = [Turn(text, shape.output.draw(rng, length_scale))]
        else:
            n_turns = max(1, shape.turns.draw(rng))
            turns = []
            for k in range(n_turns):
                think = 0.0 if k == 0 else shape.think_s.sample(rng)
                user = corpus.text(shape.user.draw(rng, length_scale), rng)
                turns.append(
                    Turn(
                        mark(user) if k == 0 else user,
                        shape.output.draw(rng, length_scale),
                        think_s=float(think),
                    )
                )
        out.append(Conversation(prompt_id=cid, scenario=scenario, turns=turns, system=system_text))
    return out
