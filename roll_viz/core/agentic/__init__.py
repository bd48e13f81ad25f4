"""Multi-turn, tool-using episodes: the transcript record, its loss masks and credit per turn.

Pure Python and torch, like the rest of ``core``: ``episode`` (the records), ``masks`` (which
tokens get gradient, and the known mistakes), ``credit`` (advantage per turn and per token).
"""
