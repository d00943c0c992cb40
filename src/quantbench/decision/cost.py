"""What a configuration costs: hardware price per hour -> price per million output tokens."""

from __future__ import annotations


def cost_per_million_tokens(price_per_hour: float, output_tokens_per_s: float) -> float | None:
    """Price of generating one million output tokens at a sustained rate; None if nothing flowed.

    The machine is paid for by the hour whether it is busy or not, so the cost of a token is the
    price of the time it takes: price/hour / (tokens/s * 3600 s/hour) * 1e6.
    """
    if output_tokens_per_s <= 0:
        return None
    return price_per_hour / (output_tokens_per_s * 3600.0) * 1e6
