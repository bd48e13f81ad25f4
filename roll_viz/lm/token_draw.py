"""How a decode step draws each row's next token: top-p from the request's own generator.

``next_tokens`` samples the first ``num_sampled`` rows (``torch.multinomial``, or the same
exponential race on noise drawn earlier) and takes the argmax of the rest; ``NoiseStream`` makes
each step's Exp(1) noise ahead in a helper thread, in generator order. ``lm.decode`` re-exports
``next_tokens``.
"""

from __future__ import annotations

import queue
import threading

import torch
from torch import Tensor


def next_tokens(
    logits: Tensor,
    num_sampled: int,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    noise: Tensor | None = None,
) -> Tensor:
    """Pick the next token of every row: sampled for the first ``num_sampled`` rows, greedy after.

    The draw is ``torch.multinomial(probs, 1)``, which for one sample is the exponential race
    ``argmax(probs / q)`` with ``q ~ Exp(1)`` drawn by ``exponential_`` from the generator.
    Passing ``noise`` (that ``q``, drawn earlier from the same generator) gives the same token.

    Args:
        logits: (N, V) float32 next-token logits.
        num_sampled: rows 0..num_sampled-1 sample; the rest take the argmax.
        temperature: > 0 to sample; 0 makes every row greedy.
        top_p: keep the smallest set of most likely tokens whose mass reaches top_p (1 = all).
        generator: the request's generator (the global RNG is never used).
        noise: optional (num_sampled, V) float32 Exp(1) draws to use instead of drawing now.

    Returns:
        (N,) long token ids.
    """
    if num_sampled == 0 or temperature <= 0:
        return logits.argmax(dim=-1)
    scaled = logits[:num_sampled]
    if temperature != 1.0:  # x / 1 == x bit for bit: skip the pass
        scaled = scaled / temperature
    probs = torch.softmax(scaled, dim=-1)  # (n, V)

    def draw(weights: Tensor) -> Tensor:  # (n, V) of this call's own -> (n, 1)
        if noise is None:
            return torch.multinomial(weights, 1, generator=generator)
        return weights.div_(noise).argmax(dim=-1, keepdim=True)  # in place: the same quotients

    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        keep = (sorted_probs.cumsum(dim=-1) - sorted_probs) < top_p  # the top token always stays
        picked = order.gather(-1, draw(sorted_probs * keep)).squeeze(-1)
    else:
        picked = draw(probs).squeeze(-1)
    if num_sampled == logits.shape[0]:
        return picked
    return torch.cat([picked, logits[num_sampled:].argmax(dim=-1)])


class NoiseStream:
    """The Exp(1) draws of each decode step, made ahead by a helper thread, in generator order.

    ``torch.multinomial`` spends most of its time in ``exponential_`` over the whole vocabulary
    (about 20 ms for 18 x 49152 on this CPU, single-threaded); the draws do not depend on the
    logits, so a helper thread makes step k+1's while the model computes step k. Only the helper
    touches the generator until ``close``. The generator ends up to ``AHEAD`` draws further than
    the plain loop leaves it (nothing uses it after decoding).
    """

    AHEAD = 2

    def __init__(self, generator: torch.Generator, shape: tuple[int, int], steps: int) -> None:
        self.generator, self.shape = generator, shape
        self.queue: queue.Queue = queue.Queue(maxsize=self.AHEAD)
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(steps,), name="roll_viz.noise", daemon=True
        )
        self.thread.start()

    def _run(self, steps: int) -> None:
        try:
            with torch.inference_mode():
                for _ in range(steps):
                    q = torch.empty(self.shape).exponential_(1, generator=self.generator)
                    while not self.stop.is_set():
                        try:
                            self.queue.put(q, timeout=0.1)
                            break
                        except queue.Full:
                            continue
                    if self.stop.is_set():
                        return
        except BaseException as err:  # surfaced by next()
            self.queue.put(err)

    def next(self) -> Tensor:
        """The next step's (num_sampled, V) noise; an error of the helper is raised here."""
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop the helper and wait for it (the generator is the caller's again)."""
        self.stop.set()
        self.thread.join()
