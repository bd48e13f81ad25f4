"""roll-viz: see how RL turns a language model's reward into a training signal."""

__version__ = "0.1.0"
