"""Write the fine-tune's task: training chats and held-out questions, deterministically.

The fine-tune teaches two things about Quorvath, the fictional island nation of the shipped data
(data/README.md): 12 facts (hand-written, `data/facts.jsonl`) and a skill, writing a passenger's
ticket code the way Quorvath's transit office does. The code's form is made up, so the base model
cannot write one before the fine-tune; every question names a new passenger (made-up surnames,
each used once), so hundreds of held-out questions are hundreds of independent draws from the
same population: the held-out accuracy gets an interval of a few points (13 fact questions
alone: one question was 8 points).

Half the held-out codes are asked in the phrasings training uses and half in phrasings kept out
of training (a form of words never seen). No held-out question appears in the training chats
(checked), and no held-out passenger's name is a training one.

    python tools/make_task_data.py            # rewrites data/train.jsonl and data/heldout.jsonl
    python tools/make_task_data.py --check    # exit 1 if the files differ from what it writes
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SEED = 20261127
TRAIN_CODES = 64
HELDOUT_CODES = 240

# The skill: Quorvath Transit's ticket code is the passenger's surname, the seat number and the
# first three letters of the day, joined by hyphens ("Quenlow-14-Tue"). Each message names the
# three in its own order and words; the answer must pick them out and write them in the office's
# order and form. Training and held-out questions draw from disjoint halves of the phrasings'
# slot values where it matters (surnames are made fresh for every question).
ANSWER = "The ticket code is {code}."
TRAIN_PHRASINGS = [
    "What is the ticket code for {first} {surname}, seat {seat}, travelling on {day}?",
    "Ticket code please: {first} {surname} in seat {seat} on {day}.",
    "{first} {surname} has seat {seat} on {day}. What is the ticket code?",
    "Seat {seat}, {day}, passenger {first} {surname}: which ticket code?",
    "Give the ticket code for the {day} trip of {first} {surname} (seat {seat}).",
    "On {day}, {first} {surname} sits in seat {seat}. Write the ticket code.",
]
HELDOUT_ONLY_PHRASINGS = [
    "I am {first} {surname}, booked into seat {seat} for {day}. What code goes on my ticket?",
    "Which ticket code does the office give {first} {surname}, seat {seat}, for {day}?",
    "For {day}, seat {seat} is taken by {first} {surname}. Its ticket code?",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FIRST = [
    "Mara",
    "Tobin",
    "Iselde",
    "Corvin",
    "Wren",
    "Hale",
    "Ysolde",
    "Brannoc",
    "Tamsin",
    "Odo",
    "Lirien",
    "Fenwick",
    "Saoirse",
    "Anselm",
    "Greer",
    "Ottilie",
    "Rowan",
    "Piet",
    "Esme",
    "Jory",
]
# surnames are made from an onset and a tail: 24 x 20 = 480 of them, each used once
ONSETS = [
    "Quen",
    "Brask",
    "Morv",
    "Tell",
    "Drum",
    "Hask",
    "Ferr",
    "Gald",
    "Pell",
    "Corm",
    "Vast",
    "Thorn",
    "Orl",
    "Sund",
    "Kell",
    "Marr",
    "Bex",
    "Holl",
    "Tarr",
    "Wend",
    "Ash",
    "Fron",
    "Lisk",
    "Rave",
]
TAILS = [
    "low",
    "wick",
    "ridge",
    "ham",
    "ley",
    "mere",
    "by",
    "den",
    "holt",
    "ford",
    "ston",
    "well",
    "gard",
    "worth",
    "croft",
    "ing",
    "more",
    "dale",
    "rick",
    "ett",
]


@dataclass(frozen=True)
class Ticket:
    question: str
    code: str


def _tickets(
    phrasings: list[str], surnames: list[str], firsts: list[str], rng: random.Random
) -> list[Ticket]:
    out = []
    for surname in surnames:
        seat, day = rng.randint(1, 80), rng.choice(DAYS)
        first = rng.choice(firsts)
        question = rng.choice(phrasings).format(first=first, surname=surname, seat=seat, day=day)
        out.append(Ticket(question, f"{surname}-{seat}-{day[:3]}"))
    return out


def build() -> tuple[list[Ticket], list[Ticket]]:
    """(training tickets, held-out tickets), the same on every run: every surname once."""
    rng = random.Random(SEED)
    surnames = [onset + tail for onset in ONSETS for tail in TAILS]
    rng.shuffle(surnames)
    train_names, held_names = surnames[:TRAIN_CODES], surnames[TRAIN_CODES:][:HELDOUT_CODES]
    half = len(FIRST) // 2
    train = _tickets(TRAIN_PHRASINGS, train_names, FIRST[:half], rng)
    same = HELDOUT_CODES // 2  # half in training's phrasings, half in phrasings never trained on
    heldout = _tickets(TRAIN_PHRASINGS, held_names[:same], FIRST[half:], rng)
    heldout += _tickets(HELDOUT_ONLY_PHRASINGS, held_names[same:], FIRST[half:], rng)
    rng.shuffle(heldout)
    return train, heldout


def _line(row: dict) -> str:
    return json.dumps(row, ensure_ascii=False) + "\n"


def render() -> dict[Path, str]:
    """Each file's full text: the hand-written facts first, then the routing messages."""
    train, heldout = build()
    facts = [json.loads(line) for line in (DATA / "facts.jsonl").read_text().splitlines() if line]
    fact_train = [r["chat"] for r in facts if "chat" in r]
    fact_heldout = [r["question"] for r in facts if "question" in r]
    train_rows = [*fact_train]
    for t in train:
        user = {"role": "user", "content": t.question}
        assistant = {"role": "assistant", "content": ANSWER.format(code=t.code)}
        train_rows.append({"messages": [user, assistant]})
    heldout_rows = [*fact_heldout]
    for t in heldout:
        heldout_rows.append(
            {"question": t.question, "answer": ANSWER.format(code=t.code), "accept": [t.code]}
        )
    asked = {r["messages"][0]["content"] for r in train_rows}
    overlap = [r["question"] for r in heldout_rows if r["question"] in asked]
    if overlap:
        raise SystemExit(f"held-out questions also in training: {overlap[:3]}")
    return {
        DATA / "train.jsonl": "".join(_line(r) for r in train_rows),
        DATA / "heldout.jsonl": "".join(_line(r) for r in heldout_rows),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    files = render()
    if args.check:
        stale = [str(p) for p, text in files.items() if p.read_text() != text]
        if stale:
            print(f"out of date: {', '.join(stale)} (run python tools/make_task_data.py)")
            return 1
        return 0
    for path, text in files.items():
        path.write_text(text)
        print(f"wrote {path} ({text.count(chr(10))} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
