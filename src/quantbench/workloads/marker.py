"""The marker that keeps each conversation's prompt its own, and the room it takes in it.

With ``unique_prompts`` (on by default) every conversation's first message begins with a marker
of its own, four digits (``0917 ``), so that no two share a prefix by accident, neither a
conversation sent again (the traffic cycled within a point, or in another point or repeat) nor
two that begin alike (an instruction): a prefix cache then helps only where the workload reuses
a prefix on purpose. The marker counts within the
message's length, never on top of it, as ``vllm bench serve`` and AIPerf send prompts of the
asked length with only the chat template on top: the traffic is written with a placeholder,
``0000``, in front of the first message, cut back to the tokens the message had without it (the
marker takes the place of its last tokens), and the load process writes the conversation's own
digits over the placeholder when it sends it, with no tokenizer of its own.

That works because four digits are as many tokens whatever they are in the tokenizers that split
digits (SmolLM2, Llama 2, Mistral, Qwen: one token each) or group them by three (Llama 3: two
tokens). Where a tokenizer merges digits otherwise, :meth:`Room.notes` says by how much the
marker's length varies; where a message is shorter than the marker (it is then the marker
alone) or the tokenizer cannot cut it at its length, it says by how much the message misses it.
The load process imports this module: standard library only.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Callable

from quantbench.workloads.plan import Conversation, Turn

DIGITS = 4
PLACEHOLDER = "0" * DIGITS
"""What the traffic holds in front of each first message; the load process writes over it."""

Count = Callable[[str], int]
Cut = Callable[[str, int], str]


def marker_digits(prefix: str, index: int) -> str:
    """The digits of conversation ``index`` of the point and repeat ``prefix`` names (``c4-r0-``):
    consecutive from a start drawn from the prefix, so a conversation sent again within a point
    gets other digits (below 10,000 conversations) and in another point seldom the same."""
    return f"{(zlib.crc32(prefix.encode()) + index) % 10**DIGITS:0{DIGITS}d}"


def stamp(content: str, digits: str) -> str:
    """``content`` with its conversation's marker: over the placeholder, or in front (on top of
    its length) where the traffic made no room for one."""
    if content.startswith(PLACEHOLDER):
        return digits + content[len(PLACEHOLDER) :]
    return f"{digits} {content}"


def has_room(conv: Conversation) -> bool:
    """Whether the conversation's first message already holds the marker's place."""
    first = conv.raw_prompt if conv.raw_prompt is not None else conv.turns[0].content
    return first.startswith(PLACEHOLDER)


def _drop_last_word(text: str) -> str:
    return re.sub(r"\s*\S+\s*$", "", text)


class Room:
    """Makes room for the marker within each first message's own length, and keeps count of the
    messages where it could not (``count``/``cut``: the model tokenizer's; without them words
    stand in for tokens, the marker one word)."""

    def __init__(self, count: Count | None = None, cut: Cut | None = None) -> None:
        self.count = count
        self.cut = cut
        self.messages = 0
        self.over: list[int] = []
        """Tokens beyond its length, per message shorter than the marker (sent as the marker)."""
        self.off: list[int] = []
        """Tokens off its length, per message the tokenizer could not cut exactly."""

    def __call__(self, text: str, tail: str = "") -> str:
        """``text`` with the placeholder in front, cut back to the tokens ``text`` had; ``tail``
        (what must stay whole after it: a question after its documents) follows as it is."""
        self.messages += 1
        if self.count is None or self.cut is None:
            rest = _drop_last_word(text)
            return (f"{PLACEHOLDER} {rest}" if rest else PLACEHOLDER) + tail
        n = self.count(text)
        out = self._cut(text, n)
        if not tail:
            miss = self.count(out) - n
        else:  # held to the whole message: where the cut meets the tail counts too
            want = self.count(text + tail)
            miss = self.count(out + tail) - want
            for k in (n - 1, n + 1) if miss else ():
                other = self._cut(text, k)
                if self.count(other + tail) == want:
                    out, miss = other, 0
                    break
        if miss:
            (self.over if out == PLACEHOLDER and miss > 0 else self.off).append(miss)
        return out + tail

    def _cut(self, text: str, n: int) -> str:
        assert self.cut is not None
        out = self.cut(f"{PLACEHOLDER} {text}", n)
        if not out[len(PLACEHOLDER) :].strip():  # no token of its own left: the marker alone
            out = PLACEHOLDER
        return out

    def conversation(self, conv: Conversation) -> Conversation:
        """``conv`` with room for the marker in its first message (and its raw prompt: the
        same text where it was made from one)."""
        from dataclasses import replace

        first = conv.turns[0]
        content = self(first.content)
        raw = conv.raw_prompt
        if raw is not None:
            raw = content if raw == first.content else self(raw)
        turns = [Turn(content, first.max_tokens, first.think_s), *conv.turns[1:]]
        return replace(conv, turns=turns, raw_prompt=raw)

    def marker_tokens(self) -> tuple[int, int, int]:
        """(the placeholder's tokens, the fewest and the most a real marker takes), probed on
        every digit repeated and on 200 drawn markers, each followed by a word as when sent."""
        assert self.count is not None
        rng = random.Random(0)
        probes = [str(d) * DIGITS for d in range(10)]
        probes += [f"{rng.randrange(10**DIGITS):0{DIGITS}d}" for _ in range(200)]
        word = self.count("the")
        counts = [self.count(f"{p} the") - word for p in probes]
        return self.count(f"{PLACEHOLDER} the") - word, min(counts), max(counts)

    def notes(self) -> list[str]:
        """What could not be made exact, and by how much (nothing when every length is)."""
        if self.count is None or self.cut is None or not self.messages:
            return []
        out = []
        placeholder, low, high = self.marker_tokens()
        if (low, high) != (placeholder, placeholder):
            out.append(
                f"the unique marker takes {low}-{high} tokens with this tokenizer where its "
                f"placeholder takes {placeholder}: a first message may be up to "
                f"{max(placeholder - low, high - placeholder)} tokens off its length "
                "(unique_prompts: false sends prompts without it)"
            )
        if self.over:
            out.append(
                f"{len(self.over)} of {self.messages} first messages are shorter than the unique "
                f"marker: sent as the marker alone, {min(self.over)}-{max(self.over)} tokens "
                "longer than asked (ask for longer prompts, or unique_prompts: false)"
            )
        if self.off:
            out.append(
                f"{len(self.off)} of {self.messages} first messages could not be cut to their "
                f"length with the marker in front: off by {min(self.off):+d} to "
                f"{max(self.off):+d} tokens"
            )
        return out
