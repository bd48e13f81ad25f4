"""Suite-wide settings: hermetic by default (tiny model, no network)."""

import os

# Tests never load the real model unless a test marked `slow` asks for it explicitly.
os.environ.setdefault("ROLL_VIZ_MODEL", "tiny")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
